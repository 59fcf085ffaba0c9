"""--tp 2 against one device on a small Llama built here (no network): a reward model and DPO with a
reference on the demo sample, fp32 scores, each run timed; writes JSON. benchmarks/gpu_check.sh runs
it on machines with two GPUs (step 5); `--device cpu` runs it over two gloo ranks.

usage: python benchmarks/tp_check.py [--device cuda|cpu] [--out FILE] [--hidden 512] [--layers 4]"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", default="benchmarks/results/tp_check.json")
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=4)
    args = ap.parse_args()

    from rmbench_fast.cli.demo import DEMO_DATA
    from rmbench_fast.engine.score import ScoreOptions, score
    from rmbench_fast.inputs.data import load_dataset
    from rmbench_fast.tiny.models import build_trio, corpus, train_tokenizer

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tok = train_tokenizer(corpus(load_dataset(str(DEMO_DATA))), vocab_size=2048)
        trio = build_trio(Path(tmp) / "trio", tok, vocab_size=len(tok), hidden=args.hidden, layers=args.layers,
                          heads=8)
        for name, models in (("rm", dict(model=str(trio["rm"]))),
                             ("dpo", dict(model=str(trio["policy"]), ref_model=str(trio["reference"])))):
            o = ScoreOptions(data=str(DEMO_DATA), device=args.device, dtype="float32", cache=False, progress=False,
                             **models)
            got = {}
            for tp in (1, 2):
                t0 = time.perf_counter()
                run = score(replace(o, tp=tp))
                got[tp] = (run, time.perf_counter() - t0)
            (one, s1), (two, s2) = got[1], got[2]
            diff = max(float(np.abs(two.chosen - one.chosen).max()), float(np.abs(two.rejected - one.rejected).max()))
            rows.append({"scorer": name, "wall_s_tp1": s1, "wall_s_tp2": s2, "max_abs_diff": diff,
                         "same_accuracies": two.summary["domains"] == one.summary["domains"]})
            print(f"{name}: --tp 1 {s1:.1f} s, --tp 2 {s2:.1f} s, max |diff| {diff:.2e}, "
                  f"same accuracies: {rows[-1]['same_accuracies']}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"device": args.device, "hidden": args.hidden, "layers": args.layers,
                                          "rows": rows}, indent=2))
    if not all(r["max_abs_diff"] <= 1e-4 and r["same_accuracies"] for r in rows):
        raise SystemExit("--tp 2 disagrees with one device")


if __name__ == "__main__":
    main()

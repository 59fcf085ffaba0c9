"""Sweep benchmark: `rmbench-fast sweep` over K DPO checkpoints with a reference, against K
independent `rmbench-fast score` runs (each as its own process, no result store), same data.

    python benchmarks/sweep.py --k 4 --limit 4

A sweep computes the reference once and shares the tokenization: K + 1 model passes instead of
2K, in one process. Goal: sweep wall time <= 0.65x the independent runs. Results (with both
sides' accuracies, which must be identical) go to benchmarks/results/sweep-cpu.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--k", type=int, default=4, help="checkpoints")
    ap.add_argument("--data", default=str(REPO.parent / "shared" / "rm-bench"))
    ap.add_argument("--limit", type=int, default=4, help="prompts per domain")
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "sweep-cpu.json"))
    args = ap.parse_args(argv)

    import torch

    from rmbench_fast.inputs.data import load_dataset
    from rmbench_fast.tiny.models import build_model, corpus, llama_config, save_model, train_tokenizer

    work = Path(tempfile.mkdtemp(prefix="rmbench-sweep-bench-"))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    try:
        samples = load_dataset(args.data)
        tok = train_tokenizer(corpus(samples), args.vocab)
        cfg = dict(vocab_size=args.vocab, hidden=args.hidden, layers=args.layers, heads=max(1, args.hidden // 64),
                   max_positions=8192)
        ckpts = [str(save_model(build_model("lm", llama_config(**cfg), seed), tok, work / "run" / f"checkpoint-{100 * (seed + 1)}"))
                 for seed in range(args.k)]
        ref = str(save_model(build_model("lm", llama_config(**cfg), 99), tok, work / "ref"))
        common = ["--data", args.data, "--limit", str(args.limit), "--ref-model", ref, "--quiet", "--device", "cpu"]
        cli = [sys.executable, "-m", "rmbench_fast.cli.main"]

        t0 = time.perf_counter()
        for c in ckpts:
            subprocess.run(cli + ["score", "--model", c, "--output", str(work / "alone" / Path(c).name), "--no-cache"]
                           + common, check=True, env=env, capture_output=True)
        alone_s = time.perf_counter() - t0

        t0 = time.perf_counter()
        subprocess.run(cli + ["sweep", "--checkpoints", str(work / "run" / "checkpoint-*"), "--output",
                              str(work / "sweep"), "--cache-dir", str(work / "store")] + common,
                       check=True, env=env, capture_output=True)
        sweep_s = time.perf_counter() - t0

        sweep = json.loads((work / "sweep" / "sweep.json").read_text())
        same = all(json.loads((work / "alone" / r["checkpoint"] / "summary.json").read_text())["overall"] == r["overall"]
                   for r in sweep["checkpoints"])
        result = {
            "benchmark": "sweep", "k": args.k, "limit_per_domain": args.limit,
            "model": {**cfg, "dtype": "float32"},
            "independent_score_runs_s": alone_s, "sweep_s": sweep_s, "ratio": sweep_s / alone_s, "goal_ratio": 0.65,
            "model_passes": {"independent": 2 * args.k, "sweep": sweep["model_passes_computed"]},
            "identical_accuracies": same,
            "result_store": "independent runs: --no-cache; the sweep: a fresh, empty store (what it shares "
                            "between its own checkpoints is what is measured)",
            "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "torch": torch.__version__,
                        "torch_threads": torch.get_num_threads()},
            "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

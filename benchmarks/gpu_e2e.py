"""End-to-end DPO with a reference on a GPU: rmbench-fast against the official flow, same models
and data (step 3 of benchmarks/gpu_check.sh).

Builds a random-weight Llama-style policy and reference (default: a 1B-class shape, hidden 2048,
16 layers, V=128256, bf16) with a BPE tokenizer trained on the data, then runs, each as its own
process: rmbench-fast score (bf16, --no-cache: the engine is timed, not the result store) and,
when --peer-python is given, the official flow (benchmarks/peer/official_flow.py: rewardbench's
DPOInference, batches of 8, full-vocabulary log_softmax in bf16). Reports whole-process wall time,
scoring time (after the models are loaded), tokens/s of each and their ratios, peak GPU memory,
padding, and the largest score difference (bf16: the official path rounds its log_softmax to bf16).

    python benchmarks/gpu_e2e.py --data DATA --limit 20 --out OUT_DIR --peer-python /tmp/peer-python
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def build(root: Path, data: str, vocab: int, hidden: int, layers: int, heads: int, kv_heads: int, inter: int,
          tok_vocab: int, device: str) -> dict:
    import torch

    from rmbench_fast.data import load_dataset
    from rmbench_fast.tiny import build_model, corpus, llama_config, save_model, train_tokenizer

    tok = train_tokenizer(corpus(load_dataset(data)), tok_vocab)
    cfg = dict(vocab_size=vocab, hidden=hidden, layers=layers, heads=heads, kv_heads=kv_heads, intermediate=inter,
               max_positions=8192)
    paths, params = {}, 0
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    with torch.device(device):
        for name, seed in (("policy", 1), ("reference", 2)):
            model = build_model("lm", llama_config(**cfg), seed).to(dtype)
            params = sum(p.numel() for p in model.parameters())
            paths[name] = str(save_model(model, tok, root / name))
            del model
    return {"paths": paths, "params": params, "config": cfg}


def run(cmd, env, timeout, cwd) -> dict:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=cwd)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[:4]} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return {"wall_s": wall, "stdout": proc.stdout}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True)
    ap.add_argument("--limit", type=int, default=20)
    ap.add_argument("--out", required=True)
    ap.add_argument("--peer-python", default=None)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--vocab", type=int, default=128256)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--intermediate", type=int, default=8192)
    ap.add_argument("--tokenizer-vocab", type=int, default=8000)
    ap.add_argument("--work", default="/tmp/rmbench-gpu-e2e")
    ap.add_argument("--timeout", type=int, default=240, help="seconds for each flow")
    a = ap.parse_args(argv)
    out, work = Path(a.out), Path(a.work)
    out.mkdir(parents=True, exist_ok=True)
    dtype = "bfloat16" if a.device == "cuda" else "float32"
    t0 = time.perf_counter()
    models = build(work / "models", a.data, a.vocab, a.hidden, a.layers, a.heads, a.kv_heads, a.intermediate,
                   a.tokenizer_vocab, a.device)
    data = str(Path(a.data).resolve())  # the flows run in the work folder
    report = {"benchmark": "gpu_e2e_dpo_with_reference", "params": models["params"], "model": models["config"],
              "dtype": dtype, "limit_per_domain": a.limit, "build_s": time.perf_counter() - t0,
              "result_store": "off (--no-cache): the engine is timed"}
    print(f"built 2 x {models['params'] / 1e9:.2f}B params in {report['build_s']:.0f} s", flush=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    ours_dir = work / "ours"
    ours = run([sys.executable, "-m", "rmbench_fast", "score", "--model", models["paths"]["policy"], "--ref-model",
                models["paths"]["reference"], "--data", data, "--limit", str(a.limit), "--dtype", dtype,
                "--device", a.device, "--no-cache", "--quiet", "--overwrite", "--output", str(ours_dir)],
               env, a.timeout, work)
    r = json.loads((ours_dir / "run.json").read_text())
    tokens = r["real_tokens"] * r["passes"]
    report["ours"] = {"wall_s": ours["wall_s"], "score_s": r["score_s"], "tokens": tokens,
                      "tokens_per_s_wall": tokens / ours["wall_s"], "tokens_per_s_score": tokens / r["score_s"],
                      "padding_ratio": r["padding_ratio"], "logprob_impl": r["logprob_impl"],
                      "peak_gpu_gib": r["machine"]["peak_gpu_gib"],
                      "logprob_head": r["models"]["model"].get("logprob_head"),
                      "tuning": os.environ.get("RMBENCH_LOGPROB_TUNING", "1")}
    print("ours", json.dumps(report["ours"]), flush=True)
    (out / "gpu_e2e_dpo.json").write_text(json.dumps(report, indent=2) + "\n")
    if a.peer_python:
        off_json, timing = work / "official.json", work / "official-timing.json"
        official = run([a.peer_python, str(REPO / "benchmarks" / "peer" / "official_flow.py"), "--mode", "dpo",
                        "--model", models["paths"]["policy"], "--ref-model", models["paths"]["reference"], "--data",
                        data, "--limit", str(a.limit), "--dtype", dtype, "--device", a.device, "--output",
                        str(off_json), "--timing", str(timing)], env, a.timeout, work)
        t = json.loads(timing.read_text())
        report["official"] = {"wall_s": official["wall_s"], "score_s": t["score_s"], "tokens": tokens,
                              "tokens_per_s_wall": tokens / official["wall_s"], "tokens_per_s_score": tokens / t["score_s"],
                              "padding_ratio": t["padded_tokens"] / t["real_tokens"],
                              "peak_gpu_gib": t.get("peak_gpu_gib")}
        report["speedup_wall"] = official["wall_s"] / ours["wall_s"]
        report["speedup_score"] = t["score_s"] / r["score_s"]
        mine = json.loads((ours_dir / "results.json").read_text())
        theirs = {(x["domain"], x["id"]): x for x in json.loads(off_json.read_text())}
        diffs = [abs(p - q) for x in mine for k in ("score_chosen", "score_rejected")
                 for p, q in zip(x[k], theirs[(x["domain"], x["id"])][k])]
        report["max_abs_score_diff"] = max(diffs)
        report["goal_speedup"] = 6.0
        print("official", json.dumps(report["official"]), flush=True)
    (out / "gpu_e2e_dpo.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k not in ("ours", "official", "model")}, indent=1))


if __name__ == "__main__":
    main()

"""End-to-end DPO with a reference on a GPU: rmbench-fast against the official flow, same models
and data (step 3 of benchmarks/gpu_check.sh).

Builds a random-weight Llama-style policy and reference (default: a 1B-class shape, hidden 2048,
16 layers, V=128256, bf16) with a BPE tokenizer trained on the data, then runs, each as its own
process: rmbench-fast score (bf16, --no-cache: the engine is timed, not the result store) and,
when --peer-python is given, the official flow (benchmarks/peer/official_flow.py: rewardbench's
DPOInference, batches of 8, full-vocabulary log_softmax in bf16). Reports whole-process wall time,
scoring time (after the models are loaded), tokens/s of each and their ratios, peak GPU memory,
padding, and the largest score difference (bf16: the official path rounds its log_softmax to bf16).
Each flow's phases are reported too: ours from run.json (tokenization, per pass fingerprint /
load / batches), the official flow's from its --progress log (import, load, tokenization, forwards).
When the official flow does not finish within --official-timeout, it is stopped and its progress log gives
what it did: tokens/s over the batches it scored, and an extrapolated whole-process time (marked
as such); the whole-process speedup is then a lower bound.

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

    from rmbench_fast.inputs.data import load_dataset
    from rmbench_fast.tiny.models import build_model, corpus, llama_config, save_model, train_tokenizer

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


def run(cmd, env, timeout, cwd, allow_timeout=False) -> dict:
    """Run cmd; {"wall_s", "launched" (time.time()), "finished"}. A timeout kills it, and a failure
    is an error, unless allow_timeout (the official flow: then "error" holds stderr's tail)."""
    launched, t0 = time.time(), time.perf_counter()
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=cwd)
    except subprocess.TimeoutExpired:
        if not allow_timeout:
            raise
        return {"wall_s": time.perf_counter() - t0, "launched": launched, "finished": False}
    if proc.returncode != 0:
        if allow_timeout:
            return {"wall_s": time.perf_counter() - t0, "launched": launched, "finished": False,
                    "error": f"exit {proc.returncode}: {proc.stderr[-1500:]}"}
        raise RuntimeError(f"{cmd[:4]} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return {"wall_s": time.perf_counter() - t0, "launched": launched, "finished": True}


def official_phases(progress: Path, launched: float, n_models: int) -> dict:
    """Where the official flow's time went, from its --progress log (official_flow.py): seconds
    from launch to each phase, the time spent in `datasets.map` tokenization and in forwards, and
    the tokens it scored (real tokens x models). The tokenization is where run_dpo.py's
    `dataset.map(dpo.tokenize_row)` lets `datasets` fingerprint the bound method: dill pickles
    DPOInference with both models, every weight cast to fp32 and copied to the host, once per
    file and style (12 times), a cost that grows with the model; tokens_per_s_forward leaves it out."""
    events = []
    for line in progress.read_text().splitlines() if progress.is_file() else []:
        try:
            events.append(json.loads(line))
        except ValueError:  # the last line, cut by the kill at the time limit
            pass
    at = {}
    for e in events:
        at.setdefault(e["event"], e["t"] - launched)
    tokenize_s = forward_s = 0.0
    tokens = batches = 0
    for prev, e in zip(events, events[1:]):
        if e["event"] == "tokenized":
            tokenize_s += e["t"] - prev["t"]
        elif e["event"] == "batch":
            forward_s += e["t"] - prev["t"]
            tokens, batches = tokens + e["real"] * n_models, batches + 1
    last = events[-1]["t"] - launched if events else 0.0
    return {"seconds_from_launch": {k: at[k] for k in ("start", "imported", "loaded", "done") if k in at},
            "last_event_s": last, "tokenize_s": tokenize_s, "forward_s": forward_s, "batches": batches,
            "tokens_scored": tokens, "tokens_per_s_forward": tokens / forward_s if forward_s else None,
            "tokens_per_s_scoring": tokens / (last - at["loaded"]) if "loaded" in at and last > at["loaded"] else None}


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
    ap.add_argument("--timeout", type=int, default=240, help="seconds for rmbench-fast (an error past it)")
    ap.add_argument("--official-timeout", type=int, default=None,
                    help="seconds for the official flow, stopped past it and reported from its progress log "
                         "[default: --timeout]")
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
    phases = {"process_start_and_imports_s": ours["wall_s"] - r["wall_s"], "tokenize_s": r["tokenize_s"],
              **{f"{role}_{k}": m.get(k) for role, m in r["models"].items()
                 for k in ("fingerprint_s", "load_s", "first_batch_s", "batches_s")}}
    report["ours"] = {"wall_s": ours["wall_s"], "score_s": r["score_s"], "tokens": tokens,
                      "tokens_per_s_wall": tokens / ours["wall_s"], "tokens_per_s_score": tokens / r["score_s"],
                      "padding_ratio": r["padding_ratio"], "logprob_impl": r["logprob_impl"],
                      "peak_gpu_gib": r["machine"]["peak_gpu_gib"], "phases": phases,
                      "logprob_head": r["models"]["model"].get("logprob_head"),
                      "tuning": os.environ.get("RMBENCH_LOGPROB_TUNING", "1")}
    print("ours", json.dumps(report["ours"]), flush=True)
    (out / "gpu_e2e_dpo.json").write_text(json.dumps(report, indent=2) + "\n")
    if a.peer_python:
        off_json, timing, progress = work / "official.json", work / "official-timing.json", work / "official-progress.jsonl"
        for f in (off_json, timing, progress):
            f.unlink(missing_ok=True)
        peer = os.path.abspath(a.peer_python) if os.sep in a.peer_python else a.peer_python  # runs in `work`
        official = run([peer, str(REPO / "benchmarks" / "peer" / "official_flow.py"), "--mode", "dpo",
                        "--model", models["paths"]["policy"], "--ref-model", models["paths"]["reference"], "--data",
                        data, "--limit", str(a.limit), "--dtype", dtype, "--device", a.device, "--output",
                        str(off_json), "--timing", str(timing), "--progress", str(progress)], env,
                       a.official_timeout or a.timeout, work,
                       allow_timeout=True)
        seen = official_phases(progress, official["launched"], n_models=2)
        report["goal_speedup"] = 6.0
        if official["finished"]:
            t = json.loads(timing.read_text())
            report["official"] = {"finished": True, "wall_s": official["wall_s"], "score_s": t["score_s"],
                                  "tokens": tokens, "tokens_per_s_wall": tokens / official["wall_s"],
                                  "tokens_per_s_score": tokens / t["score_s"],
                                  "padding_ratio": t["padded_tokens"] / t["real_tokens"],
                                  "peak_gpu_gib": t.get("peak_gpu_gib"), "phases": seen}
            report["speedup_wall"] = official["wall_s"] / ours["wall_s"]
            report["speedup_score"] = t["score_s"] / r["score_s"]
            mine = json.loads((ours_dir / "results.json").read_text())
            theirs = {(x["domain"], x["id"]): x for x in json.loads(off_json.read_text())}
            report["max_abs_score_diff"] = max(abs(p - q) for x in mine for k in ("score_chosen", "score_rejected")
                                               for p, q in zip(x[k], theirs[(x["domain"], x["id"])][k]))
        else:  # stopped at --timeout: what its progress log shows, and an extrapolation marked as such
            rate = seen["tokens_per_s_scoring"]
            loaded = seen["seconds_from_launch"].get("loaded")
            report["official"] = {
                "finished": False, "stopped_after_s": official["wall_s"], "phases": seen,
                **({"error": official["error"]} if "error" in official else {}),
                "tokens_per_s_score": rate,
                "extrapolated_wall_s": (loaded + tokens / rate) if rate and loaded is not None else None}
            if "error" not in official:  # stopped by the time limit: it would have taken longer
                report["speedup_wall_lower_bound"] = official["wall_s"] / ours["wall_s"]
            if rate:
                report["speedup_score"] = report["ours"]["tokens_per_s_score"] / rate
                report["speedup_wall_extrapolated"] = report["official"]["extrapolated_wall_s"] / ours["wall_s"]
        print("official", json.dumps(report["official"]), flush=True)
    (out / "gpu_e2e_dpo.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k not in ("ours", "official", "model")}, indent=1))


if __name__ == "__main__":
    main()

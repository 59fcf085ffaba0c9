"""Throughput benchmark: rmbench-fast against the official RM-Bench flow, same model, data, machine.

    bash benchmarks/peer/setup.sh            # once: the official flow's environment
    python benchmarks/throughput.py --limit 20 --rounds 3     (= rmbench-fast bench ...)

Each round runs, per mode (rm, dpo with a reference, dpo reference-free avg), rmbench-fast and the
official flow (benchmarks/peer/official_flow.py in the peer environment, allenai's rewardbench
0.1.4) one after the other as subprocesses on the same files, and records wall time, peak RSS
(os.wait4 of each process), real and padded tokens, and the largest per-sample score difference
between the two. rmbench-fast runs with --compat official, so both score the same tokens, and with
--no-cache: the benchmark times the engine, never the result store.

Reported per mode: medians over rounds of wall time and real tokens/s (the same token count for
both: the real tokens of the sequences times the model passes), the speed ratio ours/official,
padded/real tokens, peak RSS and its ratio, and the model-FLOP efficiency: model FLOPs of the real
tokens / wall time / the fp32 matmul rate measured on this machine in this run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the checkout's package, also when run as a plain script
PEER = REPO / "benchmarks" / "peer"
MODES = ("rm", "dpo", "dpo-ref-free")


def build_models(dest: Path, data: str, vocab: int, hidden: int, layers: int, heads: int) -> dict:
    """A random-weight Llama-style RM, policy and reference with a BPE tokenizer trained on the data
    (no chat template: the official default, fastchat's tulu, applies). Built once per shape."""
    from rmbench_fast.inputs.data import load_dataset
    from rmbench_fast.tiny.models import build_trio, corpus, train_tokenizer

    if (dest / "COMPLETE").is_file():
        return build_trio(dest, None)
    tok = train_tokenizer(corpus(load_dataset(data)), vocab)
    return build_trio(dest, tok, vocab_size=vocab, hidden=hidden, layers=layers, heads=heads, max_positions=8192)


def _spawn_wait4(cmd: list[str], env=None) -> dict:
    """Run a command; its wall time and its own peak RSS (from wait4)."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as so, tempfile.TemporaryFile() as se:
        proc = subprocess.Popen(cmd, stdout=so, stderr=se, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t0
        so.seek(0)
        se.seek(0)
        out, err = so.read().decode(), se.read().decode()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd[:6]))} ... failed ({proc.returncode}):\n{err[-3000:]}")
    return {"wall_s": wall, "peak_rss_mib": usage.ru_maxrss / 1024, "stdout": out, "stderr": err}


def matmul_gflops(seconds: float = 3.0) -> float:
    """The fp32 matmul rate of this machine now (2048^3 products, best of a few)."""
    import torch

    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    a @ b
    best, t_end = 0.0, time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        t0 = time.perf_counter()
        a @ b
        best = max(best, 2 * 2048**3 / (time.perf_counter() - t0) / 1e9)
    return best


def model_flops(run: dict, cfg: dict, mode: str, seq_lengths: list[int], scored: int) -> float:
    """Forward FLOPs of the real tokens: 2 x non-embedding parameters per token, attention scores
    and values (4 x layers x hidden x position per token), and for DPO the LM head at the scored
    positions only (what the computation needs, not what either pipeline spends)."""
    h, layers, inter, vocab = cfg["hidden"], cfg["layers"], cfg["intermediate"], cfg["vocab"]
    per_token = 2 * layers * (4 * h * h + 3 * h * inter)
    attention = sum(4 * layers * h * (n * (n + 1) / 2) for n in seq_lengths)
    flops = per_token * sum(seq_lengths) + attention
    if mode != "rm":
        flops += 2 * h * vocab * scored
    passes = 2 if mode == "dpo" else 1
    return passes * flops


def parity(ours_path: Path, official_path: Path) -> float:
    a = json.loads(ours_path.read_text())
    b = json.loads(official_path.read_text())
    key = lambda x: (x["domain"], x["id"])  # noqa: E731
    bmap = {key(x): x for x in b}
    worst = 0.0
    for x in a:
        y = bmap[key(x)]
        for k in ("score_chosen", "score_rejected"):
            worst = max(worst, max(abs(p - q) for p, q in zip(x[k], y[k])))
    return worst


def run(data: str, limit: int, rounds: int, modes, out: str | None, model_dir: str | None, vocab: int, hidden: int,
        layers: int, heads: int, peer_python: str | None, echo=print, share_prefix: bool = False) -> dict:
    import torch

    peer_py = peer_python or str(PEER / ".venv" / "bin" / "python")
    if not Path(peer_py).exists():
        raise SystemExit(f"no peer environment at {peer_py}: run `bash benchmarks/peer/setup.sh` first")
    cache = Path(model_dir) if model_dir else REPO / "benchmarks" / ".cache" / f"llama-v{vocab}-h{hidden}-l{layers}"
    echo(f"models: {cache}")
    paths = build_models(cache, data, vocab, hidden, layers, heads)
    cfg = {"vocab": vocab, "hidden": hidden, "layers": layers, "intermediate": 4 * hidden}
    gflops = matmul_gflops()
    echo(f"fp32 matmul rate on this machine: {gflops:.1f} GFLOP/s")
    echo("rmbench-fast runs with --no-cache: every round times the engine, not the result store")
    work = Path(tempfile.mkdtemp(prefix="rmbench-bench-"))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    rows = {m: {"ours": [], "official": []} for m in modes}
    try:
        for r in range(rounds):
            for mode in modes:
                ours_out, off_out = work / f"ours-{mode}-{r}", work / f"official-{mode}-{r}.json"
                model = paths["rm"] if mode == "rm" else paths["policy"]
                ours_cmd = [sys.executable, "-m", "rmbench_fast", "score", "--model", str(model), "--data", data,
                            "--limit", str(limit), "--output", str(ours_out), "--compat", "official", "--quiet", "--no-cache",
                            "--device", "cpu", "--dtype", "float32"]
                off_cmd = [peer_py, str(PEER / "official_flow.py"), "--mode", "rm" if mode == "rm" else "dpo",
                           "--model", str(model), "--data", data, "--limit", str(limit), "--output", str(off_out),
                           "--dtype", "float32"]
                if share_prefix:
                    ours_cmd += ["--share-prefix"]
                if mode == "dpo":
                    ours_cmd += ["--ref-model", str(paths["reference"])]
                    off_cmd += ["--ref-model", str(paths["reference"])]
                elif mode == "dpo-ref-free":
                    ours_cmd += ["--ref-free", "avg"]
                    off_cmd += ["--ref-free", "avg"]
                o = _spawn_wait4(ours_cmd, env)
                f = _spawn_wait4(off_cmd, env)
                run = json.loads((ours_out / "run.json").read_text())
                off_info = json.loads(f["stdout"].strip().splitlines()[-1])
                flops = model_flops(run, cfg, mode, run["sequences"]["lengths"], run["sequences"]["scored_tokens"])
                tokens = run["real_tokens"] * run["passes"]
                rows[mode]["ours"].append({"wall_s": o["wall_s"], "peak_rss_mib": o["peak_rss_mib"],
                                           "tokens_per_s": tokens / o["wall_s"],
                                           "padding_ratio": run["padding_ratio"], "score_s": run["score_s"],
                                           "mfu": flops / o["wall_s"] / (gflops * 1e9)})
                rows[mode]["official"].append({"wall_s": f["wall_s"], "peak_rss_mib": f["peak_rss_mib"],
                                               "tokens_per_s": tokens / f["wall_s"],
                                               "padding_ratio": off_info["padded_tokens"] / off_info["real_tokens"],
                                               "mfu": flops / f["wall_s"] / (gflops * 1e9)})
                rows[mode].setdefault("parity_max_abs_diff", []).append(parity(ours_out / "results.json", off_out))
                rows[mode]["real_tokens"] = tokens
                rows[mode]["model_flops"] = flops
                echo(f"round {r + 1}/{rounds} {mode:>12}: ours {o['wall_s']:.1f}s ({o['peak_rss_mib']:.0f} MiB), "
                     f"official {f['wall_s']:.1f}s ({f['peak_rss_mib']:.0f} MiB), "
                     f"parity {rows[mode]['parity_max_abs_diff'][-1]:.2e}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    # the machine's rate drifts (shared VM): the best of a measurement before and after the rounds
    after = matmul_gflops()
    if after > gflops:
        for mode in modes:
            for side in ("ours", "official"):
                for row in rows[mode][side]:
                    row["mfu"] *= gflops / after
        gflops = after

    med = lambda xs, k: statistics.median(x[k] for x in xs)  # noqa: E731
    summary = {}
    for mode in modes:
        ours, off = rows[mode]["ours"], rows[mode]["official"]
        summary[mode] = {
            "ours": {k: med(ours, k) for k in ("wall_s", "tokens_per_s", "peak_rss_mib", "padding_ratio", "mfu")},
            "official": {k: med(off, k) for k in ("wall_s", "tokens_per_s", "peak_rss_mib", "padding_ratio", "mfu")},
            "speedup": statistics.median(o["tokens_per_s"] / f["tokens_per_s"] for o, f in zip(ours, off)),
            "peak_rss_ratio": statistics.median(o["peak_rss_mib"] / f["peak_rss_mib"] for o, f in zip(ours, off)),
            "parity_max_abs_diff": max(rows[mode]["parity_max_abs_diff"]),
            "real_tokens_per_run": rows[mode]["real_tokens"],
            # what any implementation computing these FLOPs could reach: every FLOP at the measured
            # matmul rate, no start-up, no padding, against the official flow's median wall time
            "speedup_bound": med(off, "wall_s") / (rows[mode]["model_flops"] / (gflops * 1e9)),
        }
    result = {
        "benchmark": "throughput",
        "machine": {"platform": platform.platform(), "processor": platform.processor(), "cpus": os.cpu_count(),
                    "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
                    "matmul_fp32_gflops": gflops},
        "model": {**cfg, "heads": heads, "dtype": "float32"},
        "data": data, "limit_per_domain": limit, "rounds": rounds, "ours_share_prefix": share_prefix,
        "result_store": "off (--no-cache): the engine is timed",
        "goals": {"rm_speedup": 2.0, "dpo_speedup": 4.0, "dpo_peak_rss_ratio": 0.2, "padding_ratio": 1.03,
                  "mfu": 0.6},
        "summary": summary,
        "rounds_detail": rows,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    path = Path(out) if out else REPO / "benchmarks" / "results" / "throughput-cpu.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    echo(markdown_table(result))
    echo(f"wrote {path}")
    return result


def markdown_table(result: dict) -> str:
    lines = ["| mode | ours tokens/s | official tokens/s | speedup | ours peak RSS | official peak RSS | RSS ratio "
             "| padded/real (ours / official) | model-FLOP efficiency (ours / official) | max score diff "
             "| speedup bound |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for mode, s in result["summary"].items():
        o, f = s["ours"], s["official"]
        lines.append(f"| {mode} | {o['tokens_per_s']:,.0f} | {f['tokens_per_s']:,.0f} | {s['speedup']:.2f}x | "
                     f"{o['peak_rss_mib']:,.0f} MiB | {f['peak_rss_mib']:,.0f} MiB | {s['peak_rss_ratio']:.2f} | "
                     f"{o['padding_ratio']:.3f} / {f['padding_ratio']:.3f} | {o['mfu']:.2f} / {f['mfu']:.2f} | "
                     f"{s['parity_max_abs_diff']:.1e} | {s['speedup_bound']:.2f}x |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(REPO.parent / "shared" / "rm-bench"), help="RM-Bench folder both flows read")
    ap.add_argument("--limit", type=int, default=20, help="prompts per domain (default 20: start-up amortised)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds; medians are reported")
    ap.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    ap.add_argument("--out", default=None, help="JSON file [default: benchmarks/results/throughput-cpu.json]")
    ap.add_argument("--model-dir", default=None, help="where the random-weight models are built once")
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--peer-python", default=None, help="Python of the official flow's environment "
                    "[default: benchmarks/peer/.venv, made by benchmarks/peer/setup.sh]")
    ap.add_argument("--share-prefix", action="store_true", help="run rmbench-fast with --share-prefix")
    a = ap.parse_args(argv)
    run(a.data, a.limit, a.rounds, a.modes, a.out, a.model_dir, a.vocab, a.hidden, a.layers, a.heads, a.peer_python,
        share_prefix=a.share_prefix)


if __name__ == "__main__":
    main()

"""Benchmark of the fused log-prob op: peak memory and time against the alternatives.

For N response tokens, a V-token vocabulary and hidden size d, each method turns H [N, d] and
W [V, d] into the N target log-probs:
  official   logits = H @ W^T, then log_softmax(-1).gather (the official rewardbench path), in the
             model dtype
  trl        row chunks of 1024: logits of the chunk, then logsumexp-based selective log-softmax
  matmul     the bare H @ W^T (the floor: every method does this much arithmetic)
  fused      rmbench_fast.kernels (Triton on CUDA, chunked online log-sum-exp in torch on CPU)
Each (method, shape) runs in its own subprocess, after one warm-up call, so its peak memory is its
own: extra peak = peak resident memory (CPU, VmHWM after a reset) or peak allocated memory (CUDA)
minus what the process held before the timed calls (inputs, libraries).

    python benchmarks/logprob_op.py                     # the full grid, CPU fp32
    python benchmarks/logprob_op.py --device cuda       # bf16 on the GPU
    python benchmarks/logprob_op.py --shapes 1024x32000x256

Results: JSON under benchmarks/results/ (or --out).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

METHODS = ("official", "trl", "matmul", "fused")
GRID = [(n, v, d) for n in (1024, 8192) for v in (32000, 128256) for d in (256, 1024)]
RESULTS = Path(__file__).resolve().parent / "results"


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak_rss_bytes() -> int:
    """VmHWM: the resident high-water mark since the last reset."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def _reset_peak_rss() -> None:
    with open("/proc/self/clear_refs", "w") as f:  # "5" resets VmHWM to the current RSS
        f.write("5")


def child(method: str, n: int, v: int, d: int, device: str, dtype_name: str, repeats: int) -> dict:
    """Runs in a fresh process: inputs, one method, its time and extra peak memory."""
    import torch

    from rmbench_fast.kernels import linear_logprobs

    dtype = getattr(torch, dtype_name)
    torch.manual_seed(0)
    h = torch.randn(n, d, device=device, dtype=dtype)
    w = torch.randn(v, d, device=device, dtype=dtype) * 0.05
    t = torch.randint(0, v, (n,), device=device)
    cuda = device.startswith("cuda")

    def run():
        if method == "official":
            return (h @ w.T).log_softmax(-1).gather(1, t[:, None]).squeeze(1)
        if method == "trl":
            out = []
            for s in range(0, n, 1024):
                logits = h[s:s + 1024] @ w.T
                picked = logits.gather(1, t[s:s + 1024, None]).squeeze(1).float()
                out.append(picked - torch.logsumexp(logits.float(), dim=-1))
            return torch.cat(out)
        if method == "matmul":
            return h @ w.T
        return linear_logprobs(h, w, t)

    def sync():
        if cuda:
            torch.cuda.synchronize()

    out = run()  # warm up: kernels compile, libraries load their workspaces
    sync()
    del out
    if cuda:
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        _reset_peak_rss()
        base = _rss_bytes()
    times = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        out = run()
        sync()
        times.append(time.perf_counter() - t0)
        del out
    peak = (torch.cuda.max_memory_allocated() if cuda else _peak_rss_bytes()) - base
    return {"method": method, "N": n, "V": v, "d": d, "time_s": statistics.median(times), "times_s": times,
            "extra_peak_mib": max(peak, 0) / 2**20, "tflops": 2 * n * v * d / statistics.median(times) / 1e12}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default=None, help="default: float32 on CPU, bfloat16 on CUDA")
    ap.add_argument("--shapes", nargs="*", default=None, help="NxVxd ... (default: the full grid)")
    ap.add_argument("--methods", nargs="*", default=list(METHODS), choices=METHODS)
    ap.add_argument("--repeats", type=int, default=None, help="default: 2 on CPU, 10 on CUDA")
    ap.add_argument("--out", default=None, help="JSON file (default: benchmarks/results/logprob_op-DEVICE.json)")
    ap.add_argument("--update", action="store_true", help="keep the rows of other shapes already in --out")
    ap.add_argument("--child", nargs=7, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        m, n, v, d, device, dtype, repeats = args.child
        print(json.dumps(child(m, int(n), int(v), int(d), device, dtype, int(repeats))))
        return
    cuda = args.device.startswith("cuda")
    dtype = args.dtype or ("bfloat16" if cuda else "float32")
    repeats = args.repeats or (10 if cuda else 2)
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes] if args.shapes else GRID
    rows = []
    for n, v, d in shapes:
        for m in args.methods:
            proc = subprocess.run([sys.executable, __file__, "--child", m, str(n), str(v), str(d), args.device, dtype,
                                   str(repeats)], capture_output=True, text=True)
            if proc.returncode != 0:
                row = {"method": m, "N": n, "V": v, "d": d, "error": proc.stderr.strip().splitlines()[-1:]}
            else:
                row = json.loads(proc.stdout.strip().splitlines()[-1])
            rows.append(row)
            print(json.dumps(row), flush=True)
    # ratios against the bare matmul of the same shape
    floor = {(r["N"], r["V"], r["d"]): r["time_s"] for r in rows if r["method"] == "matmul" and "time_s" in r}
    for r in rows:
        if "time_s" in r and (r["N"], r["V"], r["d"]) in floor:
            r["time_vs_matmul"] = r["time_s"] / floor[(r["N"], r["V"], r["d"])]
    import torch

    out = {
        "benchmark": "logprob_op",
        "device": args.device,
        "dtype": dtype,
        "machine": {"platform": platform.platform(), "processor": platform.processor(), "cpus": os.cpu_count(),
                    "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
                    "gpu": torch.cuda.get_device_name() if cuda else None},
        "goals": {"extra_peak_mib_at_8192x128256": 64, "time_vs_matmul": 1.15},
        "rows": rows,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    path = Path(args.out) if args.out else RESULTS / f"logprob_op-{'cuda' if cuda else 'cpu'}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    if args.update and path.is_file():  # re-measured shapes replace their old rows
        fresh = {(r["N"], r["V"], r["d"]) for r in rows}
        old = [r for r in json.loads(path.read_text())["rows"] if (r["N"], r["V"], r["d"]) not in fresh]
        out["rows"] = rows = sorted(old + rows, key=lambda r: (r["N"], r["V"], r["d"], METHODS.index(r["method"])))
        shapes = sorted({(r["N"], r["V"], r["d"]) for r in rows})
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {path}")
    print(f"{'N':>6} {'V':>7} {'d':>5}  " + "  ".join(f"{m:>22}" for m in args.methods))
    for n, v, d in shapes:
        cells = []
        for m in args.methods:
            r = next(x for x in rows if x["method"] == m and (x["N"], x["V"], x["d"]) == (n, v, d))
            cells.append(f"{r['time_s']:8.3f}s {r['extra_peak_mib']:8.0f}MiB" if "time_s" in r else f"{'error':>22}")
        print(f"{n:>6} {v:>7} {d:>5}  " + "  ".join(f"{c:>22}" for c in cells))


if __name__ == "__main__":
    main()

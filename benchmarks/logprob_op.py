"""Benchmark of the fused log-prob op: time and extra peak memory against the alternatives.

For N response tokens, a V-token vocabulary and hidden size d, each method turns H [N, d] and
W [V, d] into the N target log-probs:
  official   logits = H @ W^T, then log_softmax(-1).gather (the official rewardbench path), in the
             model dtype
  trl        (CPU) row chunks of 1024: logits of the chunk, then logsumexp-based selective log-softmax
  matmul     the bare H @ W^T (the floor: every method does this much arithmetic)
  torch      (CUDA) the chunked torch path (Liger style: chunked matmul + fp32 log-sum-exp)
  fused      rmbench_fast.kernels: on CPU its default (the torch path), on CUDA the Triton kernel
  auto       (CUDA) impl="auto": the faster of the two per shape, timed once per process

CPU: each (method, shape) runs in its own subprocess, after one warm-up call, so its peak memory
is its own: extra peak = peak resident memory (VmHWM after a reset) minus what the process held
before the timed calls. CUDA: every method and shape in one process (compilation and autotuning
once), timed with CUDA events after warm-ups; extra peak = torch.cuda.max_memory_allocated()
during one call minus the memory allocated before it. The CUDA shapes are real LM heads
(Llama-3 8B, Qwen2.5 7B and 3B, Gemma-2 9B with soft-capping 30) at N = 1024 ... 16384; the JSON
also records the autotuned tile configuration and what `auto` picked per shape.

    python benchmarks/logprob_op.py                     # the CPU grid, fp32
    python benchmarks/logprob_op.py --device cuda       # the real shapes in bf16, one process
    python benchmarks/logprob_op.py --shapes 1024x32000x256 [4096x256000x3584x30 (softcap 30)]
    TRITON_INTERPRET=1 python benchmarks/logprob_op.py --one-process --shapes 40x500x32x30
                                                        # smoke test of the CUDA code path on CPU

Results: JSON under benchmarks/results/ (or --out).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling module below, also under python -P
from logprob_op_measure import CUDA_METHODS, CUDA_SHAPES, GRID, METHODS, child, one_process, parse_shape  # noqa: E402

GOALS = {"fused_time_vs_matmul_at_n_ge_4096": 1.15, "fused_time_vs_matmul_at_n_1024": 1.5,
         "fused_extra_peak_mib": 64}
RESULTS = Path(__file__).resolve().parent / "results"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default=None, help="default: float32 on CPU, bfloat16 on CUDA")
    ap.add_argument("--shapes", nargs="*", default=None,
                    help="NxVxd or NxVxdxSOFTCAP ... (default: the CPU grid, or the real heads on CUDA)")
    ap.add_argument("--methods", nargs="*", default=None, choices=sorted(set(METHODS + CUDA_METHODS)),
                    help=f"default: {' '.join(METHODS)} on CPU, {' '.join(CUDA_METHODS)} on CUDA")
    ap.add_argument("--one-process", action="store_true",
                    help="the CUDA mode (all in one process) on any device: with TRITON_INTERPRET=1 and tiny "
                         "shapes, a smoke test of the CUDA code path on CPU")
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
    if cuda or args.one_process:
        return main_one_process(args, dtype, repeats)
    args.methods = args.methods or list(METHODS)
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


def _goals_met(rows) -> dict:
    """Each goal: True / False over the rows it concerns, None when no row does (not measured)."""
    fused = [r for r in rows if r["method"] == "fused" and "time_vs_matmul" in r]

    def met(concerned, ok):
        return all(map(ok, concerned)) if concerned else None

    return {
        "fused_time_vs_matmul_at_n_ge_4096": met([r for r in fused if r["N"] >= 4096], lambda r: r["time_vs_matmul"]
                                                 <= GOALS["fused_time_vs_matmul_at_n_ge_4096"]),
        "fused_time_vs_matmul_at_n_1024": met([r for r in fused if r["N"] <= 1024], lambda r: r["time_vs_matmul"]
                                              <= GOALS["fused_time_vs_matmul_at_n_1024"]),
        "fused_extra_peak_mib": met(fused, lambda r: (r.get("extra_peak_mib") or 0) <= GOALS["fused_extra_peak_mib"]),
    }


def main_one_process(args, dtype: str, repeats: int):
    import torch

    t_start = time.perf_counter()
    methods = args.methods or list(CUDA_METHODS)
    shapes = [parse_shape(s) for s in args.shapes] if args.shapes else CUDA_SHAPES
    rows = one_process(shapes, methods, args.device, dtype, repeats)
    key = lambda r: (r["N"], r["V"], r["d"], r["softcap"])  # noqa: E731
    floor = {key(r): r["time_s"] for r in rows if r["method"] == "matmul" and "time_s" in r}
    for r in rows:
        if "time_s" in r and key(r) in floor:
            r["time_vs_matmul"] = r["time_s"] / floor[key(r)]
    cuda = args.device.startswith("cuda")
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    out = {
        "benchmark": "logprob_op",
        "device": args.device,
        "dtype": dtype,
        "mode": "one process",
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "torch": torch.__version__,
                    "triton": triton_version, "gpu": torch.cuda.get_device_name() if cuda else None,
                    "triton_interpret": os.environ.get("TRITON_INTERPRET")},
        "goals": GOALS,
        "goals_met": _goals_met(rows),
        "wall_s": time.perf_counter() - t_start,
        "rows": rows,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    path = Path(args.out) if args.out else RESULTS / f"logprob_op-{'cuda' if cuda else 'cpu-one-process'}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {path} ({out['wall_s']:.0f} s)")
    print(f"{'N':>6} {'V':>7} {'d':>5} {'cap':>4}  " + "  ".join(f"{m + ' ms, x matmul, MiB':>28}" for m in methods)
          + "  auto    fused config")
    for shape in dict.fromkeys(key(r) for r in rows):
        cells, extra = [], ""
        for m in methods:
            r = next(x for x in rows if x["method"] == m and key(x) == shape)
            if "time_s" not in r:
                cells.append(f"{'error':>28}")
                continue
            mib = "" if r.get("extra_peak_mib") is None else f"{r['extra_peak_mib']:7.0f}"
            cells.append(f"{r['time_s'] * 1e3:10.2f} {r.get('time_vs_matmul', float('nan')):6.2f}x {mib:>9}")
            if m == "auto":
                extra = f"{r['auto_pick']:>6}  " + extra
            if m == "fused":
                c = r["config"]
                extra += f"{c['BLOCK_N']}x{c['BLOCK_V']}x{c['BLOCK_D']} w{c['num_warps']} s{c['num_stages']}"
        n, v, d, cap = shape
        print(f"{n:>6} {v:>7} {d:>5} {cap or '-':>4}  " + "  ".join(cells) + "  " + extra)
    print("goals met:", json.dumps(out["goals_met"]))


if __name__ == "__main__":
    main()

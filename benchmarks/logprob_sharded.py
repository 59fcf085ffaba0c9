"""Benchmark: log-probs from a vocabulary-sharded LM head over R gloo ranks on CPU: combine per-shard
partials, or gather the head once per pass and run the unsharded op.

Each rank holds rows [start, start + V/R) of W [V, d] and the same H [N, d] and targets (as under
tensor parallelism, where the last layer's output is replicated). Methods, per batch of N rows:
  sharded      rmbench_fast.kernels.logprob_sharded.sharded_logprobs: the shard's (max, sum-exp,
               target) partials, then one all_gather of 3 N floats per rank (the default combine)
  sharded_all_reduce  the same partials, combined by two all_reduces of 2 N floats (MAX of [m; t],
               SUM of [s * exp(m - M); hits])
  sharded_partials_only  the partials alone; combine_*_only: the combine alone (best of 50)
  gathered     the head gathered to every rank (all_gather of W, once per pass), then the unsharded
               torch op (chunked_linear_logprobs) on the whole head, every rank all N rows
  gathered_rows  the same gathered head, each rank N/R of the rows, then an all_gather of the
               N/R results (the gathered head used data-parallel)
plus `gather_head`, the one-off all_gather of W (and its extra memory per rank: the other shards).
A pass of B batches costs B * t(sharded), or gather_head + B * t(gathered...): the JSON gives the
per-batch cost amortised over B = 1, 10, 100, 1000 and which method is fastest at each.

Timing: each timed call starts after a barrier; a call's time is the slowest rank's (a pass waits
for it), best of --repeats after one warm-up. Each rank runs --threads torch threads (default 1:
R ranks share the machine's cores, as R devices would not share anything).

    python benchmarks/logprob_sharded.py                          # N = 64, 512, 2048; V = 32000; d = 1024
    python benchmarks/logprob_sharded.py --shapes 256x1000x64 --out /tmp/x.json   # a quick smoke run

Results: benchmarks/results/logprob-sharded-cpu.json (or --out).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
SHAPES = ["64x32000x1024", "512x32000x1024", "2048x32000x1024"]
PASSES = [1, 10, 100, 1000]


def _rank(rank: int, world: int, rdv: str, out: str, shapes, dtype_name: str, repeats: int, threads: int):
    import torch
    import torch.distributed as dist

    from rmbench_fast.kernels.logprob_sharded import combine_partials, sharded_logprobs
    from rmbench_fast.kernels.logprob_torch import chunked_linear_logprobs

    torch.set_num_threads(threads)
    dist.init_process_group("gloo", init_method=f"file://{rdv}", rank=rank, world_size=world)
    dtype = getattr(torch, dtype_name)

    def timed(fn, reps=None):
        """(best seconds of the slowest rank, the last result), after one warm-up call."""
        result = fn()
        best = float("inf")
        for _ in range(reps or repeats):
            dist.barrier()
            t0 = time.perf_counter()
            result = fn()
            took = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
            dist.all_reduce(took, op=dist.ReduceOp.MAX)
            best = min(best, float(took))
        return best, result

    rows = []
    for n, v, d in shapes:
        if v % world:
            raise SystemExit(f"V = {v} is not a multiple of {world} ranks")
        vs = v // world
        start = rank * vs
        g = torch.Generator().manual_seed(0)
        h = torch.randn(n, d, generator=g).to(dtype)  # the same on every rank
        targets = torch.randint(0, v, (n,), generator=g)
        w = (torch.randn(vs, d, generator=torch.Generator().manual_seed(1 + rank)) * 0.05).to(dtype)

        t_sharded, lp_sharded = timed(lambda: sharded_logprobs(h, w, start, targets))
        t_reduce, lp_reduce = timed(lambda: sharded_logprobs(h, w, start, targets, collective="all_reduce"))

        def gather_head():
            parts = [torch.empty_like(w) for _ in range(world)]
            dist.all_gather(parts, w)
            return torch.cat(parts)

        t_gather, full = timed(gather_head)
        t_gathered, lp_gathered = timed(lambda: chunked_linear_logprobs(h, full, targets))
        mine = slice(rank * n // world, (rank + 1) * n // world)  # N need not divide: pad to the largest

        def gathered_rows():
            lp = chunked_linear_logprobs(h[mine], full, targets[mine])
            size = -(-n // world)
            buf = torch.full((size,), float("nan"))
            buf[:lp.shape[0]] = lp
            parts = [torch.empty(size) for _ in range(world)]
            dist.all_gather(parts, buf)
            return torch.cat([p[:(r + 1) * n // world - r * n // world] for r, p in enumerate(parts)])

        t_rows, lp_rows = timed(gathered_rows)
        t_partials, parts = timed(lambda: _partials_only(h, w, start, targets))
        t_cg, _ = timed(lambda: combine_partials(*parts, targets=targets, shard_size=vs), 50)
        t_cr, _ = timed(lambda: combine_partials(*parts, targets=targets, shard_size=vs, collective="all_reduce"), 50)
        diff = max(float((lp - lp_gathered).abs().max()) for lp in (lp_sharded, lp_reduce, lp_rows))
        row = {"N": n, "V": v, "d": d, "ranks": world, "dtype": dtype_name,
               "time_s": {"sharded": t_sharded, "sharded_all_reduce": t_reduce,
                          "sharded_partials_only": t_partials, "combine_all_gather_only": t_cg,
                          "combine_all_reduce_only": t_cr, "gather_head": t_gather,
                          "gathered": t_gathered, "gathered_rows": t_rows},
               "gathered_head_extra_mib_per_rank": (v - vs) * d * w.element_size() / 2 ** 20,
               "max_abs_diff_vs_gathered": diff}
        row["per_batch_amortised_s"] = {
            str(b): {"sharded": t_sharded, "sharded_all_reduce": t_reduce, "gathered": t_gather / b + t_gathered,
                     "gathered_rows": t_gather / b + t_rows}
            for b in PASSES}
        row["fastest"] = {b: min(c, key=c.get) for b, c in row["per_batch_amortised_s"].items()}
        rows.append(row)
        if rank == 0:
            print(json.dumps(row), flush=True)
        del full
    if rank == 0:
        Path(out).write_text(json.dumps(rows))
    dist.barrier()
    dist.destroy_process_group()


def _partials_only(h, w, start, targets):
    from rmbench_fast.kernels.logprob_sharded import shard_partials

    return shard_partials(h, w, start, targets)


def conclusion(rows) -> str:
    lines = []
    for r in rows:
        t = r["time_s"]
        best = r["fastest"]
        rows_win = [b for b, f in best.items() if not f.startswith("sharded")]
        lines.append(
            f"N={r['N']} V={r['V']} d={r['d']}: sharded {t['sharded']:.4f} s per batch (all_gather combine; "
            f"all_reduce combine {t['sharded_all_reduce']:.4f} s; partials alone {t['sharded_partials_only']:.4f} s; "
            f"combine alone {t['combine_all_gather_only'] * 1e3:.2f} ms by all_gather, "
            f"{t['combine_all_reduce_only'] * 1e3:.2f} ms by all_reduce), "
            f"gathered {t['gathered']:.4f} s, gathered+row split {t['gathered_rows']:.4f} s, "
            f"plus the head's all_gather {t['gather_head']:.4f} s once per pass and "
            f"{r['gathered_head_extra_mib_per_rank']:.0f} MiB per rank; fastest per pass of B batches: "
            + ", ".join(f"B={b}: {f}" for b, f in best.items())
            + ("" if rows_win else " (sharded at every B)"))
    return " | ".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", nargs="*", default=SHAPES, help="NxVxd ... (V a multiple of --ranks)")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    ap.add_argument("--out", default=str(RESULTS / "logprob-sharded-cpu.json"))
    args = ap.parse_args(argv)
    import torch
    import torch.multiprocessing as mp

    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes]
    load, started = os.getloadavg(), time.time()
    with tempfile.TemporaryDirectory() as tmp:
        rows_file = os.path.join(tmp, "rows.json")
        mp.spawn(_rank, args=(args.ranks, os.path.join(tmp, "rdv"), rows_file, shapes, args.dtype, args.repeats,
                              args.threads), nprocs=args.ranks, join=True)
        rows = json.loads(Path(rows_file).read_text())
    out = {
        "benchmark": "logprob_sharded",
        "device": "cpu",
        "backend": "gloo",
        "dtype": args.dtype,
        "machine": {"platform": platform.platform(), "processor": platform.processor(), "cpus": os.cpu_count(),
                    "ranks": args.ranks, "torch_threads_per_rank": args.threads, "torch": torch.__version__,
                    "load_average_at_start": load},
        "command": "python benchmarks/logprob_sharded.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "rows": rows,
        "conclusion": conclusion(rows),
        "wall_s": time.time() - started,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(out["conclusion"].replace(" | ", "\n"))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

"""How long the intervals take on the whole benchmark: `bootstrap` (one run's 20 metrics) and
`paired` (two runs) at 10,000 resamples over RM-Bench's 1,327 prompts (chat 129, math 529, code
228, safety-refuse 284, safety-response 157), and `compare_runs` of two runs (both runs' intervals,
the paired one, the disagreement list). The issue asks for <= 1 s for the whole benchmark.

Domain sizes are counted from the RM-Bench files in --data when they are there (math, absent from
this machine's copy, takes the benchmark's count); the cells are synthetic 0/1 (a scalar model's),
as the time does not depend on their values.

    python benchmarks/intervals.py [--data ../shared/rm-bench] [--repeats 7] [--out benchmarks/results/intervals-cpu.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rmbench_fast.results.compare import Run, compare_runs  # noqa: E402
from rmbench_fast.results.leaderboard import FULL_FILE_PROMPTS  # noqa: E402
from rmbench_fast.results.intervals import bootstrap, paired  # noqa: E402


def sizes_from(data: Path) -> tuple[dict, dict]:
    """Prompts per file domain: counted from data/<domain>_filtered.json where present."""
    sizes, source = {}, {}
    for d, n in FULL_FILE_PROMPTS.items():
        f = data / f"{d}_filtered.json"
        if f.is_file():
            sizes[d], source[d] = len(json.loads(f.read_text())), str(f)
        else:
            sizes[d], source[d] = n, "benchmark count (file absent)"
    return sizes, source


def timed(fn, repeats: int) -> dict:
    fn()  # warm: first-call imports and allocations
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return {"min_s": min(times), "median_s": statistics.median(times), "all_s": times}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "rm-bench"))
    ap.add_argument("--resamples", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    sizes, source = sizes_from(Path(a.data))
    domains = [d for d, n in sizes.items() for _ in range(n)]
    rng = np.random.default_rng(0)
    probs = np.stack([np.full((3, 3), p) for p in rng.uniform(0.5, 0.8, len(domains))])
    cells_a = (rng.random(probs.shape) < probs).astype(np.float64)
    cells_b = (rng.random(probs.shape) < probs).astype(np.float64)
    keys = [f"{d}/{i}" for i, d in enumerate(domains)]
    runs = [Run("a", "a", keys, domains, cells_a), Run("b", "b", keys, domains, cells_b)]
    r = a.resamples
    results = {
        "bootstrap": timed(lambda: bootstrap(cells_a, domains, resamples=r), a.repeats),
        "paired": timed(lambda: paired(cells_a, cells_b, domains, resamples=r), a.repeats),
        "compare_two_runs": timed(lambda: compare_runs(runs, resamples=r), a.repeats),
    }
    report = {"benchmark": "intervals", "resamples": r, "n_prompts": len(domains), "domains": sizes,
              "domain_sizes_from": source, "repeats": a.repeats, "results": results,
              "machine": {"platform": platform.platform(), "python": platform.python_version(),
                          "numpy": np.__version__, "cpus": os.cpu_count(), "load_avg_1m": os.getloadavg()[0]},
              "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    for name, t in results.items():
        print(f"{name}: {len(domains)} prompts, {r} resamples: min {t['min_s'] * 1e3:.0f} ms, "
              f"median {t['median_s'] * 1e3:.0f} ms")
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {a.out}")


if __name__ == "__main__":
    main()

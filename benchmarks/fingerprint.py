"""How long fingerprinting a checkpoint's weights takes on this machine: the sha256 tree with one
thread (what the old plain sha256 cost: the same bytes through one hasher) against all threads,
and the stat-only fingerprint that --no-cache uses. Files are read once before timing, so the
page cache holds them and the hashing, not the disk, is measured.

    python benchmarks/fingerprint.py MODEL_DIR [MODEL_DIR ...] [--out benchmarks/results/fingerprint-cpu.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rmbench_fast.store.fingerprints import HashCache, hash_threads, model_fingerprint, tree_sha256  # noqa: E402


def timed(fn, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="+")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    files = [p for m in a.models for p in sorted(Path(m).glob("*.safetensors"))]
    if not files:
        sys.exit("no *.safetensors under " + ", ".join(a.models))
    size = sum(p.stat().st_size for p in files)
    for p in files:  # into the page cache
        with open(p, "rb") as f:
            while f.read(1 << 24):
                pass
    threads = hash_threads()
    one = timed(lambda: [tree_sha256(p, p.stat().st_size, threads=1) for p in files], a.rounds)
    many = timed(lambda: [tree_sha256(p, p.stat().st_size, threads=threads) for p in files], a.rounds)
    stat = timed(lambda: [model_fingerprint(m, HashCache(None), content=False) for m in a.models], a.rounds)
    gib = size / 2**30
    report = {"benchmark": "fingerprint", "files": len(files), "gib": gib, "threads": threads,
              "one_thread_s": one, "all_threads_s": many, "stat_only_s": stat,
              "one_thread_gib_s": gib / one, "all_threads_gib_s": gib / many, "speedup": one / many,
              "machine": {"platform": platform.platform(), "python": platform.python_version()},
              "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    print(f"{gib:.2f} GiB in {len(files)} files: one thread {one:.2f} s ({gib / one:.2f} GiB/s), "
          f"{threads} threads {many:.2f} s ({gib / many:.2f} GiB/s, {one / many:.2f}x); "
          f"stat only (--no-cache) {stat * 1e3:.1f} ms")
    if a.out:
        Path(a.out).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()

"""Throughput of rmbench-fast against the official RM-Bench flow (same as `rmbench-fast bench`).

    bash benchmarks/peer/setup.sh            # once: the official flow's environment
    python benchmarks/throughput.py --limit 8 --rounds 3

See rmbench_fast/bench.py for what is measured and how.
"""

from rmbench_fast.cli import bench

if __name__ == "__main__":
    bench()

"""Benchmarks as plug-ins: each one's schema and loader, a row's comparisons, the aggregation into its numbers.
May import: errors, inputs (RM-Bench's domains, for detection); never models, scorers, results or the engine.

One module a benchmark: rewardbench (RewardBench v1: sections weighted by EXAMPLE_COUNTS),
rewardbench2 (RewardBench 2: best-of-N, Ties by its own formula), pairs (the user's own preference
pairs in TRL's formats). base holds the Benchmark interface, the readers (JSON, JSONL, Parquet, a
`datasets` folder) and `detect`, which names the benchmark a data set's schema fits. The rules are
rewardbench 0.1.4's; tests/test_tasks_*.py check them against its own functions.
"""

from __future__ import annotations

from . import base, pairs, rewardbench, rewardbench2  # noqa: F401  (each module registers its benchmark)
from .base import BENCHMARKS, Benchmark, Row, TaskDataError, detect, detect_hub_id, read_items


def get(name: str, **options) -> Benchmark:
    """The benchmark called `name` (see BENCHMARKS); options (e.g. pairs' tie_credit) make a new one."""
    if name not in BENCHMARKS:
        raise ValueError(f"unknown benchmark {name!r} (expected one of {', '.join(sorted(BENCHMARKS))})")
    return type(BENCHMARKS[name])(**options) if options else BENCHMARKS[name]


__all__ = ["BENCHMARKS", "Benchmark", "Row", "TaskDataError", "detect", "detect_hub_id", "get", "read_items"]

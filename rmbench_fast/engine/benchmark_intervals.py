"""95% intervals of another benchmark's numbers (score --benchmark): a bootstrap over rows within each
subset (every subset keeps its size, as the benchmark's weights assume), each resample's numbers
recomputed by the benchmark's own rules: RewardBench's sections from the resampled subset
accuracies (tasks.rewardbench.summarize, EXAMPLE_COUNTS), RewardBench 2's mean of subsets, a pairs
run's pooled accuracy. RewardBench 2's Ties subset is scored from all its rows together (no row has
a result of its own): it is held at its value in every resample, which the intervals say.

Percentile intervals, drawn with a fixed seed: a run's intervals are the same from run to run.
"""

from __future__ import annotations

import numpy as np

CHUNK = 1000  # resamples drawn at a time (memory: CHUNK x the largest subset's rows)


def _subset_draws(values: np.ndarray, weights: np.ndarray, resamples: int, rng) -> np.ndarray:
    """[resamples] pooled means sum(values) / sum(weights) of rows resampled with replacement."""
    out = np.empty(resamples)
    n = len(values)
    for start in range(0, resamples, CHUNK):
        k = min(CHUNK, resamples - start)
        idx = rng.integers(0, n, size=(k, n))
        out[start:start + k] = values[idx].sum(1) / weights[idx].sum(1)
    return out


def _bounds(draws: np.ndarray, level: float) -> list[float]:
    lo, hi = np.quantile(draws, [(1 - level) / 2, (1 + level) / 2])
    return [float(lo), float(hi)]


def per_subset(name: str, bench, rows: list, scores: list) -> tuple[dict, list]:
    """{subset: (row values x weight, weights)} and the subsets held (no per-row result: RewardBench
    2's Ties); a pairs row weighs its comparisons (pairs pools every comparison), any other row 1."""
    per: dict[str, tuple[list, list]] = {}
    held = []
    for row, s in zip(rows, scores):
        value = bench.row_result(row, s)
        if value is None:  # RewardBench 2's Ties
            held.append(row.subset)
            continue
        weight = len(bench.comparisons(row)) if name == "pairs" else 1
        vals, wts = per.setdefault(row.subset, ([], []))
        vals.append(value * weight)
        wts.append(weight)
    return per, sorted(set(held))


def intervals(name: str, bench, rows: list, row_scores: list, summary: dict, resamples: int,
              level: float = 0.95, seed: int = 0) -> dict | None:
    """{level, resamples, method, score, subsets[, sections][, held]}: [low, high] of each number."""
    if resamples == 0 or not rows:
        return None
    rng = np.random.default_rng(seed)
    per, held = per_subset(name, bench, rows, row_scores)
    draws = {s: _subset_draws(np.array(v, float), np.array(w, float), resamples, rng) for s, (v, w) in per.items()}
    for s in held:
        draws[s] = np.full(resamples, summary["subsets"][s])
    out = {"level": level, "resamples": resamples, "subsets": {s: _bounds(d, level) for s, d in draws.items()},
           "method": "bootstrap over rows within each subset"}
    if held:
        out["held"] = held  # scored from all their rows together: held at their value
    if name == "reward-bench":
        from ..tasks.rewardbench import summarize

        # no known subset: the score is the pooled accuracy (summarize's `overall`), resampled too
        n = {s: len(per[s][0]) for s in per}
        pooled = sum(draws[s] * n[s] for s in per) / max(1, sum(n.values())) if per else np.full(resamples, np.nan)
        numbers = [summarize({s: float(d[b]) for s, d in draws.items()}, float(pooled[b])) for b in range(resamples)]
        out["score"] = _bounds(np.array([n["score"] for n in numbers], float), level)
        out["sections"] = {k: _bounds(np.array([n["sections"][k] for n in numbers], float), level)
                           for k in numbers[0]["sections"]}
    elif name == "pairs":
        right = sum(draws[s] * sum(per[s][1]) for s in per)  # each subset keeps its comparisons' count
        out["score"] = _bounds(right / sum(sum(per[s][1]) for s in per), level)
    else:
        out["score"] = _bounds(np.mean([draws[s] for s in draws], axis=0), level)
    return out

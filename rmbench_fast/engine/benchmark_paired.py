"""Paired comparison of two runs of one benchmark (reward-bench, reward-bench-2, pairs) on the same
rows: run b's numbers minus run a's (score, each subset, RewardBench's sections), each with a
paired-bootstrap interval and p, for `sweep --benchmark` (engine.versus) and `compare` on
benchmark runs (engine.benchmark_compare).

Why the bootstrap of intervals (engine.benchmark_intervals) serves as it is: every number of these
benchmarks is linear in its subsets' means with weights fixed by which rows there are (RewardBench's
sections weight subsets by EXAMPLE_COUNTS, its score is the mean of the sections; RewardBench 2's
score is the plain mean of its subsets; a pairs run pools every comparison). So resampling the same
rows for both runs and subtracting their numbers equals resampling each row's difference of results,
within its subset, and recomputing the numbers from those: `_subset_draws` over per-row differences,
with each row's weight (a pairs row: its comparisons). Identical runs give a difference of 0 in
every resample: every interval is [0, 0] and p is 1. RewardBench 2's Ties subset has no per-row
result (it is scored from all its rows together): its difference is held at its value in every
resample, which `held` says, as the intervals do.
"""

from __future__ import annotations

import numpy as np

from ..results.intervals import TIE, p_value
from .benchmark_intervals import _bounds, _subset_draws, per_subset

METHOD = "paired bootstrap over rows within each subset (the same rows for both runs)"


def numbers(name: str, subsets: dict, weights: dict) -> dict:
    """{score, sections[, score_with_prior_sets]} from subset numbers (floats or arrays of resamples;
    linear in them) by the benchmark's rules; weights: each subset's rows (pairs: its comparisons)."""
    if name == "reward-bench":
        from ..tasks.rewardbench import summarize

        total = sum(weights.values())
        pooled = sum(subsets[s] * weights[s] for s in weights) / total  # no known subset: every row pooled
        return summarize(dict(subsets), pooled)
    if name == "pairs":
        return {"score": sum(subsets[s] * weights[s] for s in weights) / sum(weights.values())}
    return {"score": sum(subsets.values()) / len(subsets)}


def _one(diff: float, draws: np.ndarray | None, level: float) -> dict:
    diff = 0.0 if abs(diff) <= TIE else float(diff)
    if draws is None:
        return {"diff": diff, "low": None, "high": None, "p": None, "significant": False}
    draws = np.where(np.abs(draws) <= TIE, 0.0, draws)
    low, high = _bounds(draws, level)
    return {"diff": diff, "low": low, "high": high, "p": p_value(draws), "significant": bool(low > 0 or high < 0)}


def paired(name: str, bench, rows: list, scores_a: list, scores_b: list, resamples: int = 10_000, seed: int = 0,
           level: float = 0.95) -> dict:
    """{"score", "subsets": {name: ...}[, "sections"][, "score_with_prior_sets"][, "held"]}, each
    {"diff" (b - a, the difference of bench.aggregate's numbers), "low", "high", "p", "significant"};
    low, high and p None when resamples is 0. rows: the rows both runs scored, in one order."""
    a, b = bench.aggregate(rows, scores_a), bench.aggregate(rows, scores_b)
    out: dict = {"subsets": {}}
    per_a, held = per_subset(name, bench, rows, scores_a)
    per_b, _ = per_subset(name, bench, rows, scores_b)
    weights = {s: float(sum(w)) for s, (_, w) in per_a.items()}
    draws = None
    if resamples:
        rng = np.random.default_rng(seed)
        draws = {s: _subset_draws(np.array(per_b[s][0], float) - np.array(per_a[s][0], float),
                                  np.array(w, float), resamples, rng) for s, (_, w) in per_a.items()}
        for s in held:
            draws[s] = np.full(resamples, b["subsets"][s] - a["subsets"][s])
    for s in a["subsets"]:
        out["subsets"][s] = _one(b["subsets"][s] - a["subsets"][s], None if draws is None else draws[s], level)
    if held:
        out["held"] = held
        for s in held:
            weights[s] = float(a["counts"][s])
    resampled = None
    if draws is not None:
        if name == "reward-bench":  # one resample at a time (rewardbench.summarize filters NaN prior sets)
            each = [numbers(name, {s: float(d[i]) for s, d in draws.items()}, weights) for i in range(resamples)]
            resampled = {"score": np.array([n["score"] for n in each], float)}
            for k in each[0]["sections"]:
                resampled[f"sections/{k}"] = np.array([n["sections"][k] for n in each], float)
            if "score_with_prior_sets" in each[0]:
                resampled["score_with_prior_sets"] = np.array([n["score_with_prior_sets"] for n in each], float)
        else:
            resampled = {"score": numbers(name, draws, weights)["score"]}
    out["score"] = _one(b["score"] - a["score"], None if resampled is None else resampled["score"], level)
    if "sections" in a:
        out["sections"] = {k: _one(b["sections"][k] - v, None if resampled is None else resampled[f"sections/{k}"],
                                   level) for k, v in a["sections"].items()}
    if "score_with_prior_sets" in a:
        out["score_with_prior_sets"] = _one(b["score_with_prior_sets"] - a["score_with_prior_sets"],
                                            None if resampled is None else resampled["score_with_prior_sets"], level)
    return out


def method(resamples: int, seed: int, level: float) -> dict:
    return {"kind": METHOD if resamples else "differences only (no resamples)", "resamples": resamples,
            "seed": seed, "level": level}

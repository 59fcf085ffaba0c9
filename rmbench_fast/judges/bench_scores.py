"""What a judge's verdicts make of another benchmark's numbers: ask values -> each row's result -> the
benchmark's own aggregation (summary.json as `score --benchmark` writes it: benchmark, score, subsets,
counts and, for reward-bench, sections; fractions).

An ask's value: a pairwise verdict 1 (the better response of the comparison wins), 0, --tie, or
--invalid (judges.plan.value); a 4-way verdict 1, 0 or 0.25 (judges.rb2); a rating its number (1-10,
failed -1). A comparison's credit is the mean of its asks' values over orders and samples.

How pairwise credits feed each benchmark (the rule a scalar model's scores follow, with a comparison's
credit in place of "scores above"):
- reward-bench: a row has one comparison (chosen, rejected): its credit is the row's result (1 or 0
  for a judge that decides both orders alike). Subsets are the plain means of their rows; sections
  weight the subsets by EXAMPLE_COUNTS and `score` is their mean (tasks.rewardbench.summarize).
- reward-bench-2: a row is right when its first chosen response beats every other response: its
  result is the product of those comparisons' credits (1 when every one is won; with fractional
  credit, the chance that one ask drawn per comparison wins them all). A subset is the mean of its
  rows, `score` the mean of the subsets. Ties rows: each response's score is its mean credit over its
  comparisons (a correct one's credit against each incorrect one, an incorrect one's 1 - credit
  against each correct one), scored by tasks.rewardbench2.ties_score as reward-model scores are.
- pairs: every comparison counts once: a subset is the mean of its comparisons' credits, `score` the
  mean over every comparison (a tie verdict scores --tie, not --tie-credit, which is for scores).
- rb2-4way: a row's result is its 4-way value; rb2-ratings: the chosen response's share of the top
  rating (every rating failed: 0.25). Ties under both: the ratings (failed: -1) by ties_score.

--samples K: under a pairwise protocol a comparison's credit is the mean over its orders and its K
samples, and the rules above run once on those credits. Under rb2-4way and rb2-ratings the run's
numbers are the mean of K runs, run n taking sample n of every ask: each run's rows, subsets and
score by the rules above (a ratings row's top share from run n's ratings, Ties' ties_score from run
n's ratings), then each subset and `score` the mean over the runs (summary.json's `per_sample` holds
every run's); a row's result is the mean of its runs' results (what the intervals resample, Ties held).
With K = 1 both are the rules above.
"""

from __future__ import annotations

import math

from . import rb2
from .bench_plan import FOUR_WAY, PAIR, RATING


def row_values(asks, values, n_rows: int) -> list[dict]:
    """Per row (only the keys its asks have): {"comparisons": {c: (better, worse, credit)}} (pairwise
    asks; the credit: the mean over orders and samples), {"samples": [{"four_way": value} or
    {"ratings": {r: rating}}, one a sample 0..K-1]} (rb2's asks). summarize adds each sample's
    "result" and "ties_scores" (a Ties row's ratings, else None)."""
    sums: list[dict] = [{} for _ in range(n_rows)]
    runs: list[dict] = [{} for _ in range(n_rows)]
    for a, v in zip(asks, values):
        if a.kind == PAIR:
            key = (a.comparison, a.i, a.j)
            total, count = sums[a.prompt].get(key, (0.0, 0))
            sums[a.prompt][key] = (total + float(v), count + 1)
        elif a.kind == FOUR_WAY:
            runs[a.prompt].setdefault(a.sample, {})["four_way"] = float(v)
        elif a.kind == RATING:
            runs[a.prompt].setdefault(a.sample, {}).setdefault("ratings", {})[a.i] = float(v)
    out = []
    for pairs, by in zip(sums, runs):
        row: dict = {}
        if pairs:
            row["comparisons"] = {c: (i, j, total / count) for (c, i, j), (total, count) in sorted(pairs.items())}
        if by:
            row["samples"] = [by[n] for n in sorted(by)]
        out.append(row)
    return out


def _pair_scores(row, per: dict) -> list[float]:
    """Ties under a pairwise protocol: each response's mean credit over its comparisons."""
    got: dict[int, list[float]] = {}
    for better, worse, credit in per["comparisons"].values():
        got.setdefault(better, []).append(credit)
        got.setdefault(worse, []).append(1.0 - credit)
    return [sum(got[i]) / len(got[i]) if i in got else math.nan for i in range(len(row.responses))]


def row_result(name: str, sample, per: dict) -> tuple[float | None, list | None]:
    """(the row's result, None for a Ties row; the response scores Ties is computed from, else None).
    per: a row's comparisons, or one sample's 4-way value or ratings (row_values)."""
    from ..tasks.rewardbench2 import is_ties

    ties = name == "reward-bench-2" and is_ties(sample.subset)
    if "ratings" in per:
        ratings = [per["ratings"][r] for r in range(len(sample.responses))]
        return (None, ratings) if ties else (rb2.ratings_value(ratings), None)
    if "four_way" in per:
        return per["four_way"], None
    if ties:
        return None, _pair_scores(sample, per)
    credits = [c for _, _, c in per["comparisons"].values()]
    if name == "reward-bench-2":
        return math.prod(credits), None
    return sum(credits) / len(credits), None


def aggregate(name: str, samples, results: list, scores: list, credits: list) -> dict:
    """{benchmark, score, subsets, counts[, sections, score_with_prior_sets][, pairs]} by the benchmark's
    rules. results: each row's result (None: Ties); scores: a Ties row's response scores; credits: each
    row's comparisons' credits (pairs pools them)."""
    groups: dict[str, list[int]] = {}
    for p, s in enumerate(samples):
        groups.setdefault(s.subset, []).append(p)
    names = sorted(groups)  # np.unique's order, as the tasks' aggregate
    counts = {n: len(groups[n]) for n in names}
    if name == "pairs":
        pooled = {n: [c for p in groups[n] for c in credits[p]] for n in names}
        every = [c for n in names for c in pooled[n]]
        return {"benchmark": name, "score": sum(every) / len(every),
                "subsets": {n: sum(pooled[n]) / len(pooled[n]) for n in names}, "counts": counts,
                "pairs": {n: len(pooled[n]) for n in names}}
    subsets = {}
    for n in names:
        if results[groups[n][0]] is None:  # RewardBench 2's Ties
            from ..tasks.rewardbench2 import ties_score

            subsets[n] = ties_score([(samples[p].id, scores[p], len(samples[p].chosen)) for p in groups[n]])
        else:
            subsets[n] = sum(results[p] for p in groups[n]) / len(groups[n])
    if name == "reward-bench":
        from ..tasks.rewardbench import summarize

        every = [results[p] for p in range(len(samples))]
        return {"benchmark": name, **summarize(subsets, sum(every) / len(every)), "subsets": subsets, "counts": counts}
    return {"benchmark": name, "score": sum(subsets.values()) / len(subsets), "subsets": subsets, "counts": counts}


def _mean(values: list) -> float:
    return sum(values) / len(values)


def _runs(name: str, samples, per: list[dict]) -> tuple[dict, list, list]:
    """rb2's asks: (the mean of the K runs' summaries, each row's mean result, each row's Ties scores:
    run 0's with K = 1, else a list a run); each sample of `per` gets its result and Ties scores."""
    k = len(per[0]["samples"])
    runs = []
    for n in range(k):
        got = []
        for s, v in zip(samples, per):
            if len(v.get("samples", ())) != k:
                raise ValueError(f"row {s.name}: {len(v.get('samples', ()))} samples of its asks, not {k}")
            result, ties = row_result(name, s, v["samples"][n])
            v["samples"][n].update(result=result, ties_scores=ties)
            got.append((result, ties))
        runs.append(aggregate(name, samples, [r for r, _ in got], [t for _, t in got], [[] for _ in samples]))
    summary = {"benchmark": name, "score": _mean([r["score"] for r in runs]),
               "subsets": {sub: _mean([r["subsets"][sub] for r in runs]) for sub in runs[0]["subsets"]},
               "counts": runs[0]["counts"]}
    if k > 1:
        summary["samples"] = k
        summary["per_sample"] = [{"score": r["score"], "subsets": r["subsets"]} for r in runs]
    results = [None if v["samples"][0]["result"] is None else _mean([x["result"] for x in v["samples"]])
               for v in per]
    scores = [v["samples"][0]["ties_scores"] if k == 1 else
              (None if v["samples"][0]["ties_scores"] is None else [x["ties_scores"] for x in v["samples"]])
              for v in per]
    return summary, results, scores


def summarize(name: str, samples, asks, values, bootstrap: int) -> tuple[dict, list[dict], list, list]:
    """(the summary, each row's values, each row's result, each row's Ties scores), with the summary's
    95% intervals (engine.benchmark_intervals: a bootstrap over rows within each subset). Pairwise
    asks: the rules on the comparisons' credits; rb2's asks: the mean of the runs (see above)."""
    return summarize_rows(name, samples, row_values(asks, values, len(samples)), bootstrap)


def summarize_rows(name: str, samples, per: list[dict], bootstrap: int) -> tuple[dict, list[dict], list, list]:
    """summarize from each row's values (row_values' shape): what a run's results.jsonl holds, read back by
    judges.bench_recompute."""
    from ..engine.benchmark_intervals import intervals
    from ..tasks import get

    if per and "samples" in per[0]:
        summary, results, scores = _runs(name, samples, per)
    else:
        pairs = [row_result(name, s, v) for s, v in zip(samples, per)]
        results, scores = [r for r, _ in pairs], [t for _, t in pairs]
        credits = [[c for _, _, c in v.get("comparisons", {}).values()] for v in per]
        summary = aggregate(name, samples, results, scores, credits)
    bench = get(name)
    summary["intervals"] = intervals(name, _Results(bench), [s.row for s in samples], [[r] for r in results],
                                     summary, bootstrap)
    return summary, per, results, scores


class _Results:
    """The benchmark as engine.benchmark_intervals asks it, each row's 'scores' being [its result]."""

    def __init__(self, bench):
        self.bench = bench

    def row_result(self, row, scores):
        return scores[0]

    def comparisons(self, row):
        return self.bench.comparisons(row)

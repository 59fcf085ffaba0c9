"""`compare` on runs of another benchmark than RM-Bench (reward-bench, reward-bench-2, pairs): each
run is a folder holding results.jsonl (every response's score, as `score --benchmark` writes it) and
summary.json (or run.json) naming its benchmark, or that results.jsonl itself.

Rows are matched by (subset, id). Runs over different rows are compared on the rows they all have,
in the first run's order; the rows each run has beyond those are counted, and a few named, in
`rows` (and the table's legend), never dropped unsaid. Every run's numbers are recomputed on the
common rows by the benchmark's own rules (tasks: aggregate), with the intervals of
engine.benchmark_intervals; each run against the baseline (the first) gets the difference of those
numbers with a paired-bootstrap interval and p (engine.benchmark_paired), and the rows whose
results differ most. Runs of different benchmarks, an RM-Bench run among another benchmark's, or
pairs runs with different --tie-credit are refused, naming the runs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..errors import DataError, UsageError
from .benchmarks import RM_BENCH, results_file

NAMED = 5  # rows named per run in `only_in` (all of them are counted)


@dataclass
class BenchRun:
    name: str
    path: str
    benchmark: str
    tie_credit: float
    rows: list  # tasks.Row, one a line of results.jsonl (responses empty: only their number counts)
    scores: list  # each row's response scores, chosen then rejected

    @property
    def keys(self) -> list:
        return [(r.subset, r.id) for r in self.rows]


def _beside(found: Path) -> dict:
    """summary.json (else run.json) beside a results.jsonl: what names its benchmark."""
    for name in ("summary.json", "run.json"):
        try:
            got = json.loads((found.parent / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(got, dict) and got.get("benchmark"):
            return got
    raise DataError(found, "no summary.json or run.json beside it names its benchmark")


def kind_of(path) -> str:
    """The benchmark of a run folder or results file: RM_BENCH for RM-Bench's (and the official
    scripts') results files; DataError for a folder whose summary.json names another benchmark but
    that holds no results.jsonl of every response's score."""
    found = results_file(path)
    if found is not None:
        return _beside(found)["benchmark"]
    p = Path(path)
    try:
        named = json.loads((p / "summary.json").read_text(encoding="utf-8")).get("benchmark") if p.is_dir() else None
    except (OSError, ValueError, AttributeError):
        named = None
    if named not in (None, RM_BENCH):
        raise DataError(p / "results.jsonl", f"missing or not a {named} run's rows (every response's score, as "
                        f"`score --benchmark {named}` writes them): cannot compare this run")
    return RM_BENCH


def choose(paths: list, benchmark: str | None = None) -> str:
    """The one benchmark the runs are of (RM_BENCH for RM-Bench runs); UsageError for a mix, or
    for --benchmark naming another benchmark than the runs'."""
    kinds = [kind_of(p) for p in paths]
    named = dict(zip(map(str, paths), kinds))
    if len(set(kinds)) > 1:
        said = ", ".join(f"{p} is {'an RM-Bench run' if k == RM_BENCH else f'a {k} run'}" for p, k in named.items())
        raise UsageError(f"compare: runs of different benchmarks ({said}): compare runs of one benchmark")
    if benchmark is not None and benchmark != kinds[0]:
        what = "RM-Bench runs" if kinds[0] == RM_BENCH else f"{kinds[0]} runs"
        raise UsageError(f"--benchmark {benchmark}: {', '.join(named)} {'are' if len(named) > 1 else 'is'} {what} "
                         f"(their summary.json / results files say so)")
    return kinds[0]


def load_bench_run(path, name: str | None = None) -> BenchRun:
    """A run folder (or its results.jsonl) of another benchmark, its rows and scores checked."""
    from ..tasks.base import Row

    found = results_file(path)
    if found is None:
        raise DataError(path, "no results.jsonl of another benchmark's run (every response's score)")
    meta = _beside(found)
    rows, scores, seen = [], [], {}
    for n, line in enumerate(found.read_text(encoding="utf-8").splitlines()):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
            c, j = list(map(float, r["chosen_scores"])), list(map(float, r["rejected_scores"]))
            row = Row(r["id"], r["subset"], "", ("",) * len(c), ("",) * len(j), str(found), n, r)
            key = (row.subset, row.id)
        except (ValueError, KeyError, TypeError) as e:
            raise DataError(found, f"not a row of scores ({type(e).__name__}: {e})", line=n + 1) from None
        if key in seen:
            raise DataError(found, f"row {key[0]}/{key[1]} appears twice (lines {seen[key] + 1} and {n + 1}): rows "
                            "are matched across runs by subset and id", line=n + 1, key="id")
        seen[key] = n
        rows.append(row)
        scores.append(c + j)
    if not rows:
        raise DataError(found, "holds no rows")
    return BenchRun(name or str(path), str(path), meta["benchmark"], float(meta.get("tie_credit") or 0.0), rows,
                    scores)


def align(runs: list[BenchRun]) -> tuple[list[BenchRun], dict, dict]:
    """The runs on the rows all of them have (the first run's order); per run the number of its
    rows left out, and the first NAMED of them ("subset/id")."""
    common = set(runs[0].keys)
    for r in runs[1:]:
        common &= set(r.keys)
    if not common:
        raise UsageError(f"{' and '.join(r.name for r in runs)} have no row in common (rows are matched by subset "
                         "and id)")
    order = [k for k in runs[0].keys if k in common]
    out, left_out, only = [], {}, {}
    for r in runs:
        index = {k: i for i, k in enumerate(r.keys)}
        pick = [index[k] for k in order]
        rest = [k for k in r.keys if k not in common]
        left_out[r.name], only[r.name] = len(rest), [f"{s}/{i}" for s, i in rest[:NAMED]]
        out.append(BenchRun(r.name, r.path, r.benchmark, r.tie_credit, [r.rows[i] for i in pick],
                            [r.scores[i] for i in pick]))
    base = out[0]
    for r in out[1:]:
        for a, b in zip(base.rows, r.rows):
            if (len(a.chosen), len(a.rejected)) != (len(b.chosen), len(b.rejected)):
                raise DataError(b.source, f"row {b.subset}/{b.id} has {len(b.chosen)} chosen and {len(b.rejected)} "
                                f"rejected responses, but {len(a.chosen)} and {len(a.rejected)} in {base.name}: "
                                "not the same row", line=b.index + 1)
    return out, left_out, only


def _numbers(agg: dict, ci: dict | None) -> dict:
    def one(value, bounds):
        return {"value": value, "low": bounds[0] if bounds else None, "high": bounds[1] if bounds else None}

    ci = ci or {}
    out = {"score": one(agg["score"], ci.get("score")),
           "subsets": {k: one(v, (ci.get("subsets") or {}).get(k)) for k, v in agg["subsets"].items()}}
    if "sections" in agg:
        out["sections"] = {k: one(v, (ci.get("sections") or {}).get(k)) for k, v in agg["sections"].items()}
    if "score_with_prior_sets" in agg:
        out["score_with_prior_sets"] = one(agg["score_with_prior_sets"], None)  # no interval of its own
    return out


def _disagreements(bench, a: BenchRun, b: BenchRun, top: int) -> list[dict]:
    """The `top` rows whose results (tasks: row_result) differ most, largest first (Ties rows have none)."""
    gaps = []
    for k, (row, sa, sb) in enumerate(zip(a.rows, a.scores, b.scores)):
        ra, rb = bench.row_result(row, sa), bench.row_result(row, sb)
        if ra is not None and rb is not None and ra != rb:
            gaps.append((-abs(rb - ra), k, {"subset": row.subset, "id": row.id, "a": ra, "b": rb,
                                            "a_scores": sa, "b_scores": sb}))
    return [x for _, _, x in sorted(gaps, key=lambda g: g[:2])[:max(0, top)]]


def compare_bench_runs(runs: list[BenchRun], resamples: int = 10_000, seed: int = 0, level: float = 0.95,
                       top: int = 10) -> dict:
    """{"benchmark", "runs": {name: {"score", "subsets"[, "sections"]: {"value", "low", "high"}}},
    "pairs": [{"a": baseline (the first), "b", "score", "subsets"[, "sections"]: {"diff", "low", "high",
    "p", "significant"}, "disagreements"}], "method", "rows": {"common", "subsets", "left_out", "only_in"}}."""
    from ..tasks import get
    from .benchmark_intervals import intervals
    from .benchmark_paired import method, paired

    if len(runs) < 2:
        raise UsageError("compare needs at least two runs")
    if len({r.name for r in runs}) != len(runs):
        raise UsageError(f"a run is given twice: {', '.join(r.name for r in runs)}")
    name = runs[0].benchmark
    for r in runs[1:]:
        if r.benchmark != name:
            raise UsageError(f"compare: {runs[0].name} is a {name} run and {r.name} a {r.benchmark} run: compare runs "
                             "of one benchmark")
        if r.tie_credit != runs[0].tie_credit:
            raise UsageError(f"compare: {runs[0].name} counts a tie as {runs[0].tie_credit} and {r.name} as "
                             f"{r.tie_credit} (--tie-credit): their numbers follow other rules")
    runs, left_out, only = align(runs)
    bench = get(name, **({"tie_credit": runs[0].tie_credit} if name == "pairs" and runs[0].tie_credit else {}))
    rows = runs[0].rows
    out = {"benchmark": name, "runs": {}, "pairs": []}
    for r in runs:
        agg = bench.aggregate(rows, r.scores)
        out["runs"][r.name] = _numbers(agg, intervals(name, bench, rows, r.scores, agg, resamples, level, seed))
    for r in runs[1:]:
        got = paired(name, bench, rows, runs[0].scores, r.scores, resamples, seed, level)
        out["pairs"].append({"a": runs[0].name, "b": r.name, **got,
                             "disagreements": _disagreements(bench, runs[0], r, top)})
    out["method"] = {**method(resamples, seed, level), "intervals": "bootstrap over rows within each subset"}
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.subset] = counts.get(row.subset, 0) + 1
    out["rows"] = {"common": len(rows), "subsets": counts, "left_out": left_out, "only_in": only}
    return out

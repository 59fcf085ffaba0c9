"""A sweep's checkpoints against its baseline: which checkpoint --baseline names, and each row's
`vs_baseline`, a paired bootstrap on the same prompts (results.intervals.paired).

Why: neighbouring checkpoints differ by a point or two, which a domain's ~330 prompts move by
sampling alone, so each row says whether its difference is more than that ("significant": the
interval excludes 0). Checkpoints are paired prompt by prompt, so one scored on other prompts is
refused rather than compared. A sweep of another benchmark (`sweep --benchmark`) compares its
checkpoints row by row by that benchmark's numbers (BenchmarkComparisons, engine.benchmark_paired).
"""

from __future__ import annotations

from pathlib import Path

from ..errors import DataError, UsageError
from ..results.intervals import TIE, metric_values, paired
from ..results.metrics import cells_from_scores


def baseline_index(checkpoints, subs: list[str], baseline: str | None) -> int:
    """--baseline (a checkpoint's folder name, path or step) -> its index; the first when None."""
    if baseline is None:
        return 0
    b = str(baseline).rstrip("/") or str(baseline)
    hits = set()
    for k, ((step, path), sub) in enumerate(zip(checkpoints, subs)):
        same_path = Path(b).exists() and Path(path).exists() and Path(b).resolve() == Path(path).resolve()
        if same_path or b in (path.rstrip("/"), Path(path).name, sub) or (step is not None and b == str(step)):
            hits.add(k)
    if len(hits) != 1:
        names = ", ".join(f"{Path(p).name} (step {s})" if s is not None else Path(p).name for s, p in checkpoints)
        what = "matches several checkpoints" if hits else "is not one of the sweep's checkpoints"
        raise UsageError(f"--baseline {baseline} {what}: give a checkpoint's folder name, path or step ({names})")
    return hits.pop()


class Comparisons:
    """Every checkpoint against the baseline, written into the rows as soon as both are scored:
    row["vs_baseline"] = {"baseline": its sub-folder, "metrics": {metric: {"diff", "low", "high", "p",
    "significant"}}}, None for the baseline itself; no key while the baseline is not scored yet. A
    paired bootstrap on their cells; with 0 resamples the plain differences of their summaries (low,
    high and p None). Checkpoints are paired prompt by prompt: one scored on other prompts ("domain/id"
    names) than the others is refused."""

    def __init__(self, baseline: int, name: str, resamples: int = 10_000, seed: int = 0, level: float = 0.95):
        self.baseline, self.name = baseline, name
        self.resamples, self.seed, self.level = resamples, seed, level
        self.cells, self.values, self.domains = {}, {}, None
        self.names, self.first = None, None  # the prompts every checkpoint must have, and whose they were first

    def add(self, k: int, chosen, rejected, domains: list | None, folder: Path, names: list | None = None,
            summary: dict | None = None) -> None:
        """Checkpoint k's scores, the file domain and "domain/id" name of each prompt (None for a run
        read back: read from its results.json, unless there are no resamples) and its summary."""
        if summary is not None:
            self.values[k] = metric_values(summary)
        if self.resamples == 0:  # plain differences of the summaries: results.json is not read again
            if names is not None:
                self._same_prompts(k, names, folder)
            return
        if domains is None or names is None:
            from ..results.files import read_scores

            _, _, domains, _, names = read_scores(folder / "results.json")
        self._same_prompts(k, names, folder)
        self.domains = list(domains)
        self.cells[k] = cells_from_scores(chosen, rejected)

    def _same_prompts(self, k: int, names: list, folder: Path) -> None:
        """The first checkpoint's prompts fix the sweep's; another's must be the same, in the same order
        (so the same as the baseline's, which the message names once it is scored)."""
        names = list(names)
        if self.names is None or names == self.names:
            if self.names is None or k == self.baseline:
                self.first = folder.name
            self.names = names
            return
        mine, theirs = set(names), set(self.names)
        only = [f"{x!r} only in {where}" for x, where in ((min(mine - theirs, default=None), folder.name),
                                                           (min(theirs - mine, default=None), self.first)) if x]
        what = ("; ".join(only) if only else "the same prompts in another order" if len(names) == len(self.names)
                else f"{len(names)} prompts against {len(self.names)}")
        raise DataError(folder / "results.json", f"checkpoint {folder.name} was scored on other prompts than "
                        f"checkpoint {self.first} ({what}): a sweep compares its checkpoints prompt by prompt; "
                        f"score them on the same data, --limit and --domains (--overwrite scores them again)")

    def _metrics(self, k: int) -> dict | None:
        if self.resamples == 0:
            if self.baseline not in self.values or k not in self.values:
                return None
            base, mine = self.values[self.baseline], self.values[k]
            diffs = {m: mine[m] - base[m] + 0.0 for m in base if m in mine}
            return {m: {"diff": 0.0 if abs(d) <= TIE else d, "low": None, "high": None, "p": None,
                        "significant": False} for m, d in diffs.items()}
        if self.baseline not in self.cells or k not in self.cells:
            return None
        got = paired(self.cells[self.baseline], self.cells[k], self.domains, self.resamples, self.seed, self.level)
        return {m: {**v, "significant": bool(v["low"] > 0 or v["high"] < 0)} for m, v in got["metrics"].items()}

    def fill(self, rows: dict) -> None:
        """rows: checkpoint index -> its sweep.json row."""
        if self.baseline not in (self.values if self.resamples == 0 else self.cells):
            return
        for k, row in rows.items():
            if k == self.baseline:
                row["vs_baseline"] = None
            elif row.get("vs_baseline") is None:
                metrics = self._metrics(k)
                if metrics is not None:
                    row["vs_baseline"] = {"baseline": self.name, "metrics": metrics}


class BenchmarkComparisons:
    """Comparisons for a sweep of another benchmark (`sweep --benchmark`): every checkpoint against
    the baseline on the same rows, by the benchmark's own numbers (engine.benchmark_paired):
    row["vs_baseline"] = {"baseline": its sub-folder, "score", "subsets"[, "sections"] ...}, each
    {"diff", "low", "high", "p", "significant"}; None for the baseline itself, no key while the
    baseline is not scored yet. Rows are matched by (subset, id): a checkpoint scored on other rows
    than the first one is refused, naming a row only one of them has."""

    def __init__(self, benchmark: str, bench, baseline: int, name: str, resamples: int = 10_000, seed: int = 0,
                 level: float = 0.95):
        self.benchmark, self.bench, self.baseline, self.name = benchmark, bench, baseline, name
        self.resamples, self.seed, self.level = resamples, seed, level
        self.scores, self.rows, self.keys, self.first = {}, None, None, None

    def add(self, k: int, rows: list, scores: list, folder: Path) -> None:
        """Checkpoint k's rows (tasks.Row) and each row's response scores (chosen, then rejected)."""
        keys = [(r.subset, r.id) for r in rows]
        if self.keys is None:
            self.keys, self.rows, self.first = keys, list(rows), folder.name
        elif keys != self.keys:
            mine, theirs = set(keys), set(self.keys)
            only = [f"{x[0]}/{x[1]} only in {where}" for x, where in
                    ((min(mine - theirs, default=None, key=repr), folder.name),
                     (min(theirs - mine, default=None, key=repr), self.first)) if x]
            what = ("; ".join(only) if only else "the same rows in another order" if len(keys) == len(self.keys)
                    else f"{len(keys)} rows against {len(self.keys)}")
            raise DataError(folder / "results.jsonl", f"checkpoint {folder.name} was scored on other rows than "
                            f"checkpoint {self.first} ({what}): a sweep compares its checkpoints row by row; score "
                            f"them on the same data and --limit")
        self.scores[k] = [list(map(float, s)) for s in scores]

    def fill(self, rows: dict) -> None:
        """rows: checkpoint index -> its sweep.json row."""
        from .benchmark_paired import paired

        if self.baseline not in self.scores:
            return
        for k, row in rows.items():
            if k == self.baseline:
                row["vs_baseline"] = None
            elif row.get("vs_baseline") is None and k in self.scores:
                got = paired(self.benchmark, self.bench, self.rows, self.scores[self.baseline], self.scores[k],
                             self.resamples, self.seed, self.level)
                row["vs_baseline"] = {"baseline": self.name, **got}

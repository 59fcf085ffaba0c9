"""`accuracy` on a judge run of another benchmark than RM-Bench: its numbers computed again from its
results.jsonl by judges.bench_scores' rules, as `accuracy` recomputes a scored run from its scores.

Each line holds what the row's asks gave (judges.bench_run.write_results): its comparisons' credits
(pairwise protocols; a credit is the mean over orders and samples), or its 4-way value or ratings,
one record a sample under --samples K > 1. The intervals are drawn again with --bootstrap. What the
lines do not hold (answers without a verdict, the protocol, whether the rules are official) comes from
the summary.json beside them, when there is one.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import DataError
from .bench_scores import summarize_rows

KEPT = ("judge_protocol", "official", "asked", "invalid_rate", "failed_rate", "invalid_causes")  # validity.rates


def _values(x: dict) -> dict:
    """One sample's values: {"four_way": v} or {"ratings": {response: rating}}."""
    if "four_way" in x:
        return {"four_way": float(x["four_way"])}
    return {"ratings": {r: float(v) for r, v in enumerate(x["ratings"])}}


def read_rows(path: Path) -> tuple[list, list[dict]]:
    """(the rows as engine.benchmarks.TaskSample stand-ins, each row's values as bench_scores.row_values gives
    them) from a judge run's results.jsonl; a DataError naming the line for anything else."""
    from ..engine.benchmarks import TaskSample
    from ..tasks.base import Row

    samples, per = [], []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            chosen, rejected = ("",) * int(rec["n_chosen"]), ("",) * int(rec["n_rejected"])
            v: dict = {}
            if "comparisons" in rec:
                v["comparisons"] = {c: (int(x["better"]), int(x["worse"]), float(x["credit"]))
                                    for c, x in enumerate(rec["comparisons"])}
            elif "samples" in rec:
                v["samples"] = [_values(x) for x in rec["samples"]]
            else:
                v["samples"] = [_values(rec)]
        except (ValueError, KeyError, TypeError) as e:
            raise DataError(path, f"not a row of a judge run ({type(e).__name__}: {e})", index=n) from None
        row = Row(rec["id"], rec["subset"], "", chosen, rejected, str(path), n, rec)
        samples.append(TaskSample(rec["subset"], rec["id"], "", chosen, rejected, rec["subset"], str(path), n, row))
        per.append(v)
    if not samples:
        raise DataError(path, "no rows")
    return samples, per


def recompute(path: Path, name: str, resamples: int) -> dict:
    """The judge run's summary from its results.jsonl (`path`) by `name`'s rules, intervals from `resamples`."""
    from ..tasks import get

    samples, per = read_rows(path)
    summary = summarize_rows(name, samples, per, resamples)[0]
    summary.update({"n_rows": len(samples), "rules": get(name).official})
    try:
        written = json.loads((path.parent / "summary.json").read_text())
    except (OSError, ValueError):
        written = {}
    summary.update({k: written[k] for k in KEPT if k in written})
    return summary


def accuracy_text(path, resamples: int, as_json: bool, name: str | None = None) -> str | None:
    """What `accuracy` prints for another benchmark's run (None: not such a run): a scored run's numbers
    (engine.benchmarks.accuracy_text), else a judge run's, from their results.jsonl."""
    from ..engine.benchmarks import accuracy_text as scored_text
    from ..engine.benchmarks import judged_run, table

    if (text := scored_text(path, resamples, as_json, name)) is not None:
        return text
    judged = judged_run(path)
    if judged is None:
        return None
    summary = recompute(judged[0], name or judged[1], resamples)
    return json.dumps(summary, indent=2) if as_json else table(summary)

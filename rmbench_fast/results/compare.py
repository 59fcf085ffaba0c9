"""Paired comparisons of runs on the same prompts: each run's numbers with 95% intervals, each run
against a baseline with a paired-bootstrap interval and p-value, and the prompts they disagree on most.

Why paired: two models scored on the same prompts share the prompts' difficulty, so the difference
of their accuracies varies far less than either accuracy; resampling the same prompts for both
(intervals.paired) measures that difference's own spread, which two separate intervals overstate.

A run is a run folder (its results.json) or a results file: ours, a judge's (cells), or the official
scripts' (score_chosen / score_rejected). Prompts are matched by domain and id (results.files names
them "domain/id"); runs over different prompt sets are compared on the prompts they share.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import DataError, UsageError
from . import intervals
from .coverage import completeness
from .files import read_results
from .metrics import cells_from_scores, summarize_cells
from .tables import small_note
from .verdicts import KEYS, beside, pct, rate


@dataclass
class Run:
    name: str  # how the user named it (the path as given)
    path: str
    keys: list[str]  # "domain/id" of each prompt: what aligns runs
    domains: list[str]  # file domain of each prompt
    cells: np.ndarray  # [n, 3, 3]
    chosen: np.ndarray | None = None  # [n, 3] (or [n, 3, k]) scores of a scalar model; None for a judge's cells
    rejected: np.ndarray | None = None
    # a judge's summary.json beside its results: its invalid_rate, failed_rate ... (results.verdicts)
    validity: dict | None = None


def load_run(path, name: str | None = None) -> Run:
    """A run folder or results file, as cells per prompt keyed by "domain/id"."""
    p = Path(path)
    if not p.exists():
        raise DataError(path, "no such run folder or results file")
    kind, *data, domains, _subsets, names = read_results(p, require_id=True)
    where = p / "results.json" if p.is_dir() else p
    seen = {}
    for i, key in enumerate(names):
        if key in seen:
            # "all": no domain key, no "domain/id" id, no domain in the file's name (an official file of all domains)
            hint = (": add `domain` to each item or name the file `<domain>_...json`" if domains[i] == "all"
                    else "")
            raise DataError(where, f"prompt {key!r} appears twice (items {seen[key]} and {i}): prompts are matched "
                                   f"across runs by domain and id{hint}", index=i, key="id")
        seen[key] = i
    if kind == "scores":
        chosen, rejected = data
        return Run(name or str(path), str(path), list(names), list(domains), cells_from_scores(chosen, rejected),
                   chosen, rejected)
    return Run(name or str(path), str(path), list(names), list(domains), np.asarray(data[0], dtype=np.float64),
               validity=beside(p) or None)


def align(runs: list[Run]) -> tuple[list[Run], dict[str, int]]:
    """The runs restricted to the prompts all of them have, in the first run's order, and how many
    prompts each run left out."""
    common = set(runs[0].keys)
    for r in runs[1:]:
        common &= set(r.keys)
    if not common:
        raise UsageError(f"{' and '.join(r.name for r in runs)} have no prompt in common (prompts are matched by "
                         f"domain and id)")
    order = [k for k in runs[0].keys if k in common]
    out, left_out = [], {}
    for r in runs:
        index = {k: i for i, k in enumerate(r.keys)}
        pick = np.fromiter((index[k] for k in order), dtype=np.int64, count=len(order))
        left_out[r.name] = len(r.keys) - len(order)
        out.append(Run(r.name, r.path, order, [r.domains[i] for i in pick], r.cells[pick],
                       None if r.chosen is None else r.chosen[pick], None if r.rejected is None else r.rejected[pick],
                       r.validity))
    return out, left_out


def _row(run: Run, i: int) -> dict:
    """A prompt's numbers in one run: its cells, and the scores when the run has them."""
    row = {"cells": run.cells[i].tolist()}
    if run.chosen is not None:
        row["score_chosen"] = run.chosen[i].tolist()
        row["score_rejected"] = run.rejected[i].tolist()
    return row


def disagreements(a: Run, b: Run, top: int) -> list[dict]:
    """The `top` prompts with the largest sum over the 9 cells of |cells_a - cells_b| (> 0 only),
    largest first, ties in prompt order."""
    gap = np.abs(a.cells - b.cells).sum(axis=(1, 2))
    order = np.argsort(-gap, kind="stable")[:max(0, top)]
    return [{"id": a.keys[i], "domain": a.domains[i], "disagreement": float(gap[i]), "a": _row(a, i), "b": _row(b, i)}
            for i in order if gap[i] > 0]


def compare_runs(runs: list[Run], baseline: int = 0, resamples: int = 10_000, seed: int = 0, level: float = 0.95,
                 top: int = 10) -> dict:
    """Every run's metrics with intervals, and every other run against runs[baseline]:

    {"runs": {name: {metric: {"value", "low", "high"}}}, "pairs": [{"a": baseline name, "b": name,
     "metrics": {metric: {"diff" (b - a), "low", "high", "p", "significant"}}, "disagreements": [...]}],
     "method": {...}, "prompts": {"common": n, "left_out": {name: n}, "domains": {file domain: n},
     "complete": bool, "note": None or what the common prompts' overall is (results.coverage)}}, and
    when a run is a judge's with its summary.json: "validity": {name: {"invalid_rate", "failed_rate"}
    (overall, over that run's own prompts; None for a run without them)}

    low / high / p are None when resamples is 0. "significant": the interval excludes 0."""
    if len(runs) < 2:
        raise UsageError("compare needs at least two runs")
    if len({r.name for r in runs}) != len(runs):
        raise UsageError(f"a run is given twice: {', '.join(r.name for r in runs)}")
    if not 0 <= baseline < len(runs):
        raise UsageError(f"baseline {baseline} is not one of the {len(runs)} runs")
    runs, left_out = align(runs)
    domains = runs[0].domains
    names = intervals.metric_names(domains)
    out = {"runs": {}, "pairs": [], "method": intervals.method_info(resamples, seed, level, domains)}
    for r in runs:
        values = intervals.metric_values(summarize_cells(r.cells, domains))
        ci = intervals.bootstrap(r.cells, domains, resamples, seed, level)
        out["runs"][r.name] = {m: {"value": values[m], "low": ci["metrics"][m]["low"] if ci else None,
                                   "high": ci["metrics"][m]["high"] if ci else None} for m in names}
    base = runs[baseline]
    for r in runs:
        if r is base:
            continue
        pair = intervals.paired(base.cells, r.cells, domains, resamples, seed, level)
        metrics = {}
        for m in names:
            diff = out["runs"][r.name][m]["value"] - out["runs"][base.name][m]["value"] + 0.0
            got = pair["metrics"][m] if pair else {"diff": diff, "low": None, "high": None, "p": None}
            metrics[m] = {"diff": got["diff"], "low": got["low"], "high": got["high"], "p": got["p"],
                          "significant": pair is not None and (got["low"] > 0 or got["high"] < 0)}
        out["pairs"].append({"a": base.name, "b": r.name, "metrics": metrics,
                             "disagreements": disagreements(base, r, top)})
    sizes = {}
    for d in domains:
        sizes[d] = sizes.get(d, 0) + 1
    # what the compared prompts cover: a chat-only file against a full run compares chat only
    scoring = {d: {"n_prompts": len(pos)} for d, pos in intervals.layout(domains)}  # table order
    cover = completeness(scoring, {d: {"n_prompts": n} for d, n in sizes.items()})
    out["prompts"] = {"common": len(domains), "left_out": left_out, "domains": sizes, **cover}
    if any(r.validity for r in runs):
        out["validity"] = {r.name: None if not r.validity else {k: rate(r.validity, k, None) for k, _ in KEYS}
                           for r in runs}
    return out


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.2f}"


def _signed(x) -> str:
    return "-" if x is None else f"{100 * x:+.2f}"


def table_row(title: str, values: list[dict], diffs: list[dict]) -> list[str]:
    """One row of a comparison table: each run's value [interval], then each pair's difference
    [interval] (* when it excludes 0) and p."""
    row = [title]
    for v in values:
        row.append(_pct(v["value"]) + ("" if v["low"] is None else f" [{_pct(v['low'])}, {_pct(v['high'])}]"))
    for v in diffs:
        ci = "" if v["low"] is None else f" [{_signed(v['low'])}, {_signed(v['high'])}]"
        row += [_signed(v["diff"]) + ci + (" *" if v["significant"] else "  "), "-" if v["p"] is None else f"{v['p']:.3g}"]
    return row


def aligned(rows: list[list[str]]) -> list[str]:
    """The rows as text columns (the first left-aligned, the rest right), a rule under the head."""
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    out = []
    for i, r in enumerate(rows):
        out.append("  ".join(x.ljust(widths[c]) if c == 0 else x.rjust(widths[c]) for c, x in enumerate(r)).rstrip())
        if i == 0:
            out.append("  ".join("-" * w for w in widths))
    return out


def _cells(m) -> str:
    flat = [x for row in m for x in row]
    if all(x in (0.0, 1.0) for x in flat):
        return " ".join("".join(str(int(x)) for x in row) for row in m)
    return " | ".join(" ".join(f"{x:.2f}" for x in row) for row in m)


def format_comparison(result: dict) -> str:
    """The comparison as text: a legend of the runs, one line per metric (each run's value and
    interval, each pair's difference, interval and p, * where the interval excludes 0), then per
    pair the prompts they disagree on most."""
    names = list(result["runs"])
    label = {n: chr(ord("A") + i) if i < 26 else f"R{i}" for i, n in enumerate(names)}
    prompts, method = result["prompts"], result["method"]
    doms = ", ".join(f"{d} {n}" for d, n in prompts["domains"].items())
    lines = [f"{len(names)} runs compared on {prompts['common']} common prompts ({doms})"]
    for n in names:
        left = prompts["left_out"][n]
        lines.append(f"  {label[n]}  {n}" + (f"  ({left} prompt(s) not in every run left out)" if left else ""))
    if prompts.get("note"):
        lines.append(f"note: {prompts['note']}")
    level = f"{100 * method['level']:g}%"
    if result.get("validity"):
        said = [f"{label[n]} " + ("-" if v is None else f"{pct(v['invalid_rate'])} (failed {pct(v['failed_rate'])})")
                for n, v in result["validity"].items()]
        lines.append(f"answers without a verdict (each run's own prompts): {', '.join(said)}")
    if method["resamples"]:
        small = small_note(method.get("small_domains") or [], prompts["domains"])
        lines += [small] if small else []
        lines.append(f"{level} intervals: {method['kind']} ({method['resamples']} resamples, seed {method['seed']}); "
                     f"differences: paired bootstrap (the same resampled prompts for both runs), two-sided p; "
                     f"* = the interval excludes 0; percent")
    else:
        lines.append("no intervals (--bootstrap 0): values and differences only; percent")
    head = ["metric"] + [label[n] for n in names]
    for pair in result["pairs"]:
        head += [f"{label[pair['b']]}-{label[pair['a']]}", "p"]
    rows = [head]
    metrics = list(result["runs"][names[0]])
    for m in metrics:
        rows.append(table_row(m, [result["runs"][n][m] for n in names], [pair["metrics"][m] for pair in result["pairs"]]))
    lines.append("")
    lines += aligned(rows)
    for pair in result["pairs"]:
        a, b = label[pair["a"]], label[pair["b"]]
        found = pair["disagreements"]
        lines.append("")
        if not found:
            lines.append(f"{b} and {a} agree on every prompt")
            continue
        lines.append(f"{len(found)} prompt(s) where {b} and {a} disagree most (sum over the 9 cells of |{a} - {b}|; "
                     f"cells: chosen i x rejected j, rows concise, detailed plain, detailed markdown):")
        idw = max(len("id"), *(len(x["id"]) for x in found))
        dw = max(len("domain"), *(len(x["domain"]) for x in found))
        lines.append(f"  {'id'.ljust(idw)}  {'domain'.ljust(dw)}  |{a}-{b}|  {a} cells  /  {b} cells")
        for x in found:
            lines.append(f"  {x['id'].ljust(idw)}  {x['domain'].ljust(dw)}  {x['disagreement']:5.2f}  "
                         f"{_cells(x['a']['cells'])}  /  {_cells(x['b']['cells'])}")
    return "\n".join(lines)

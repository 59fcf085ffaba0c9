"""Leaderboard rows of another benchmark's runs (summary.json with `benchmark`, engine.benchmarks):
that benchmark's published columns, as percentages with one decimal, Score first.

reward-bench: Score, Chat, Chat Hard, Safety, Reasoning (its sections), and Prior Sets when the
data held them; reward-bench-2: Score and its subsets (Factuality, Precise IF, Math, Safety, Focus,
Ties); pairs: Score and each subset present in any row. A section or subset a run lacks is '-'.
"""

from __future__ import annotations

from ..errors import DataError

PUBLISHED = {
    "reward-bench": ("Chat", "Chat Hard", "Safety", "Reasoning", "Prior Sets"),
    "reward-bench-2": ("Factuality", "Precise IF", "Math", "Safety", "Focus", "Ties"),
}


def _parts(summary: dict) -> dict:
    """The numbers a row shows besides Score: sections (RewardBench) or subsets."""
    return summary.get("sections") or {} if summary["benchmark"] == "reward-bench" else summary.get("subsets") or {}


def rows(summaries: list[tuple[dict, str]]) -> list[dict]:
    """One row per (summary, model name); every row gets the same `columns` (Model, Score, then the
    benchmark's). Runs of different benchmarks in one table are a DataError naming them."""
    names = {s["benchmark"] for s, _ in summaries}
    if len(names) > 1:
        raise DataError("leaderboard", f"runs of different benchmarks ({', '.join(sorted(names))}): one table each")
    bench = names.pop()
    fixed = PUBLISHED.get(bench)
    seen = [k for s, _ in summaries for k in _parts(s)]
    extra = [k for k in dict.fromkeys(seen) if fixed is None or k not in fixed]
    cols = ("Model", "Score") + tuple(c for c in (fixed or ()) if c in seen or c != "Prior Sets") + tuple(extra)
    out = []
    for summary, name in summaries:
        parts = _parts(summary)
        raw = {"Score": 100 * summary["score"], **{c: 100 * parts[c] for c in cols[2:] if c in parts}}
        out.append({"Model": name, **{c: None if raw.get(c) is None else round(raw[c], 1) for c in cols[1:]},
                    "unrounded": raw, "benchmark": bench, "n_rows": summary.get("n_rows"), "columns": list(cols)})
    return out

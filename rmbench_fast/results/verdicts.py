"""A judge's answers without a verdict in tables and reports: summary.json's `invalid_rate` and
`failed_rate` (judges.validity writes them: {"overall": rate, "domains": {scoring domain: rate}}) as
a "no verdict" and a "failed" column, and a note naming the domains above INVALID_NOTE_RATE with
their most common cause (`invalid_causes`). A summary without those keys (a score run) shows none of
them. An ask without a verdict counts as the run's --invalid rule, so a judge that answers nothing
would otherwise look like a model that always prefers the rejected answer.
"""

from __future__ import annotations

import json
from pathlib import Path

# Above this share of answers without a verdict, a domain's numbers say little of the judge
# (the judge command's warning line uses the same threshold: judges.validity.WARN_RATE).
INVALID_NOTE_RATE = 0.05
KEYS = (("invalid_rate", "no verdict"), ("failed_rate", "failed"))


def _rates(summary: dict, key: str) -> dict | None:
    v = summary.get(key) if isinstance(summary, dict) else None
    return v if isinstance(v, dict) and isinstance(v.get("domains"), dict) else None


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def rate(summary: dict, key: str, domain: str | None) -> float | None:
    """summary[key]'s rate of `domain` (None: overall), or None when it has none."""
    v = _rates(summary, key)
    if v is None:
        return None
    x = v.get("overall") if domain is None else v["domains"].get(domain)
    return float(x) if _number(x) else None


def columns(summary: dict) -> list[tuple[str, str]]:
    """(summary key, column name) of the rates the summary holds, in order: no verdict, failed."""
    return [(k, name) for k, name in KEYS if _rates(summary, k) is not None]


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def validity_head(summary: dict) -> tuple[str, ...]:
    return tuple(name for _, name in columns(summary))


def validity_cells(summary: dict, domain: str | None) -> tuple[str, ...]:
    """The row's cells under validity_head: its rates as percentages, '-' where it has none."""
    return tuple(pct(rate(summary, k, domain)) for k, _ in columns(summary))


def _top_cause(summary: dict, domain: str) -> str | None:
    causes = summary.get("invalid_causes")
    counts = causes.get("domains", {}).get(domain) if isinstance(causes, dict) else None
    if not isinstance(counts, dict) or not counts:
        return None
    name, n = max(counts.items(), key=lambda kv: kv[1] if _number(kv[1]) else -1)
    return f"{name}: {n}"


def high_domains(summary: dict) -> dict[str, float]:
    """{scoring domain: invalid rate} of the domains above INVALID_NOTE_RATE."""
    v = _rates(summary, "invalid_rate")
    if v is None:
        return {}
    return {d: float(r) for d, r in v["domains"].items() if _number(r) and r > INVALID_NOTE_RATE}


def validity_note(summary: dict) -> str | None:
    """'note: answers without a verdict above 5% in chat (100.0%; cut at --max-tokens: 18) ...', or None."""
    high = high_domains(summary)
    if not high:
        return None
    said = []
    for d, r in high.items():
        cause = _top_cause(summary, d)
        said.append(f"{d} ({pct(r)}" + (f"; most common cause {cause}" if cause else "") + ")")
    return (f"note: answers without a verdict above {100 * INVALID_NOTE_RATE:g}% in {', '.join(said)}: each counts "
            f"as the run's --invalid rule, so these numbers say little of the judge (judgements.jsonl holds every "
            f"answer)")


# What a judge's summary.json holds of its answers' validity (judges.validity.rates), copied by
# `accuracy` when it recomputes a judge's summary from its results file.
SUMMARY_KEYS = ("asked", "invalid_rate", "failed_rate", "invalid_causes")


def beside(results) -> dict:
    """SUMMARY_KEYS of the summary.json beside a results file (a run folder, or its results.json):
    {} when there is none, it is not a JSON object, or the file is another one of the folder's."""
    path = Path(results)
    if not path.is_dir() and path.name != "results.json":
        return {}
    folder = path if path.is_dir() else path.parent
    try:
        summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: summary[k] for k in SUMMARY_KEYS if isinstance(summary, dict) and k in summary}

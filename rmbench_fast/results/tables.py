"""A summary as a table: printed (format_table) and in report.md (markdown_table), with the same
rows, the 95% intervals when the summary has them, and the note that says when the overall is not
the paper's four-domain number (results.coverage). A judge's summary (its `invalid_rate`, and
`failed_rate` when it has one: judges.validity) adds a "no verdict" and a "failed" column, and a
note when a domain's answers without a verdict are above INVALID_NOTE_RATE.

A cell with an interval reads '62.50 ±4.1': the value and half the interval's width, in points; the
last column gives the average's interval itself, [low, high] (a bootstrap interval need not be
symmetric about the value).
"""

from __future__ import annotations

from .coverage import summary_completeness
from .verdicts import validity_cells, validity_head, validity_note

LEVELS = ("hard", "normal", "easy")
HEAD = ("domain", "prompts", "hard", "normal", "easy", "avg")


def bounds(summary: dict, name: str) -> tuple[float, float] | None:
    """(low, high) of metric `name` (results.intervals.metric_names) in the summary, or None."""
    iv = summary.get("intervals") if isinstance(summary, dict) else None
    m = iv.get("metrics", {}).get(name) if isinstance(iv, dict) else None
    if not isinstance(m, dict) or m.get("low") is None or m.get("high") is None:
        return None
    return float(m["low"]), float(m["high"])


def has_intervals(summary: dict) -> bool:
    return bounds(summary, "overall") is not None


def _cell(value: float, iv) -> str:
    text = f"{100 * value:.2f}"
    return text if iv is None else f"{text} ±{50 * (iv[1] - iv[0]):.1f}"


def _span(iv) -> str:
    return "-" if iv is None else f"[{100 * iv[0]:.1f}, {100 * iv[1]:.1f}]"


def rows(summary: dict) -> list[tuple[str, ...]]:
    """Header, one row per scoring domain, then overall; with an interval column when the summary has
    intervals, and a judge's "no verdict" / "failed" columns when it has them (results.verdicts)."""
    level = level_label(summary)
    with_iv = level is not None
    out = [HEAD + ((f"{level} interval of avg",) if with_iv else ()) + validity_head(summary)]
    for d, acc in summary["domains"].items():
        ivs = [bounds(summary, f"{d}/{k}") for k in LEVELS] + [bounds(summary, d)]
        cells = [_cell(acc[k], iv) for k, iv in zip(LEVELS + ("avg",), ivs)]
        out.append((d, str(acc["n_prompts"]), *cells, *((_span(ivs[-1]),) if with_iv else ()),
                    *validity_cells(summary, d)))
    ivs = [bounds(summary, k) for k in LEVELS + ("overall",)]
    cells = [_cell(summary[k], iv) for k, iv in zip(LEVELS + ("overall",), ivs)]
    out.append(("overall", str(summary["n_prompts"]), *cells, *((_span(ivs[-1]),) if with_iv else ()),
                *validity_cells(summary, None)))
    return out


def level_label(summary: dict) -> str | None:
    """'95%' when the summary has intervals."""
    if not has_intervals(summary):
        return None
    level = (summary["intervals"].get("method") or {}).get("level", 0.95)
    return f"{100 * level:g}%"


def small_domains(summary: dict) -> list[str]:
    """Scoring domains whose intervals understate the uncertainty (a file domain of fewer than
    results.intervals.MIN_PROMPTS prompts): the intervals' method lists them; a summary written
    before it did, from its file domains' counts."""
    from .intervals import MIN_PROMPTS, small_domains as of_domains

    method = (summary.get("intervals") or {}).get("method") or {}
    if isinstance(method.get("small_domains"), list):
        return [str(d) for d in method["small_domains"]]
    files = summary.get("file_domains")
    if not isinstance(files, dict) or not files:
        return []
    return of_domains([f for f, acc in files.items() for _ in range(min(int(acc["n_prompts"]), MIN_PROMPTS))])


def file_counts(summary: dict) -> dict[str, int]:
    """{file domain: prompts} of a summary's file_domains ({} when it has none)."""
    files = summary.get("file_domains")
    if not isinstance(files, dict):
        return {}
    return {f: int(acc["n_prompts"]) for f, acc in files.items() if isinstance(acc, dict) and "n_prompts" in acc}


def small_note(domains: list[str], files: dict[str, int] | None = None) -> str | None:
    """The note for intervals of `domains` (scoring domains with too few prompts), or None; with
    `files` ({file domain: prompts}), each domain says which of its files is small and how many
    prompts it has: 'safety (safety-response 4 prompts)', not the pooled domain's count."""
    from ..inputs.data import SCORE_DOMAIN
    from .intervals import MIN_PROMPTS

    if not domains:
        return None
    said = []
    for d in domains:
        small = [(f, n) for f, n in (files or {}).items() if SCORE_DOMAIN.get(f, f) == d and n < MIN_PROMPTS]
        if not small:
            said.append(f"{d} (fewer than {MIN_PROMPTS} prompts)")
        elif [f for f, _ in small] == [d]:
            said.append(f"{d} ({small[0][1]} prompt{'s' if small[0][1] != 1 else ''})")
        else:
            said.append(f"{d} ({', '.join(f'{f} {n} prompt' + ('s' if n != 1 else '') for f, n in small)})")
    return (f"note: intervals of {', '.join(said)} understate the uncertainty (a file domain of fewer than "
            f"{MIN_PROMPTS} prompts gives a coarse, too narrow bootstrap; with one prompt its width is 0)")


def _count(x) -> str:
    return f"{x:,}" if isinstance(x, int) and not isinstance(x, bool) else "?"


def notes(summary: dict) -> list[str]:
    """What a reader must know besides the numbers: whether the overall is the paper's, whether
    some intervals are too narrow to trust, and what ± means."""
    out = []
    note = summary_completeness(summary)["note"]
    if note:
        out.append(f"note: {note}")
    judged = validity_note(summary)
    if judged:
        out.append(judged)
    level = level_label(summary)
    if level is not None:
        small = small_note(small_domains(summary), file_counts(summary))
        if small:
            out.append(small)
        method = summary["intervals"].get("method") or {}
        out.append(f"±: half the width of the {level} interval, in points; {method.get('kind', 'bootstrap')} "
                   f"({_count(method.get('resamples'))} resamples, seed {method.get('seed', '?')})")
    return out


def format_table(summary: dict, about: str | None = None) -> str:
    """Domains x hard/normal/easy/avg plus overall, as percentages; `about` (results.describe's
    about_line) above, the notes below."""
    table = rows(summary)
    widths = [max(len(r[c]) for r in table) for c in range(len(table[0]))]
    lines = [about] if about else []
    for i, r in enumerate(table):
        lines.append("  ".join(r[0].ljust(widths[0]) if c == 0 else r[c].rjust(widths[c]) for c in range(len(r))))
        if i == 0 or i == len(table) - 2:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines + notes(summary))


def markdown_table(summary: dict) -> str:
    """The same table in Markdown (numbers right-aligned), the notes below it."""
    table = rows(summary)
    line = ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in table]
    rule = "|:---|" + "---:|" * (len(table[0]) - 1)
    text = "\n".join([line[0], rule, *line[1:-1], line[-1].replace("| overall |", "| **overall** |", 1)])
    extra = notes(summary)
    return "\n\n".join([text, *extra])

"""report.md's text, for a score (or judge) run folder and for a sweep folder, and the sweep table.

A report says first what it reports (model(s), mode, data, --limit, --domains: results.describe),
then the numbers as Markdown tables with their 95% intervals, the note when the overall is not the
paper's four-domain number, and the pictures (results.plots draws them).
"""

from __future__ import annotations

import json
from pathlib import Path

from .coverage import summary_completeness
from .describe import about_line, about_markdown, read_run, sweep_facts
from .tables import bounds, has_intervals, markdown_table


def run_report(facts: dict, summary: dict) -> str:
    """report.md of one run: what it is, its table, its pictures."""
    return "\n".join([
        f"# RM-Bench results: {facts['model']}\n", about_markdown(facts), f"- **prompts**: {summary['n_prompts']}\n",
        markdown_table(summary) + "\n",
        "![accuracy by domain and difficulty](scores.png)\n",
        "![accuracy matrices: chosen style against rejected style](matrices.png)\n",
    ])


def sweep_report(facts: dict, rows: list[dict], summaries: list[dict | None]) -> str:
    """report.md of a sweep: what it is, the sweep table, its picture, then each checkpoint's table
    and pictures."""
    parts = [f"# RM-Bench sweep: {len(rows)} checkpoints\n", about_markdown(facts) + "\n",
             sweep_table(rows, summaries) + "\n",
             f"![accuracy against {'step' if all(r['step'] is not None for r in rows) else 'model'}](sweep.png)\n"]
    for r, summary in zip(rows, summaries):
        parts.append(f"## {r['checkpoint']}\n")
        if summary is not None:
            parts.append(markdown_table(summary) + "\n")
        parts.append(f"![accuracy by domain and difficulty]({r['dir']}/scores.png)\n")
        parts.append(f"![accuracy matrices]({r['dir']}/matrices.png)\n")
    return "\n".join(parts)


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.2f}"


def _vs(row: dict) -> str:
    """The overall's difference from the baseline, '*' when its paired interval excludes 0."""
    vs = row.get("vs_baseline")
    if vs is None:
        return "baseline"
    m = (vs.get("metrics") or {}).get("overall") if isinstance(vs, dict) else None
    if not isinstance(m, dict) or m.get("diff") is None:
        return "-"
    return f"{100 * m['diff']:+.2f}" + ("*" if m.get("significant") else "")


def _has_interval(row: dict) -> bool:
    vs = row.get("vs_baseline")
    m = (vs.get("metrics") or {}).get("overall") if isinstance(vs, dict) else None
    return isinstance(m, dict) and m.get("low") is not None


def sweep_table(rows: list[dict], summaries: list[dict | None] | None = None, root=None) -> str:
    """A sweep's rows (sweep.json checkpoints) as a Markdown table, in percent. With the checkpoints'
    summaries (or `root`, the sweep folder, to read them from): the overall's 95% interval, and the
    note when the overall is not the paper's; with rows that carry `vs_baseline` (a sweep's paired
    comparisons), the overall's difference from the baseline, marked * when significant. With `root`,
    what the sweep is (results.describe) comes first."""
    about = None
    if summaries is None and root is not None:
        summaries, about = _read(root, rows)
    summaries = summaries if summaries is not None else [None] * len(rows)
    domains = [k[:-4] for k in rows[0] if k.endswith("_avg")] if rows else []
    with_iv = any(s is not None and has_intervals(s) for s in summaries)
    baseline = next((r["vs_baseline"].get("baseline") for r in rows if isinstance(r.get("vs_baseline"), dict)), None)
    with_vs = any("vs_baseline" in r for r in rows)
    head = ["checkpoint", "step", "overall"] + (["95% interval"] if with_iv else [])
    head += [f"vs {baseline or 'baseline'}"] if with_vs else []
    head += ["hard", "normal", "easy"] + domains
    lines = ["| " + " | ".join(head) + " |", "|:---|" + "---:|" * (len(head) - 1)]
    for r, s in zip(rows, summaries):
        iv = bounds(s, "overall") if s is not None else None
        cells = [str(r["checkpoint"]).replace("|", "\\|"), str(r["step"]) if r["step"] is not None else "-",
                 _pct(r["overall"])]
        if with_iv:
            cells.append("-" if iv is None else f"[{100 * iv[0]:.1f}, {100 * iv[1]:.1f}]")
        if with_vs:
            cells.append(_vs(r))
        cells += [_pct(r[k]) for k in ("hard", "normal", "easy")]
        cells += [_pct(r.get(f"{d}_avg")) for d in domains]
        lines.append("| " + " | ".join(cells) + " |")
    notes = []
    first = next((s for s in summaries if s is not None), None)
    note = summary_completeness(first)["note"] if first is not None else None
    if note:
        notes.append(f"note: {note}")
    if with_vs and any(_has_interval(r) for r in rows):
        notes.append(f"vs {baseline or 'baseline'}: the overall's difference from it, in points; * where its 95% "
                     f"paired-bootstrap interval excludes 0")
    elif with_vs:
        notes.append(f"vs {baseline or 'baseline'}: the overall's difference from it, in points (no intervals: "
                     f"--bootstrap 0)")
    return "\n\n".join(([about] if about else []) + ["\n".join(lines)] + notes)


def _read(root, rows):
    """The checkpoints' summaries and the sweep's about line, from the sweep folder."""
    root = Path(root)
    summaries = []
    for r in rows:
        try:
            summaries.append(json.loads((root / r["dir"] / "summary.json").read_text()))
        except (OSError, ValueError, KeyError):
            summaries.append(None)
    try:
        meta = json.loads((root / "sweep.json").read_text())
    except (OSError, ValueError):
        meta = {}
    first = read_run(root / rows[0]["dir"]) if rows else None
    return summaries, about_line(sweep_facts(meta, rows, first))

"""Pictures of runs and sweeps (matplotlib, PNG), and plot_run, which draws them and writes report.md.

Every picture names what it shows (model(s), mode, data, --limit, --domains: results.describe) and
carries the 95% intervals the summaries hold: error bars on the domain and difficulty bars, bands on
a sweep's curves (overall, hard, normal, easy and each domain; error bars when its models are not
steps of one training run).

A picture is drawn only when what it shows changed: each PNG carries a stamp of its inputs (the
numbers it plots, its labels and the source of the modules that draw them) in its metadata, and a
picture whose stamp matches is kept as it is (a rerun of a finished sweep spent most of its time
drawing the same pictures again).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from . import coverage, figure_style, tables
from .describe import about_line, read_run, run_facts, sweep_facts
from .report import run_report, sweep_report, sweep_table  # noqa: F401  (sweep_table: long imported from here)
from .figure_style import LEVEL_COLOURS, domain_colours, wrap
from .tables import bounds

STAMP_KEY = "rmbench-fast-inputs"

STYLE_LABELS = ("concise", "detailed", "markdown")
LEVELS = ("hard", "normal", "easy")
def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


def stamp(*inputs) -> str:
    """What a picture shows: its inputs and the code that draws them (this module, its colours and
    titles, and the rules for intervals and notes it reads)."""
    from ..store.fingerprints import sha256_text

    code = hashlib.sha256(b"".join(Path(m.__file__).read_bytes() for m in (tables, coverage, figure_style))
                          + Path(__file__).read_bytes()).hexdigest()
    return sha256_text(code, inputs)


def up_to_date(path: Path, want: str) -> bool:
    """The PNG at `path` exists and was drawn from inputs with this stamp."""
    if not path.is_file():
        return False
    try:
        from PIL import Image

        with Image.open(path) as im:
            return im.info.get(STAMP_KEY) == want
    except Exception:  # noqa: BLE001 - an unreadable picture is drawn again
        return False


def _save(fig, path: Path, want: str) -> None:
    from ..store.atomic import atomic_open

    with atomic_open(path) as f:  # a reader sees the old picture or the new one
        fig.savefig(f, format="png", dpi=110, bbox_inches="tight", metadata={STAMP_KEY: want})


def _draw(path, want: str, build) -> Path:
    """build(plt) -> figure, saved at `path` with stamp `want`; kept as it is when up to date."""
    path = Path(path)
    if up_to_date(path, want):
        return path
    plt = _pyplot()
    fig = build(plt)
    _save(fig, path, want)
    plt.close(fig)
    return path


def _title(fig, about: str | None, note: str | None = None) -> None:
    """What the picture is, and when the overall is not the paper's, above everything."""
    lines = wrap(about) if about else []
    lines += wrap(f"note: {note}") if note else []
    if lines:
        fig.suptitle("\n".join(lines), fontsize=7.5)


def matrices_figure(summary: dict, about: str | None = None, plt=None):
    """One heatmap per scoring domain: rows = chosen style, columns = rejected style, cell =
    fraction of prompts where the chosen response scored higher."""
    plt = plt or _pyplot()
    domains = list(summary["domains"])
    fig, axes = plt.subplots(1, len(domains), figsize=(3.3 * len(domains) + 1.2, 3.9), squeeze=False,
                             layout="constrained")
    for k, (ax, d) in enumerate(zip(axes[0], domains)):
        m = [[100 * x for x in r] for r in summary["matrices"][d]]  # percent, as the cells and the bar say
        im = ax.imshow(m, vmin=0, vmax=100, cmap="RdYlGn")
        for i in range(3):
            for j in range(3):
                ax.text(j, i, f"{m[i][j]:.0f}", ha="center", va="center", fontsize=10)
        ax.set_xticks(range(3), STYLE_LABELS, fontsize=8)
        ax.set_yticks(range(3), STYLE_LABELS if k == 0 else [], fontsize=8)
        ax.set_xlabel("rejected style", fontsize=8)
        if k == 0:
            ax.set_ylabel("chosen style", fontsize=8)
        acc = summary["domains"][d]
        ax.set_title(f"{d}: avg {100 * acc['avg']:.1f}\nhard {100 * acc['hard']:.0f} / normal "
                     f"{100 * acc['normal']:.0f} / easy {100 * acc['easy']:.0f}", fontsize=9)
    fig.colorbar(im, ax=axes[0].tolist(), shrink=0.85, label="accuracy (%)")
    _title(fig, about, coverage.summary_completeness(summary)["note"])
    return fig


def plot_matrices(summary: dict, path, about: str | None = None) -> Path:
    want = stamp("matrices", summary.get("domains"), summary.get("matrices"), about)
    return _draw(path, want, lambda plt: matrices_figure(summary, about, plt))


def _metric(summary: dict, group: str, level: str) -> tuple[float, str]:
    """(value, results.intervals metric name) of a level (hard/normal/easy/avg) of a domain or overall."""
    if group == "overall":
        key = "overall" if level == "avg" else level
        return summary[key], key
    return summary["domains"][group][level], group if level == "avg" else f"{group}/{level}"


def _err(values, ivs) -> list[list[float]]:
    """Error bar lengths below and above each value (percent) from its (low, high) interval."""
    return [[max(0.0, 100 * (v - iv[0])) if iv else 0.0 for v, iv in zip(values, ivs)],
            [max(0.0, 100 * (iv[1] - v)) if iv else 0.0 for v, iv in zip(values, ivs)]]


def scores_figure(summary: dict, about: str | None = None, plt=None):
    """Bars per domain and overall: hard, normal, easy and avg, with the 95% intervals as error bars."""
    import numpy as np

    plt = plt or _pyplot()
    groups = list(summary["domains"]) + ["overall"]
    fig, ax = plt.subplots(figsize=(1.7 * len(groups) + 2.5, 4.0), layout="constrained")
    width = 0.2
    for k, level in enumerate(LEVELS + ("avg",)):
        values, ivs = zip(*((v, bounds(summary, name)) for v, name in (_metric(summary, g, level) for g in groups)))
        xs = np.arange(len(groups)) + (k - 1.5) * width
        ax.bar(xs, [100 * v for v in values], width, label=level, alpha=0.9 if level == "avg" else 0.75,
               color=LEVEL_COLOURS[level],
               yerr=_err(values, ivs) if any(ivs) else None, capsize=2, error_kw={"elinewidth": 0.8})
    ax.axhline(50, color="grey", linestyle=":", linewidth=0.8)  # a coin's accuracy
    ax.set_xticks(range(len(groups)), groups)
    ax.set_ylim(0, 104)
    ax.set_ylabel("accuracy (%)")
    level = tables.level_label(summary)
    ax.set_title("accuracy by domain and difficulty" + (f" ({level} intervals)" if level else ""), fontsize=9)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.grid(axis="y", alpha=0.3)
    _title(fig, about, coverage.summary_completeness(summary)["note"])
    return fig


def plot_scores(summary: dict, path, about: str | None = None) -> Path:
    want = stamp("scores", summary.get("domains"), {k: summary.get(k) for k in ("overall",) + LEVELS},
                 summary.get("intervals"), about)
    return _draw(path, want, lambda plt: scores_figure(summary, about, plt))


def _row_intervals(rows: list[dict], intervals) -> list:
    """Each row's intervals dict ({"metrics": ...}): given, else the row's own, else None."""
    intervals = list(intervals) if intervals is not None else [None] * len(rows)
    return [iv if iv is not None else r.get("intervals") for r, iv in zip(rows, intervals)]


def sweep_figure(rows: list[dict], about: str | None = None, intervals=None, plt=None, note: str | None = None):
    """Accuracy against step: overall, hard / normal / easy, and each domain's avg, each with its 95%
    band. Models that are not steps of one run (`sweep --model A --model B`) are points with error
    bars over their names instead. `note`: the coverage note (results.coverage) of the checkpoints'
    prompts, under `about`."""
    plt = plt or _pyplot()
    ivs = _row_intervals(rows, intervals)
    steps = all(r["step"] is not None for r in rows)
    xs = [r["step"] for r in rows] if steps else list(range(len(rows)))
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.4), layout="constrained")
    domains = [k[:-4] for k in rows[0] if k.endswith("_avg")] if rows else []
    colours = {**LEVEL_COLOURS, **domain_colours(domains)}
    # (axes, row key, interval metric, style, marker without steps, band opacity)
    series = [(a1, "overall", "overall", "-o", "o", 0.15)] + [(a1, k, k, "--", "x", 0.07) for k in LEVELS]
    series += [(a2, f"{d}_avg", d, "-o", "o", 0.15) for d in domains]
    for n, (ax, key, name, style, marker, alpha) in enumerate(series):
        ys = [100 * r[key] if r.get(key) is not None else float("nan") for r in rows]
        spans = [bounds({"intervals": iv}, name) if iv else None for iv in ivs]
        if steps:
            ax.plot(xs, ys, style, label=name, color=colours[name])
            if any(spans):
                ax.fill_between(xs, [100 * s[0] if s else float("nan") for s in spans],
                                [100 * s[1] if s else float("nan") for s in spans], color=colours[name],
                                alpha=alpha, linewidth=0)
        else:  # separate models: no line between them; points side by side, each with its interval
            offset = 0.08 * ((n if ax is a1 else n - 4) - 1.5)
            ax.errorbar([x + offset for x in xs], ys, yerr=_err([y / 100 for y in ys], spans) if any(spans) else None,
                        fmt=marker, capsize=3, label=name, color=colours[name])
    labels = [str(r["checkpoint"]) for r in rows]
    for ax, title in ((a1, "RM-Bench accuracy"), (a2, "per domain (avg)")):
        if steps:
            ax.set_xlabel("step")
        else:
            long = sum(len(t) for t in labels) > 50
            ax.set_xticks(xs, labels, rotation=25 if long else 0, ha="right" if long else "center", fontsize=8)
            ax.set_xlabel("model")
            ax.set_xlim(-0.5, len(rows) - 0.5)
        ax.set_ylabel("accuracy (%)")
        ax.set_title(title + (" (95% bands)" if steps and any(ivs) else " (95% intervals)" if any(ivs) else ""))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    _title(fig, about, note)
    return fig


def plot_sweep(rows: list[dict], path, about: str | None = None, intervals=None, note: str | None = None) -> Path:
    """sweep_figure saved at `path`; its stamp covers every band and the note."""
    want = stamp("sweep", rows, about, _row_intervals(rows, intervals), note)
    return _draw(path, want, lambda plt: sweep_figure(rows, about, intervals, plt, note))


def _summary(folder: Path) -> dict | None:
    try:
        return json.loads((folder / "summary.json").read_text())
    except (OSError, ValueError):
        return None


def plot_run(run_dir) -> list[Path]:
    """Pictures and report.md for a score or judge run folder (summary.json) or a sweep folder (sweep.json)."""
    from ..errors import DataError
    from ..store.atomic import atomic_write_text

    run_dir = Path(run_dir)
    made = []
    if (run_dir / "sweep.json").is_file():
        sweep = json.loads((run_dir / "sweep.json").read_text())
        rows = sweep["checkpoints"]
        if not rows:
            raise DataError(run_dir / "sweep.json", "holds no finished checkpoint yet")
        summaries = [_summary(run_dir / r["dir"]) for r in rows]
        facts = sweep_facts(sweep, rows, read_run(run_dir / rows[0]["dir"]))
        # the checkpoints share their prompts (engine.sweep checks it): the first one's say what they cover
        note = coverage.summary_completeness(summaries[0])["note"] if summaries[0] else None
        made.append(plot_sweep(rows, run_dir / "sweep.png", about_line(facts),
                               [s.get("intervals") if s else None for s in summaries], note))
        for r, summary in zip(rows, summaries):
            if summary is None:
                raise DataError(run_dir / r["dir"] / "summary.json", "missing or not JSON (the sweep's checkpoint "
                                f"{r['checkpoint']})")
            about = about_line(run_facts(read_run(run_dir / r["dir"])))
            made.append(plot_matrices(summary, run_dir / r["dir"] / "matrices.png", about))
            made.append(plot_scores(summary, run_dir / r["dir"] / "scores.png", about))
        made.append(run_dir / "report.md")
        atomic_write_text(run_dir / "report.md", sweep_report(facts, rows, summaries))
        return made
    if (run_dir / "summary.json").is_file():
        summary = json.loads((run_dir / "summary.json").read_text())
        facts = run_facts(read_run(run_dir), run_dir)
        made.append(plot_matrices(summary, run_dir / "matrices.png", about_line(facts)))
        made.append(plot_scores(summary, run_dir / "scores.png", about_line(facts)))
        atomic_write_text(run_dir / "report.md", run_report(facts, summary))
        made.append(run_dir / "report.md")
        return made
    raise DataError(run_dir, "holds neither summary.json (a score run) nor sweep.json (a sweep)")

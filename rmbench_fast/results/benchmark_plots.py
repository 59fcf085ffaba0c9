"""`plot` for another benchmark's run (summary.json names its `benchmark`): one picture of its numbers
(each subset, each RewardBench section, the score, with their 95% intervals as error bars) and a
report.md with the same numbers as tables, from summary.json alone (no 3x3 matrices: these benchmarks
have none)."""

from __future__ import annotations

from pathlib import Path

from . import plots


def _bars(summary: dict) -> list[tuple[str, str, float, list | None]]:
    """(group, name, value, [low, high] or None) for every number summary.json holds."""
    iv = summary.get("intervals") or {}
    out = [("subsets", k, v, (iv.get("subsets") or {}).get(k)) for k, v in summary["subsets"].items()]
    out += [("sections", k, v, (iv.get("sections") or {}).get(k)) for k, v in (summary.get("sections") or {}).items()]
    out.append(("score", "score", summary["score"], iv.get("score")))
    return out


def figure(summary: dict, about: str | None = None, plt=None):
    plt = plt or plots._pyplot()
    bars = _bars(summary)
    fig, ax = plt.subplots(figsize=(0.55 * len(bars) + 3.0, 4.0), layout="constrained")
    colours = {"subsets": "#7a9cc6", "sections": "#d9a441", "score": "#4c4c4c"}
    for x, (group, _, value, bounds) in enumerate(bars):
        err = None if bounds is None else [[100 * max(0.0, value - bounds[0])], [100 * max(0.0, bounds[1] - value)]]
        ax.bar(x, 100 * value, 0.7, color=colours[group], yerr=err, capsize=2, error_kw={"elinewidth": 0.8},
               label=group if group not in {b[0] for b in bars[:x]} else None)
    ax.set_xticks(range(len(bars)), [b[1] for b in bars], rotation=60, ha="right", fontsize=7.5)
    ax.set_ylim(0, 104)
    ax.set_ylabel("accuracy (%)")
    ax.set_title(f"{summary['benchmark']}: {summary.get('n_rows', '?')} rows"
                 + (" (95% intervals)" if summary.get("intervals") else ""), fontsize=9)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.grid(axis="y", alpha=0.3)
    plots._title(fig, about)
    return fig


def report(summary: dict, about: str | None) -> str:
    """report.md: what was scored and each number with its interval, in percent."""
    lines = [f"# {summary['benchmark']}", ""]
    if about:
        lines += [about, ""]
    if summary.get("official") is False:
        lines += ["Not an official mode of this benchmark (its scripts score reward models only).", ""]
    for group in ("subsets", "sections", "score"):
        rows = [b for b in _bars(summary) if b[0] == group]
        if not rows:
            continue
        lines += [f"## {group}", "", "| name | accuracy (%) | 95% interval |", "| --- | ---: | --- |"]
        for _, name, value, bounds in rows:
            span = "" if bounds is None else f"{100 * bounds[0]:.2f} - {100 * bounds[1]:.2f}"
            lines.append(f"| {name} | {100 * value:.2f} | {span} |")
        lines.append("")
    return "\n".join(lines)


def plot_folder(run_dir) -> list[Path]:
    """What `plot` draws for a folder: another benchmark's run here, everything else plots.plot_run."""
    import json

    from .describe import about_line, read_run, run_facts

    run_dir = Path(run_dir)
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        summary = None
    if (run_dir / "sweep.json").is_file():
        sweep = json.loads((run_dir / "sweep.json").read_text())
        if sweep.get("checkpoints") and "benchmark" in sweep["checkpoints"][0]:
            return plot_benchmark_sweep(run_dir, sweep["checkpoints"])
        return plots.plot_run(run_dir)
    if not isinstance(summary, dict) or "benchmark" not in summary:
        return plots.plot_run(run_dir)
    return plot_benchmark_run(run_dir, summary, about_line(run_facts(read_run(run_dir), run_dir)))


def plot_benchmark_run(run_dir: Path, summary: dict, about: str | None) -> list[Path]:
    from ..store.atomic import atomic_write_text

    want = plots.stamp("benchmark", summary.get("benchmark"), summary.get("subsets"), summary.get("sections"),
                       summary.get("score"), summary.get("intervals"), about, Path(__file__).read_bytes().hex())
    made = [plots._draw(run_dir / "scores.png", want, lambda plt: figure(summary, about, plt))]
    atomic_write_text(run_dir / "report.md", report(summary, about))
    return made + [run_dir / "report.md"]


def sweep_figure(rows: list[dict], plt=None):
    """The score and each section (else each subset) against the checkpoint, the score's paired
    interval against the baseline as a band around the baseline's score."""
    plt = plt or plots._pyplot()
    fig, ax = plt.subplots(figsize=(7.0, 4.0), layout="constrained")
    xs = list(range(len(rows)))
    names = [k for k in rows[0] if k.startswith("section:")] or [k for k in rows[0] if k.startswith("subset:")]
    for k in names:
        ax.plot(xs, [100 * r[k] if r.get(k) is not None else None for r in rows], marker=".", linewidth=0.9,
                alpha=0.7, label=k.split(":", 1)[1])
    ax.plot(xs, [100 * r["score"] for r in rows], marker="o", color="black", linewidth=1.6, label="score")
    ivs = [((r.get("vs_baseline") or {}).get("score") or {}) for r in rows]
    base = next((r["score"] for r in rows if "vs_baseline" in r and r["vs_baseline"] is None), rows[0]["score"])
    if any(iv.get("low") is not None for iv in ivs):
        nan = float("nan")
        ax.fill_between(xs, [100 * (base + iv["low"]) if iv.get("low") is not None else nan for iv in ivs],
                        [100 * (base + iv["high"]) if iv.get("high") is not None else nan for iv in ivs],
                        color="grey", alpha=0.2, label="baseline + 95% paired interval")
    ax.set_xticks(xs, [str(r["step"]) if r.get("step") is not None else r["checkpoint"] for r in rows],
                  rotation=45, ha="right", fontsize=7.5)
    ax.set_xlabel("step (or checkpoint)")
    ax.set_ylabel("accuracy (%)")
    ax.set_title(f"{rows[0]['benchmark']}: {len(rows)} checkpoints", fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.grid(alpha=0.3)
    return fig


def plot_benchmark_sweep(out: Path, rows: list[dict]) -> list[Path]:
    """sweep.png and report.md for a benchmark sweep, and each checkpoint's own picture and report."""
    import json

    from ..store.atomic import atomic_write_text

    want = plots.stamp("benchmark-sweep", rows, Path(__file__).read_bytes().hex())
    made = [plots._draw(out / "sweep.png", want, lambda plt: sweep_figure(rows, plt))]
    lines = [f"# {rows[0]['benchmark']} sweep", "", "| checkpoint | step | score (%) | vs baseline (95% paired) |",
             "| --- | --- | ---: | --- |"]
    for r in rows:
        iv = (r.get("vs_baseline") or {}).get("score") or {}
        vs = "" if iv.get("diff") is None else f"{100 * iv['diff']:+.2f}" + (
            "" if iv.get("low") is None else f" [{100 * iv['low']:+.2f}, {100 * iv['high']:+.2f}]")
        lines.append(f"| {r['checkpoint']} | {r.get('step', '')} | {100 * r['score']:.2f} | {vs} |")
    atomic_write_text(out / "report.md", "\n".join(lines) + "\n")
    made.append(out / "report.md")
    for r in rows:
        folder = out / r["dir"]
        summary = json.loads((folder / "summary.json").read_text())
        made += plot_benchmark_run(folder, summary, f"{r['checkpoint']} (step {r.get('step')})")
    return made

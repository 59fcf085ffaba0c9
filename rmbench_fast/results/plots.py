"""Pictures and a Markdown report of runs and sweeps (matplotlib, PNG).

A picture is drawn only when what it shows changed: each PNG carries a stamp of its inputs (the
numbers it plots and this module's source) in its metadata, and a picture whose stamp matches is
kept as it is (a rerun of a finished sweep spent most of its time drawing the same pictures again).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

STAMP_KEY = "rmbench-fast-inputs"

STYLE_LABELS = ("concise", "detailed", "markdown")


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


def stamp(*inputs) -> str:
    """What a picture shows: its inputs and the code that draws them."""
    from ..store.fingerprints import sha256_text

    return sha256_text(hashlib.sha256(Path(__file__).read_bytes()).hexdigest(), inputs)


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


def plot_matrices(summary: dict, path) -> Path:
    """One heatmap per scoring domain: rows = chosen style, columns = rejected style, cell =
    fraction of prompts where the chosen response scored higher."""
    path = Path(path)
    want = stamp("matrices", summary.get("domains"), summary.get("matrices"))
    if up_to_date(path, want):
        return path
    plt = _pyplot()
    domains = list(summary["domains"])
    fig, axes = plt.subplots(1, len(domains), figsize=(3.3 * len(domains) + 1.2, 3.5), squeeze=False,
                             layout="constrained")
    for k, (ax, d) in enumerate(zip(axes[0], domains)):
        m = summary["matrices"][d]
        im = ax.imshow(m, vmin=0, vmax=1, cmap="RdYlGn")
        for i in range(3):
            for j in range(3):
                ax.text(j, i, f"{100 * m[i][j]:.0f}", ha="center", va="center", fontsize=10)
        ax.set_xticks(range(3), STYLE_LABELS, fontsize=8)
        ax.set_yticks(range(3), STYLE_LABELS if k == 0 else [], fontsize=8)
        ax.set_xlabel("rejected style", fontsize=8)
        if k == 0:
            ax.set_ylabel("chosen style", fontsize=8)
        acc = summary["domains"][d]
        ax.set_title(f"{d}: avg {100 * acc['avg']:.1f}\nhard {100 * acc['hard']:.0f} / normal "
                     f"{100 * acc['normal']:.0f} / easy {100 * acc['easy']:.0f}", fontsize=9)
    fig.colorbar(im, ax=axes[0].tolist(), shrink=0.85, label="accuracy")
    _save(fig, path, want)
    plt.close(fig)
    return path


def plot_sweep(rows: list[dict], path) -> Path:
    """Accuracy against step: overall, hard / normal / easy, and each domain's avg."""
    path = Path(path)
    want = stamp("sweep", rows)
    if up_to_date(path, want):
        return path
    plt = _pyplot()
    xs = [r["step"] if r["step"] is not None else i for i, r in enumerate(rows)]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    for key, style in (("overall", "-o"), ("hard", "--"), ("normal", "--"), ("easy", "--")):
        a1.plot(xs, [100 * r[key] for r in rows], style, label=key)
    domains = [k[:-4] for k in rows[0] if k.endswith("_avg")] if rows else []
    for d in domains:
        a2.plot(xs, [100 * r[f"{d}_avg"] if r.get(f"{d}_avg") is not None else float("nan") for r in rows], "-o",
                label=d)
    for ax, title in ((a1, "RM-Bench accuracy"), (a2, "per domain (avg)")):
        ax.set_xlabel("step" if all(r["step"] is not None for r in rows) else "checkpoint")
        ax.set_ylabel("accuracy (%)")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    _save(fig, path, want)
    plt.close(fig)
    return path


def sweep_table(rows: list[dict]) -> str:
    """A sweep's rows (sweep.json checkpoints) as a Markdown table, in percent."""
    domains = [k[:-4] for k in rows[0] if k.endswith("_avg")] if rows else []
    head = ["checkpoint", "step", "overall", "hard", "normal", "easy"] + domains
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["checkpoint"], str(r["step"]) if r["step"] is not None else "-"]
        cells += [f"{100 * r[k]:.2f}" for k in ("overall", "hard", "normal", "easy")]
        cells += [f"{100 * r[f'{d}_avg']:.2f}" if r.get(f"{d}_avg") is not None else "-" for d in domains]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_run(run_dir) -> list[Path]:
    """Pictures and report.md for a score run folder (summary.json) or a sweep folder (sweep.json)."""
    from ..errors import DataError
    from ..store.atomic import atomic_write_text
    from .metrics import format_table

    run_dir = Path(run_dir)
    made = []
    if (run_dir / "sweep.json").is_file():
        sweep = json.loads((run_dir / "sweep.json").read_text())
        rows = sweep["checkpoints"]
        if not rows:
            raise DataError(run_dir / "sweep.json", "holds no finished checkpoint yet")
        made.append(plot_sweep(rows, run_dir / "sweep.png"))
        parts = [f"# RM-Bench sweep: {len(rows)} checkpoints\n", sweep_table(rows), "\n![accuracy against step](sweep.png)\n"]
        for r in rows:
            sub = run_dir / r["dir"]
            summary = json.loads((sub / "summary.json").read_text())
            made.append(plot_matrices(summary, sub / "matrices.png"))
            parts.append(f"## {r['checkpoint']}\n\n![accuracy matrices]({r['dir']}/matrices.png)\n")
        made.append(run_dir / "report.md")
        atomic_write_text(run_dir / "report.md", "\n".join(parts))
        return made
    if (run_dir / "summary.json").is_file():
        summary = json.loads((run_dir / "summary.json").read_text())
        made.append(plot_matrices(summary, run_dir / "matrices.png"))
        atomic_write_text(run_dir / "report.md", f"# RM-Bench results\n\n```\n{format_table(summary)}\n```\n\n"
                                                 f"![accuracy matrices](matrices.png)\n")
        made.append(run_dir / "report.md")
        return made
    raise DataError(run_dir, "holds neither summary.json (a score run) nor sweep.json (a sweep)")

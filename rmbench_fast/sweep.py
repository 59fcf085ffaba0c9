"""`sweep`: every checkpoint of a training run, with the shared work done once.

Checkpoints are ordered by step. Each is scored by the engine into its own sub-folder; the result
store makes the reference model's pass and the tokenization happen once for all of them (K + 1
model passes for K DPO checkpoints instead of 2K), and makes a rerun after a crash recompute
nothing that finished. sweep.csv and sweep.json are rewritten after every checkpoint.
"""

from __future__ import annotations

import csv
import glob
import io
import json
import re
import time
from dataclasses import replace
from pathlib import Path

from .engine import ScoreOptions, open_store, score
from .errors import UsageError
from .results import atomic_write_json, atomic_write_text

_STEP = re.compile(r"(?:checkpoint|step|ckpt|iter)[-_]?(\d+)$|(\d+)$", re.IGNORECASE)


def checkpoint_step(path: str) -> int | None:
    """The training step: trainer_state.json's global_step, else the number ending the folder's
    name (checkpoint-500, step_1000, ...), else None."""
    p = Path(path)
    state = p / "trainer_state.json"
    if state.is_file():
        try:
            step = json.loads(state.read_text()).get("global_step")
            if isinstance(step, int):
                return step
        except (OSError, ValueError):
            pass
    m = _STEP.search(p.name)
    return int(m.group(1) or m.group(2)) if m else None


def find_checkpoints(models: tuple[str, ...] = (), pattern: str | None = None) -> list[tuple[int | None, str]]:
    paths = list(models)
    if pattern:
        matched = sorted(p for p in glob.glob(pattern) if Path(p).is_dir())
        if not matched:
            raise UsageError(f"--checkpoints {pattern}: no folder matches")
        paths += matched
    if not paths:
        raise UsageError("give checkpoints with --model (several times) or --checkpoints GLOB")
    seen, out = set(), []
    for p in paths:
        key = str(Path(p).resolve()) if Path(p).exists() else p
        if key not in seen:
            seen.add(key)
            out.append((checkpoint_step(p), p))
    # by step; checkpoints without one keep their given order, after the numbered ones
    return sorted(out, key=lambda sp: (sp[0] is None, sp[0] if sp[0] is not None else 0))


def _row(name: str, sub: str, path: str, step, summary: dict) -> dict:
    row = {"checkpoint": name, "dir": sub, "path": path, "step": step, "overall": summary["overall"],
           "hard": summary["hard"], "normal": summary["normal"], "easy": summary["easy"]}
    for d, acc in summary["domains"].items():
        row[f"{d}_avg"] = acc["avg"]
    return row


def _write_tables(out: Path, rows: list[dict], meta: dict) -> None:
    atomic_write_json(out / "sweep.json", {**meta, "checkpoints": rows})
    buf = io.StringIO()
    fields = list(dict.fromkeys(k for r in rows for k in r))
    w = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    atomic_write_text(out / "sweep.csv", buf.getvalue())


def run_sweep(o: ScoreOptions, checkpoints: list[tuple[int | None, str]], output: str, hooks=None, plots: bool = True,
              echo=print) -> dict:
    """Score each checkpoint in order into output/<name>; returns the sweep table."""
    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    store = open_store(o)
    names, rows = set(), []
    meta = {"options": {k: v for k, v in vars(o).items() if k != "model"}, "n_checkpoints": len(checkpoints),
            "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    computed = cached = 0
    try:
        for k, (step, path) in enumerate(checkpoints):
            name = Path(path).name or f"checkpoint-{k}"
            sub = name if name not in names else f"{k:03d}-{name}"
            names.add(sub)
            echo(f"[{k + 1}/{len(checkpoints)}] {name} (step {step if step is not None else '-'})")
            run = score(replace(o, model=path, output=str(out / sub)), store=store, hooks=hooks)
            computed += run.run["passes_computed"]
            cached += run.run["passes"] - run.run["passes_computed"]
            rows.append(_row(name, sub, path, step, run.summary))
            _write_tables(out, rows, {**meta, "model_passes_computed": computed, "model_passes_cached": cached})
    finally:
        store.close()
    if plots:
        from .plots import plot_run

        plot_run(out)
    return {"checkpoints": rows, "model_passes_computed": computed, "model_passes_cached": cached}

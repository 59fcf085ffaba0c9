"""A sweep folder (what `rmbench-fast sweep --output DIR` writes: engine.sweep) as the run folders it
holds, for `leaderboard`, `compare` and rmbench_fast.compare: sweep.json lists the finished
checkpoints in step order, each row naming its sub-folder (`dir`), which holds that checkpoint's
results.json, summary.json and run.json as `score` writes them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..errors import DataError


@dataclass
class Checkpoint:
    name: str  # the checkpoint's folder name (sweep.json's `checkpoint`)
    dir: str  # its sub-folder in the sweep (unique within it)
    step: int | None
    folder: Path  # the run folder: <sweep>/<dir>


def is_sweep(path) -> bool:
    """A folder holding sweep.json and no summary.json of its own (a run folder is never a sweep)."""
    p = Path(path)
    return p.is_dir() and (p / "sweep.json").is_file() and not (p / "summary.json").is_file()


def checkpoints(path) -> list[Checkpoint]:
    """The finished checkpoints of the sweep folder `path`, in sweep.json's order (by step).
    DataError, naming sweep.json, when it is not JSON, lists no checkpoint yet, or a row lacks its
    sub-folder."""
    root = Path(path)
    where = root / "sweep.json"
    try:
        meta = json.loads(where.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(where, f"cannot be read ({e})") from None
    except json.JSONDecodeError as e:
        raise DataError(where, f"not JSON ({e.msg} at line {e.lineno}, column {e.colno})") from None
    rows = meta.get("checkpoints") if isinstance(meta, dict) else None
    if not isinstance(rows, list):
        raise DataError(where, "has no 'checkpoints' list (not a sweep.json of rmbench-fast?)")
    if not rows:
        raise DataError(where, "holds no finished checkpoint yet")
    out = []
    for i, r in enumerate(rows):
        sub = r.get("dir") if isinstance(r, dict) else None
        if not isinstance(sub, str) or not sub:
            raise DataError(where, "a checkpoint without its sub-folder", index=i, key="dir")
        step = r.get("step")
        out.append(Checkpoint(str(r.get("checkpoint") or sub), sub, step if isinstance(step, int) else None,
                              root / sub))
    return out


def expand(paths) -> list[tuple[str, Checkpoint | None]]:
    """Each path as given, a sweep folder replaced by its checkpoints' run folders, in order:
    (path, its Checkpoint, or None for a path that is not a sweep's checkpoint)."""
    out = []
    for p in paths:
        if is_sweep(p):
            out += [(str(c.folder), c) for c in checkpoints(p)]
        else:
            out.append((p, None))
    return out


def matches(c: Checkpoint, name: str) -> bool:
    """Whether `name` names checkpoint c: its folder name, its sub-folder or its step."""
    name = str(name).rstrip("/") or str(name)
    return name in (c.name, c.dir) or (c.step is not None and name == str(c.step))

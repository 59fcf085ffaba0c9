"""Atomic writes: a reader sees the old file or the whole new one, never a part, and a crash
leaves no half-written file behind (temp file in the same folder, fsync, rename). The file gets the
mode a plain open() would give it (0666 less the umask), not the temp file's private 0600, so results
on shared storage stay readable by whoever the umask lets read them."""

from __future__ import annotations

import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path


def current_umask() -> int:
    """The process's umask, read without changing it where Linux shows it (/proc/self/status),
    else by setting and restoring it."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextmanager
def atomic_open(path, mode: str = "wb"):
    """Open a temp file beside `path` for writing; on a clean exit it is flushed, fsynced and
    renamed onto `path`; on an error it is removed and `path` is left as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~current_umask())
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path, text: str) -> None:
    with atomic_open(path, "w") as f:
        f.write(text)


def atomic_write_json(path, obj, indent: int | None = 2) -> None:
    atomic_write_text(path, json.dumps(obj, indent=indent, ensure_ascii=False, allow_nan=False) + "\n")

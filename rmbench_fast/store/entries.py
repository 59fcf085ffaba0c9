"""The result store: finished work on disk, keyed by fingerprints, written atomically.

Entries are .npz files named by their key (a sha256 of everything the result depends on):
tokenized inputs, a model's per-sequence scores or log-prob sums. A partial entry holds the work
of a model pass in progress (arrays plus a mask of finished sequences) so an interrupted run
restarts where it stopped. Every write goes to a temp file, is fsynced and renamed into place;
every read checks the zip's CRCs and the key inside, and a damaged entry is deleted and recomputed.
"""

from __future__ import annotations

import shutil
import time
import zipfile
from pathlib import Path

import numpy as np

from .atomic import atomic_open
from .fingerprints import HashCache


class Store:
    """root None: nothing touches the disk (--no-cache), but finished entries are still kept in
    memory for the life of the process, so a sweep computes its reference once either way."""

    def __init__(self, root: Path | str | None):
        self.root = Path(root) if root is not None else None
        self.hashes = HashCache(self.root / "file-hashes.json" if self.root else None)
        self.memory: dict[str, dict] = {}

    @property
    def enabled(self) -> bool:
        return self.root is not None

    def _path(self, kind: str, key: str) -> Path:
        return self.root / kind / key[:2] / f"{key}.npz"

    def _read(self, path: Path, key: str) -> dict | None:
        if not path.is_file():
            return None
        try:
            with np.load(path, allow_pickle=False) as z:
                arrays = {name: z[name] for name in z.files}  # reading each member checks its CRC
            if str(arrays.pop("__key__")) != key:
                raise ValueError("key mismatch")
            return arrays
        except (OSError, ValueError, KeyError, zipfile.BadZipFile, EOFError):
            path.unlink(missing_ok=True)  # truncated or corrupt: recompute
            return None

    def _write(self, path: Path, key: str, arrays: dict) -> None:
        with atomic_open(path) as f:
            np.savez(f, __key__=np.array(key), **arrays)

    def get(self, key: str) -> dict | None:
        got = self.memory.get(key)
        if got is None and self.enabled:
            got = self._read(self._path("entries", key), key)
        return got

    def put(self, key: str, arrays: dict) -> None:
        if not self.enabled:
            self.memory[key] = arrays
        else:
            self._write(self._path("entries", key), key, arrays)
            self.drop_partial(key)

    def get_partial(self, key: str) -> dict | None:
        return self._read(self._path("partial", key), key) if self.enabled else None

    def put_partial(self, key: str, arrays: dict) -> None:
        if self.enabled:
            self._write(self._path("partial", key), key, arrays)

    def drop_partial(self, key: str) -> None:
        if self.enabled:
            self._path("partial", key).unlink(missing_ok=True)

    def close(self) -> None:
        self.hashes.save()


def store_usage(root: Path) -> dict:
    """What the store at `root` holds: finished and partial entries, bytes, oldest and newest."""
    root = Path(root)
    out = {"root": str(root), "entries": 0, "partial": 0, "bytes": 0, "oldest": None, "newest": None}
    times = []  # of the entries and journals
    for kind, name in (("entries", "entries"), ("partial", "partial")):
        for p in (root / kind).rglob("*.npz") if (root / kind).is_dir() else []:
            st = p.stat()
            out[name] += 1
            out["bytes"] += st.st_size
            times.append(st.st_mtime)
    journals = list((root / "judgements").glob("*.jsonl")) if (root / "judgements").is_dir() else []
    out["judge_journals"] = len(journals)  # rmbench_fast.judges.journal: a judge's generations
    for p in journals:
        st = p.stat()
        out["bytes"] += st.st_size
        times.append(st.st_mtime)
    hashes = root / "file-hashes.json"
    if hashes.is_file():
        out["bytes"] += hashes.stat().st_size
    if times:
        fmt = lambda t: time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))  # noqa: E731
        out["oldest"], out["newest"] = fmt(min(times)), fmt(max(times))
    return out


def clear_store(root: Path) -> dict:
    """Delete everything the store at `root` holds; returns what was there."""
    root = Path(root)
    before = store_usage(root)
    for kind in ("entries", "partial", "judgements"):
        if (root / kind).is_dir():
            shutil.rmtree(root / kind)
    (root / "file-hashes.json").unlink(missing_ok=True)
    return before

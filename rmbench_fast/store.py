"""The result store: finished work on disk, keyed by fingerprints, written atomically.

Entries are .npz files named by their key (a sha256 of everything the result depends on):
tokenized inputs, a model's per-sequence scores or log-prob sums. A partial entry holds the work
of a model pass in progress (arrays plus a mask of finished sequences) so an interrupted run
restarts where it stopped. Every write goes to a temp file, is fsynced and renamed into place;
every read checks the zip's CRCs and the key inside, and a damaged entry is deleted and recomputed.
"""

from __future__ import annotations

import os
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from .fingerprints import HashCache


class Store:
    """root None: nothing touches the disk (--no-cache), but finished entries are still kept in
    memory for the life of the process, so a sweep computes its reference once either way."""

    def __init__(self, root: Path | str | None):
        self.root = Path(root) if root is not None else None
        self.hashes = HashCache(self.root / "file-hashes.json" if self.root else None)
        self.memory: dict[str, dict] = {}
        self.hits = 0
        self.misses = 0

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
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(f, __key__=np.array(key), **arrays)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def get(self, key: str) -> dict | None:
        got = self.memory.get(key)
        if got is None and self.enabled:
            got = self._read(self._path("entries", key), key)
        if got is None:
            self.misses += 1
        else:
            self.hits += 1
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

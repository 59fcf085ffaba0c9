"""Every generation a judge run finishes, appended to a journal in the result store as it arrives.

One JSON line per completion, keyed by its request's key (model identity + messages + sampling),
in <store>/judgements/<identity>.jsonl: written with one write() per line and flushed, so a
killed run loses at most the line being written (a cut last line is skipped and counted when the
journal is read). A rerun reads the journal and asks only for what is missing; parsing verdicts
reads it too, so a changed parser, tie or invalid rule re-parses stored text and generates
nothing. Completions that failed (no text) are not kept: a rerun asks again. Without a store
(--no-cache) the journal lives in memory only.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .requests import Completion


def _ends_cut(path: Path) -> bool:
    """Whether the file's last byte is not a newline (a line cut short)."""
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        if f.tell() == 0:
            return False
        f.seek(-1, os.SEEK_END)
        return f.read(1) != b"\n"


class Journal:
    def __init__(self, root: Path | None, identity: str):
        """root None: in memory only (--no-cache, or a judge whose weights have no fingerprint)."""
        self.path = None if root is None else Path(root) / "judgements" / f"{identity[:40]}.jsonl"
        self.done: dict[str, Completion] = {}
        self.cut_lines = 0  # lines a killed run left unfinished, skipped
        if self.path is not None and self.path.is_file():
            self._read()
        self._fd = None

    def _read(self) -> None:
        with open(self.path, "rb") as f:
            for line in f:
                try:
                    entry = json.loads(line)
                    self.done[entry["key"]] = Completion.from_dict(entry["completion"])
                except (ValueError, KeyError, TypeError):
                    self.cut_lines += 1

    def add(self, key: str, completion: Completion) -> None:
        """Keep a finished completion (failed ones only in memory, for this run's outputs)."""
        self.done[key] = completion
        if self.path is None or completion.text is None:
            return
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
            if _ends_cut(self.path):  # a line a killed run did not finish: start on a fresh one
                os.write(self._fd, b"\n")
        line = json.dumps({"key": key, "completion": completion.as_dict()}, ensure_ascii=False) + "\n"
        os.write(self._fd, line.encode())

    def close(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = None

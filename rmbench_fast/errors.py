"""Errors that the CLI reports as one line on stderr with exit status 2 (no traceback), and the one
way every message is squeezed onto a line."""


def one_line(text, limit: int | None = None, tail: bool = False) -> str:
    """`text` (or an exception) with its whitespace runs collapsed to single spaces; cut to its first
    (or, with tail, last) `limit` characters."""
    out = " ".join(str(text).split())
    if limit is not None and len(out) > limit:
        out = out[-limit:] if tail else out[:limit]
    return out


class RmbenchError(Exception):
    """Base class: a fault in the user's input, options or environment, not a bug."""

    def one_line(self) -> str:
        return one_line(self)


class DataError(RmbenchError):
    """Bad benchmark data or results file: the message names the file, the item and the key."""

    def __init__(self, path, message, index=None, key=None, line=None):
        self.path, self.index, self.key, self.line, self.message = str(path), index, key, line, message
        where = [self.path]
        if line is not None:
            where.append(f"line {line}")
        if index is not None:
            where.append(f"item {index}")
        if key is not None:
            where.append(f"key '{key}'")
        super().__init__(f"{', '.join(where)}: {message}")


class ScoreError(RmbenchError):
    """A score that cannot be used (NaN, infinite), naming the sample."""


class UsageError(RmbenchError):
    """Options or models that do not fit together."""

"""Where rmbench-fast keeps things on disk: one cache root for the result store and built models."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """$RMBENCH_CACHE, else ~/.cache/rmbench-fast."""
    return Path(os.environ.get("RMBENCH_CACHE") or Path.home() / ".cache" / "rmbench-fast")


def store_root(cache_dir: str | None = None) -> Path:
    """The result store: --cache-dir when given, else <cache root>/store."""
    return Path(cache_dir) if cache_dir else cache_root() / "store"

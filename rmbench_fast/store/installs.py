"""What names the code of an installed library: its version for a release; for a development
install (editable, no wheel RECORD, a '+' or '.dev' version) a hash of its installed sources, so a
store key or a finished run's stamp never outlives an edit of torch, transformers or tokenizers
that keeps the version string. Nothing is imported: packages are found with find_spec.
"""

from __future__ import annotations

import functools
import hashlib
from importlib import metadata


def _editable(dist) -> bool:
    """An install whose sources stay in a checkout (pip install -e: direct_url.json says so)."""
    import json

    direct = dist.read_text("direct_url.json")
    try:
        return bool(direct) and bool(json.loads(direct).get("dir_info", {}).get("editable"))
    except ValueError:
        return True  # unreadable: take it for what it may be


def _development(dist) -> bool:
    """An editable install, no wheel RECORD, or a '+' / '.dev' version."""
    version = dist.version or ""
    return _editable(dist) or dist.read_text("RECORD") is None or "+" in version or ".dev" in version


@functools.lru_cache(maxsize=None)
def install_sources(name: str) -> str | None:
    """For a development install of distribution `name`, a hash of its installed sources; None for
    a release (its version names its code) or when it is not installed. A wheel's RECORD lists every
    installed file's sha256, so it is that hash for a built wheel ('+cpu', '.dev0'); an editable
    install (sources in a checkout, no RECORD of them) hashes its .py files' contents and its
    compiled extensions' size and mtime."""
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return None
    return distribution_sources(dist)


def distribution_sources(dist) -> str | None:
    import json

    if not _development(dist):
        return None
    record = dist.read_text("RECORD")
    if record is not None and not _editable(dist):
        return "record:" + hashlib.sha256(record.encode()).hexdigest()
    roots = _source_roots(dist)
    h = hashlib.sha256(json.dumps(sorted(str(r) for r in roots)).encode())
    for root in roots:
        for path in sorted(root.rglob("*")):
            if not path.is_file() or "__pycache__" in path.parts:
                continue
            rel = str(path.relative_to(root)).encode()
            if path.suffix == ".py":
                h.update(rel + b"\0" + path.read_bytes() + b"\0")
            elif path.suffix in (".so", ".pyd", ".dylib"):
                st = path.stat()
                h.update(rel + f"\0{st.st_size}:{st.st_mtime_ns}\0".encode())
    return "sources:" + h.hexdigest()


def _source_roots(dist) -> list:
    """Where an install's packages are, found without importing them (find_spec of a top-level name)."""
    import importlib.util
    from pathlib import Path

    names = (dist.read_text("top_level.txt") or "").split() or [dist.metadata["Name"].replace("-", "_")]
    roots = []
    for top in names:
        try:
            spec = importlib.util.find_spec(top)
        except (ImportError, ValueError):
            continue
        if spec is not None and spec.submodule_search_locations:
            roots.extend(Path(p) for p in spec.submodule_search_locations)
        elif spec is not None and spec.origin:
            roots.append(Path(spec.origin).parent)
    return roots

"""The package's own modules and the import graph between them, drawn from the sources (imports
inside functions included): store keys hash what a pass's code imports, and tests/test_structure.py
checks the graph for cycles and layering.

Modules are named as they import: rmbench_fast.*, and rmbench_fast.kernels.* for kernels/ (setup.py
maps that folder there). Only the package's modules are nodes; an import of anything else is no edge.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from pathlib import Path

PACKAGE = "rmbench_fast"


def _folders() -> dict[str, Path]:
    """Package name -> folder: the package's own, and the kernels' wherever they are installed."""
    out = {PACKAGE: Path(__file__).resolve().parents[1]}
    spec = importlib.util.find_spec(f"{PACKAGE}.kernels")
    if spec is not None and spec.submodule_search_locations:
        out[f"{PACKAGE}.kernels"] = Path(list(spec.submodule_search_locations)[0]).resolve()
    return out


@functools.lru_cache(maxsize=1)
def modules() -> dict[str, Path]:
    """Every module of the package (packages by their __init__.py) -> its source file."""
    out = {}
    for prefix, folder in _folders().items():
        for path in sorted(folder.rglob("*.py")):
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join((prefix, *parts))] = path
    return out


def imports(name: str, path: Path, known) -> set[str]:
    """The package modules `name` (whose source is `path`) imports, anywhere in its file: `from . import x`
    counts x when it is a module, else the package; an import of a name inside a module counts the module."""
    package = name if path.stem == "__init__" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:
                t = t.rsplit(".", 1)[0] if "." in t else ""
            if t and t != name:
                found.add(t)
    return found


@functools.lru_cache(maxsize=None)
def imports_of(name: str) -> frozenset[str]:
    """The package modules `name` imports (its source parsed once per process)."""
    known = modules()
    if name not in known:
        raise KeyError(f"{name} is not a module of {PACKAGE}")
    return frozenset(imports(name, known[name], known))


def import_graph() -> dict[str, frozenset[str]]:
    return {name: imports_of(name) for name in modules()}


def closure(roots) -> list[str]:
    """`roots` and every package module they import, directly or not, sorted (only those sources
    are parsed: a key's closure is a part of the package)."""
    seen, todo = set(), list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        edges = imports_of(name)
        seen.add(name)
        todo.extend(edges - seen)
    return sorted(seen)

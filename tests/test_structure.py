"""The package's structure, drawn from its own imports: no import cycle (imports inside functions
included), and no module over 300 lines."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "rmbench_fast"
KERNELS = ROOT / "kernels"  # installed as rmbench_fast.kernels


def modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    for path in sorted(KERNELS.glob("*.py")):
        out["rmbench_fast.kernels" + ("" if path.stem == "__init__" else f".{path.stem}")] = path
    return out


def imports(name: str, path: Path, known) -> set[str]:
    """The package modules `name` imports, anywhere in its file."""
    package = name if path.stem == "__init__" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
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


def test_no_import_cycles():
    mods = modules()
    graph = {name: imports(name, path, mods) for name, path in mods.items()}
    # a package's __init__ importing its own submodules is how packages work, not a cycle
    for name in graph:
        graph[name] = {t for t in graph[name] if not (t.startswith(name + ".") and mods[name].stem == "__init__")}
    state = {}

    def visit(n, stack):
        state[n] = "open"
        for m in sorted(graph[n]):
            if state.get(m) == "open":
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(m):] + [m]))
            if m not in state:
                visit(m, stack + [m])
        state[n] = "done"

    for n in sorted(graph):
        if n not in state:
            visit(n, [n])
    assert len(graph) > 20  # the walk really saw the package


def test_the_engine_stays_thin():
    """The engine and the Ray workers reach scorers only through the interface: no mode tests."""
    for name in ("engine.py", "distributed.py", "sweep.py", "runner.py", "caching.py"):
        text = (PACKAGE / name).read_text()
        assert 'mode == "rm"' not in text and 'mode == "dpo"' not in text, name


def test_module_sizes():
    big = {str(p.relative_to(ROOT)): n for p in modules().values() if (n := len(p.read_text().splitlines())) > 300}
    assert not big, f"modules over 300 lines: {big}"

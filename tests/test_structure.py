"""The package's structure, drawn from its own imports (rmbench_fast.store.code, the graph store keys
hash): no import cycle (imports inside functions included), each subpackage importing only what its
__init__ docstring's "May import:" line allows, the stages visible at the top level, and no module
over 300 lines."""

import ast
import re
from pathlib import Path

from rmbench_fast.store.code import import_graph, modules

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "rmbench_fast"
ENTRIES = ("errors", "store", "models", "inputs", "kernels", "scorers", "adapters", "results", "engine", "judges", "cli",
           "integrations", "tiny", "tasks")


def test_the_graph_sees_the_package():
    graph = import_graph()
    assert len(graph) > 60
    assert "rmbench_fast.kernels.logprob_torch" in graph  # kernels/, installed as rmbench_fast.kernels
    # an import inside a function counts, and `from ..x import name` counts the module x
    assert "rmbench_fast.adapters" in graph["rmbench_fast.engine.prepare"]
    assert "rmbench_fast.models.kinds" in graph["rmbench_fast.scorers.rm"]
    assert "rmbench_fast.kernels" in graph["rmbench_fast.scorers"]


def test_no_import_cycles():
    mods = modules()
    graph = {n: set(targets) for n, targets in import_graph().items()}
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


def entry(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def allowed(subpackage: str) -> set[str]:
    """The entries named on the "May import:" line of a subpackage's docstring, before any "never"
    (parenthesised notes left out)."""
    doc = ast.get_docstring(ast.parse((PACKAGE / subpackage / "__init__.py").read_text()))
    head = doc.split("\n\n")[0].splitlines()
    assert len(head) == 2, f"{subpackage}/__init__.py: its docstring opens with two lines, what it owns and may import"
    line = head[1]
    assert line.startswith("May import:"), f"{subpackage}/__init__.py: second line must say what it may import"
    text = re.sub(r"\([^)]*\)", "", line[len("May import:"):]).split("never")[0]
    return {w for w in re.findall(r"[a-z]+", text) if w in ENTRIES}


def test_each_subpackage_imports_only_what_it_says():
    subpackages = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file())
    assert set(subpackages) == set(ENTRIES) - {"errors", "kernels"}
    wrong = []
    for name, targets in import_graph().items():
        src = entry(name)
        if src not in subpackages:
            continue
        for t in targets:
            dst = entry(t)
            if dst is not None and dst != src and dst not in allowed(src):
                wrong.append(f"{name} imports {t}")
    assert not wrong, "imports a subpackage's docstring does not allow:\n" + "\n".join(sorted(wrong))
    assert allowed("tiny") == set() and allowed("store") == {"errors"}  # the parse reads the lines


def test_the_top_level_shows_the_stages():
    top = sorted(p.name for p in PACKAGE.iterdir() if p.name != "__pycache__")
    assert len(top) <= 15, top  # the stages, tasks (the benchmarks), judges, integrations, errors, tiny, __init__, __main__
    assert {"inputs", "models", "scorers", "adapters", "store", "results", "engine", "cli"} <= set(top)


def test_the_engine_stays_thin():
    """The engine and the Ray workers reach scorers only through the interface: no mode tests."""
    for name in ("score.py", "scaleout/distributed.py", "sweep.py", "runner.py"):
        text = (PACKAGE / "engine" / name).read_text()
        assert 'mode == "rm"' not in text and 'mode == "dpo"' not in text, name
    text = (PACKAGE / "store" / "caching.py").read_text()
    assert 'mode == "rm"' not in text and 'mode == "dpo"' not in text


def test_module_sizes():
    big = {str(p.relative_to(ROOT)): n for p in modules().values() if (n := len(p.read_text().splitlines())) > 300}
    assert not big, f"modules over 300 lines: {big}"


def test_choosing_an_adapter_imports_no_model_code():
    """The command line, the engine and every adapter family's entry import no transformers model code
    (modeling_utils and the Llama / Gemma-2 modelling: about 2 s): a run whose passes all come from
    the store never needs it; a family's classes are built when it loads a model."""
    import subprocess
    import sys

    code = ("import sys, rmbench_fast.cli.main, rmbench_fast.engine.sweep, rmbench_fast.adapters as a; "
            "a.select('x/y', type('C', (), {'architectures': ['GRewardModel'], 'auto_map': None})()); "
            "print(sorted(m for m in sys.modules if m.startswith('transformers.') and 'modeling' in m))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out


def test_the_command_line_imports_no_torch():
    """`rmbench-fast --help`, every command's --help, and the options' choices cost no torch, transformers
    or numba import (torch alone is about 1.2 s here): they are imported where a run needs them."""
    import subprocess
    import sys

    code = ("import sys; from click.testing import CliRunner; from rmbench_fast.cli.main import main\n"
            "for args in [['--help']] + [[name, '--help'] for name in main.commands]:\n"
            "    assert CliRunner().invoke(main, args).exit_code == 0, args\n"
            "print(len(main.commands), sorted(m for m in ('torch', 'transformers', 'numba') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    n, loaded = out.split(" ", 1)
    assert int(n) >= 10 and loaded.strip() == "[]", out


def test_the_kernels_folder_never_stands_for_hugging_faces_kernels():
    """A Python started in the checkout's root finds kernels/ as a top-level `kernels`, the name of
    Hugging Face's package that transformers imports with itself: the real package is what it gets
    (transformers >= 5.25 failed to import: "cannot import name 'CUDAProperties'"), and where no such
    package is installed, the import fails as for any missing module."""
    import subprocess
    import sys

    def run(code):
        return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)

    out = run("import sys, importlib.util, os; print(os.getcwd() in map(os.path.abspath, sys.path)); "
              "real = importlib.util.find_spec('kernels', None) is not None and 'site-packages' in "
              "str(importlib.machinery.PathFinder.find_spec('kernels', [p for p in sys.path if 'site-packages' in p]))\n"
              "import kernels; print(real, os.path.dirname(os.path.realpath(kernels.__file__)))")
    assert out.returncode == 0, out.stderr
    on_path, real, folder = out.stdout.split()
    assert on_path == "True"  # the checkout is on the path: the case this test is about
    assert folder != str(ROOT / "kernels") and (real == "False" or "site-packages" in folder), out.stdout
    missing = run("import sys; sys.path[:] = [p for p in sys.path if 'site-packages' not in p]; import kernels")
    assert missing.returncode != 0 and "ModuleNotFoundError: No module named 'kernels'" in missing.stderr, missing.stderr
    assert "rmbench_fast.kernels" in missing.stderr
    if real == "True":
        assert run("import transformers.integrations.hub_kernels").returncode == 0


def test_an_editable_install_byte_compiles_the_package(tmp_path):
    """setup.py's editable_wheel command byte-compiles rmbench_fast/ and kernels/ in place after
    installing (where PYTHONDONTWRITEBYTECODE is set, an editable install would otherwise compile
    every module at every start)."""
    import importlib.util
    from pathlib import Path

    import setuptools

    root = Path(__file__).resolve().parents[1]
    captured = {}
    namespace = {"__file__": str(tmp_path / "setup.py"), "__name__": "setup"}
    (tmp_path / "README.md").write_text("x")
    for folder in ("rmbench_fast", "kernels"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "mod.py").write_text("x = 1\n")
    real_setup = setuptools.setup
    setuptools.setup = lambda **kw: captured.update(kw)
    try:
        exec(compile((root / "setup.py").read_text(), str(tmp_path / "setup.py"), "exec"), namespace)
    finally:
        setuptools.setup = real_setup
    command = captured["cmdclass"]["editable_wheel"]
    assert issubclass(command, __import__("setuptools.command.editable_wheel").command.editable_wheel.editable_wheel)
    ran = []
    base = type("Base", (), {"run": lambda self: ran.append(1)})
    namespace["_compiled"](base)().run()
    assert ran == [1]
    for folder in ("rmbench_fast", "kernels"):
        assert Path(importlib.util.cache_from_source(str(tmp_path / folder / "mod.py"))).is_file(), folder

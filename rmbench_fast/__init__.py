"""rmbench-fast: fast, exact RM-Bench scoring for reward models and DPO models.

`rmbench_fast.score(...)` and `rmbench_fast.compare(...)` are the Python API (rmbench_fast.engine.api),
imported on first use (PEP 562), so that `import rmbench_fast` stays light: no torch, no transformers.
"""

__version__ = "0.1.0"

_API = ("score", "compare", "Result", "Comparison")


def __getattr__(name):
    if name in _API:
        # by name, not an import statement: store keys draw their code graph from import statements,
        # and the modules that read __version__ (store.keys, engine.finished) do not depend on the API
        import importlib

        return getattr(importlib.import_module(".engine.api", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *_API])

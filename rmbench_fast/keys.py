"""Result-store keys: a hash of everything that can change a stored entry's numbers.

A key covers the inputs (model files, tokenizer files, template, data, options), the code that
computes the numbers (a hash of this package's sources, computed once per process: an editable
install under development never reuses entries across code changes), and the versions of the
libraries that tokenize and compute (rmbench-fast, torch, transformers, tokenizers, triton).
Nothing here is a hand-bumped tag to forget.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import sys
from importlib import metadata
from pathlib import Path

import transformers as _transformers_at_import

from .fingerprints import sha256_text

# Modules that only present or orchestrate numbers computed elsewhere: changing them never changes
# a stored entry, so they stay out of the code fingerprint.
PRESENTATION = {"cli", "cli_options", "cli_cache", "tiny", "tiny_adapters", "plots", "demo", "progress", "sweep",
                "report", "metrics", "results", "paths", "__main__"}


def _source_dirs() -> list[Path]:
    """The package's folder and the kernels' (setup.py maps `kernels/` to rmbench_fast.kernels)."""
    dirs = [Path(__file__).resolve().parent]
    spec = importlib.util.find_spec("rmbench_fast.kernels")
    if spec is not None and spec.submodule_search_locations:
        dirs += [Path(p).resolve() for p in spec.submodule_search_locations]
    return list(dict.fromkeys(dirs))


def read_source(path: Path) -> bytes:
    return path.read_bytes()


@functools.lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """sha256 over the sources of every module that computes numbers (all but PRESENTATION)."""
    h = hashlib.sha256()
    for d in _source_dirs():
        for path in sorted(d.rglob("*.py")):
            if path.stem in PRESENTATION and path.parent == d:
                continue
            h.update(str(path.relative_to(d.parent)).encode() + b"\0" + read_source(path) + b"\0")
    return h.hexdigest()


def library_versions() -> dict:
    """The versions a stored entry depends on (module attributes, so a test can change them)."""
    import tokenizers
    import torch

    import rmbench_fast

    try:
        triton = metadata.version("triton")
    except metadata.PackageNotFoundError:
        triton = None
    # transformers 5 puts a new module object in sys.modules when some model classes load; a
    # version read (or set) on the object imported earlier must count too
    seen = dict.fromkeys(m.__version__ for m in (_transformers_at_import, sys.modules["transformers"]))
    return {"rmbench_fast": rmbench_fast.__version__, "torch": torch.__version__, "transformers": "|".join(seen),
            "tokenizers": tokenizers.__version__, "triton": triton}


def salt() -> list:
    return [code_fingerprint(), library_versions()]


def tokenized_key(tokenizer_fp: str, *parts) -> str:
    return sha256_text("tokenized", *salt(), tokenizer_fp, *parts)


def pass_key(model_fp: str, tokenized: str, *parts) -> str:
    return sha256_text("pass", *salt(), model_fp, tokenized, *parts)

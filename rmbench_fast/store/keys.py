"""Result-store keys: a hash of everything that can change a stored entry's numbers.

A key covers the inputs (model files, tokenizer files, template, data, options), the code that
computes the numbers, and the versions of the libraries that tokenize and compute (rmbench-fast,
torch, transformers, tokenizers, triton; accelerate and bitsandbytes for 8-bit passes; the GPU's
name for CUDA passes, since two GPU models give different last bits). The code is the sources of
the modules a key's computation starts from (the scorer's, for instance) and of every module they
import (store.code's graph), so an edit elsewhere (the command line, plots, another family's
scorer) keeps every stored entry, and an editable install under development never reuses an entry
across an edit that could change it; the same holds for torch, transformers and tokenizers installed
for development (install_sources). Nothing here is a hand-bumped tag or a hand-kept list. The one
exception: entries kept in one process's memory only (no store on disk, IN_MEMORY) leave the code
and library versions out, since every entry of that process shares them.
"""

from __future__ import annotations

import functools
import hashlib
import sys
from importlib import metadata

from .code import closure, modules
from .fingerprints import sha256_text
from .installs import install_sources

# Where each key's computation starts, besides the scorer's own modules (Scorer.code_modules):
# tokenization renders texts through the chat format; a pass runs the batch loop.
TOKENIZE_ROOTS = ("rmbench_fast.inputs.templates", "rmbench_fast.inputs.tokenize")
PASS_ROOTS = ("rmbench_fast.engine.runner", "rmbench_fast.inputs.batching")
PREFIX_ROOTS = ("rmbench_fast.inputs.prefix",)  # passes over suffixes after shared prefixes


def read_source(path) -> bytes:
    return path.read_bytes()


@functools.lru_cache(maxsize=None)
def code_fingerprint(roots: tuple[str, ...]) -> str:
    """sha256 over the names and sources of `roots` and every package module they import."""
    files = modules()
    h = hashlib.sha256()
    for name in closure(roots):
        h.update(name.encode() + b"\0" + read_source(files[name]) + b"\0")
    return h.hexdigest()


def library_versions() -> dict:
    """The versions a stored entry depends on (module attributes, so a test can change them)."""
    import tokenizers
    import torch

    import rmbench_fast

    triton = _optional_version("triton")
    out = {"rmbench_fast": rmbench_fast.__version__, "torch": torch.__version__, "transformers": _transformers(),
           "tokenizers": tokenizers.__version__, "triton": triton, "jinja2": _optional_version("jinja2")}
    for name in ("torch", "transformers", "tokenizers"):
        built = install_sources(name)
        if built is not None:  # an editable or development install: its version does not name its code
            out[f"{name}_sources"] = built
    return out


_SEEN: dict = {}  # the transformers module objects seen, by id


@functools.lru_cache(maxsize=1)
def _installed_transformers() -> str:
    return metadata.version("transformers")


def _transformers() -> str:
    """transformers' version without importing it (a run whose tokenizations and passes are all
    stored never does): the installed distribution's until it is imported, then its module's.
    transformers 5 puts a new module object in sys.modules when some model classes load; a version
    read (or set) on the object imported earlier counts too."""
    installed = _installed_transformers()  # the same whether imported or not
    now = sys.modules.get("transformers")
    if now is not None:
        _SEEN.setdefault(id(now), now)
    return "|".join(dict.fromkeys([installed, *(m.__version__ for m in _SEEN.values())]))


def _optional_version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def device_versions(gpu: str | None, int8: bool = False) -> dict:
    """What a pass's numbers depend on beyond the libraries every key names: the GPU model (None on
    the CPU), and for 8-bit weights the libraries that quantize and place them."""
    out = {}
    if gpu is not None:
        out["gpu"] = gpu
    if int8:
        out.update(bitsandbytes=_optional_version("bitsandbytes"), accelerate=_optional_version("accelerate"))
    return out


# An entry kept in this process's memory only (no result store: --no-cache) is computed and read by the
# same code and libraries, so its key leaves them out (their fingerprint is 0.05 s of a run's fixed cost)
IN_MEMORY = "this process"


def tokenized_key(code_modules: tuple[str, ...], tokenizer_fp: str, *parts, in_memory: bool = False) -> str:
    if in_memory:
        return sha256_text("tokenized", IN_MEMORY, tokenizer_fp, *parts)
    code = code_fingerprint(tuple(sorted({*code_modules, *TOKENIZE_ROOTS})))
    return sha256_text("tokenized", code, library_versions(), tokenizer_fp, *parts)


def config_key(config_json: bytes, trust_remote_code: bool) -> str:
    """A config.json's attributes as the installed transformers's class makes them (models.config_facts)."""
    code = code_fingerprint(("rmbench_fast.models.config_facts",))
    return sha256_text("config", code, library_versions(), hashlib.sha256(config_json).hexdigest(), trust_remote_code)


def tokenizer_facts_key(tokenizer_fp: str, *parts) -> str:
    """A tokenizer's facts (models.tokenizer_facts) as the installed libraries load it from those files."""
    code = code_fingerprint(("rmbench_fast.models.tokenizer_facts", "rmbench_fast.models.tokenizer_loading"))
    return sha256_text("tokenizer-facts", code, library_versions(), tokenizer_fp, *parts)


def pass_key(code_modules: tuple[str, ...], model_fp: str, tokenized: str, gpu: str | None, int8: bool,
             prefix: bool, *parts, in_memory: bool = False) -> str:
    """gpu: the model of the GPU the pass computes on, as the process computing it names it
    (models.device.Target.gpu); None on the CPU. in_memory: see IN_MEMORY."""
    if in_memory:
        return sha256_text("pass", IN_MEMORY, gpu, int8, prefix, model_fp, tokenized, *parts)
    roots = {*code_modules, *PASS_ROOTS, *(PREFIX_ROOTS if prefix else ())}
    code = code_fingerprint(tuple(sorted(roots)))
    return sha256_text("pass", code, library_versions(), device_versions(gpu, int8), model_fp, tokenized, *parts)

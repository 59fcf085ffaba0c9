"""A finished run, recognised without loading anything: the same command again reads its results
back instead of importing transformers, loading configs, tokenizers and data, and looking up every
store entry (about 2 s of fixed cost for a run whose passes all come from the store).

A run's stamp covers what its numbers depend on, at the level of trust the store gives weight
files (store.fingerprints: path, inode, size, mtime and ctime of every file): the stat of every file
under the model, reference, tokenizer, data and chat-template paths; every option but where the
results go and how they are shown; the sources of every module of the package; the installed versions of the libraries that tokenize and compute (read from their
metadata, not imported); the device the passes ran on (models.device.Target) and the environment
variables that change it. run.json records the stamp and the sha256 of results.json and
summary.json; a later run with the same stamp and untouched files is the same run. Paths that are
not local files (hub ids), --no-cache, and Ray runs always take the full path.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import asdict
from importlib import metadata
from pathlib import Path

from ..store.code import modules

LIBRARIES = ("torch", "transformers", "tokenizers", "triton", "numpy", "numba", "accelerate", "bitsandbytes",
             "safetensors", "fschat", "jinja2", "sentencepiece", "protobuf", "tiktoken")
ENVIRONMENT = ("RMBENCH_STANDIN_GPU", "TRITON_INTERPRET", "CUDA_VISIBLE_DEVICES")
NOT_STAMPED = ("output", "progress", "overwrite")  # where results go and how a run shows itself
RESULT_FILES = ("results.json", "summary.json")


def stats(path: Path) -> list | None:
    """(relative path, inode, size, mtime, ctime) of `path` and every file under it; None if it is
    not on this disk."""
    try:
        if not path.exists():
            return None
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        out = []
        for p in files:
            st = p.stat()
            out.append([str(p.relative_to(path)) if p != path else p.name, st.st_ino, st.st_size, st.st_mtime_ns,
                        st.st_ctime_ns])
    except OSError:  # a file gone or unreadable meanwhile: no stamp, the run takes the full path
        return None
    return out


def _versions() -> dict:
    import platform

    import rmbench_fast

    out = {"rmbench_fast": rmbench_fast.__version__, "python": platform.python_version()}
    for name in LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def _code() -> str:
    """Every module of the package (an edit anywhere makes finished runs run again; drawing the
    import graph to narrow that, as store keys do, would cost more than this whole check)."""
    h = hashlib.sha256()
    for name, path in sorted(modules().items()):
        h.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def run_stamp(o, target) -> str | None:
    """The stamp of run `o` (engine.options.ScoreOptions) computing on `target`; None when it has
    none (a path not on this disk, --no-cache, Ray)."""
    if not o.cache or o.engine != "local":
        return None
    inputs = {}
    for name in ("model", "ref_model", "tokenizer", "data", "chat_template"):
        value = getattr(o, name)
        if value is None:
            continue
        found = stats(Path(value).expanduser())
        if found is None:
            if name == "chat_template":  # a template by name: the options hold it
                continue
            return None
        inputs[name] = [str(Path(value).expanduser().resolve()), found]
    options = {k: v for k, v in asdict(o).items() if k not in NOT_STAMPED}
    what = {"inputs": inputs, "options": options, "code": _code(), "versions": _versions(),
            "target": target.describe(), "environment": {k: os.environ.get(k) for k in ENVIRONMENT}}
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()


def file_hashes(out_dir) -> dict:
    return {name: hashlib.sha256((Path(out_dir) / name).read_bytes()).hexdigest() for name in RESULT_FILES}


def finished_run(o, target=None):
    """The run in o.output read back (a result.ScoreRun, samples None) when it is this run (the
    same stamp), finished, with its result files as it wrote them; else None. Its run dict is that
    run.json with passes_computed 0, `reused` true and this check's wall_s. target: where the run
    computes (default: --device in this process)."""
    t0 = time.perf_counter()
    if not o.output or o.overwrite or not o.cache or o.engine != "local":
        return None
    out = Path(o.output)
    try:
        run = json.loads((out / "run.json").read_text())
        if not run.get("stamp") or run.get("result_files") != file_hashes(out):
            return None
        summary = json.loads((out / "summary.json").read_text())
    except (OSError, ValueError, AttributeError):
        return None
    if target is None:
        from ..models.device import local_target

        target = local_target(o.device)
    if run["stamp"] != run_stamp(o, target):
        return None
    from ..results.files import read_scores
    from .result import ScoreRun

    chosen, rejected, *_ = read_scores(out / "results.json")
    run = {**run, "passes_computed": 0, "reused": True, "wall_s": time.perf_counter() - t0}
    return ScoreRun(None, chosen, rejected, summary, run)

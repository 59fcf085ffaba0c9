"""A finished run, recognised without loading anything: the same command again reads its results
back instead of importing transformers, loading configs, tokenizers and data, and looking up every
store entry (about 2 s of fixed cost for a run whose passes all come from the store).

A run's stamp covers what its numbers depend on, at the level of trust the store gives weight
files (store.fingerprints: path, inode, size, mtime and ctime of every file): the stat of every file
under the model, reference, tokenizer, data and chat-template paths; every option but where the
results go and how they are shown; the sources of every module of the package; the installed versions of the libraries that tokenize and compute (read from their
metadata, not imported); the device the passes ran on (models.device.Target) and the environment
variables that change it. run.json records the stamp and the sha256 of its result files
(RESULT_FILES); a later run with the same stamp and untouched files is the same run. Paths that are
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
RESULT_FILES = ("results.json", "summary.json", "results.jsonl")


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
    from ..store.installs import install_sources

    for name in ("torch", "transformers", "tokenizers"):  # a development install: its sources, as store keys do
        built = install_sources(name)
        if built is not None:
            out[f"{name}_sources"] = built
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
    run = {**run, "passes_computed": 0, "reused": True, "read_from": str(out), "wall_s": time.perf_counter() - t0}
    return ScoreRun(None, chosen, rejected, summary, run)


# The same run finished into another folder: its result files are kept in the store under the
# stamp, so `score` with another --output (a copy of a sweep, a notebook's temp folder) reads them
# back without importing transformers, loading configs and tokenizers, tokenizing or looking up
# every pass. Kept only when a run finishes (an interrupted run leaves nothing here).


def _kept_key(stamp: str) -> str:
    return hashlib.sha256(b"finished-run\0" + stamp.encode()).hexdigest()


def keep_run(store, stamp: str | None, out_dir) -> None:
    """Keep the result files of a run just finished in `out_dir` (run.json last) in the store."""
    if not stamp or not store.enabled:
        return
    import numpy as np

    out = Path(out_dir)
    try:
        arrays = {name: np.frombuffer((out / name).read_bytes(), dtype=np.uint8)
                  for name in RESULT_FILES + ("run.json",) if (out / name).is_file()}
        store.put(_kept_key(stamp), arrays)
    except OSError as e:  # the run itself is done and written: a full disk here costs only the shortcut
        import logging

        logging.getLogger("rmbench_fast").warning("the finished run was not kept in the store (%s)", e)


def stored_run(o, store=None, target=None, started: float | None = None):
    """The same run (the same stamp) finished into another folder, written into o.output from the
    store; None when there is none. Its run.json is that run's with this run's options, `reused`
    true, `reused_from` (the folder it was computed in), passes_computed 0 and this run's timing."""
    t0 = time.perf_counter()
    if not o.output or o.overwrite or not o.cache or o.engine != "local":
        return None
    from ..store.atomic import atomic_open, atomic_write_json
    from .checks import check_output

    if target is None:
        from ..models.device import local_target

        target = local_target(o.device)
    stamp = run_stamp(o, target)
    if stamp is None:
        return None
    own = store is None
    if own:
        from ..store.entries import Store
        from ..store.paths import store_root

        store = Store(store_root(o.cache_dir))
    try:
        kept = store.get(_kept_key(stamp))
    finally:
        if own:
            store.close()
    if kept is None or not set(RESULT_FILES + ("run.json",)) <= set(kept):
        return None
    check_output(o)
    out = Path(o.output)
    for name, data in kept.items():
        if name != "run.json":
            with atomic_open(out / name) as f:
                f.write(data.tobytes())
    before = json.loads(kept["run.json"].tobytes())
    now = time.perf_counter()
    total = now - (t0 if started is None else started)
    run = {**before, "options": {**before["options"], **{k: getattr(o, k) for k in NOT_STAMPED}},
           "passes_computed": 0, "reused": True, "reused_from": before["options"].get("output"), "read_from": "store",
           "result_files": file_hashes(out), "wall_s": now - t0,
           "timing": {"startup_s": None if started is None else t0 - started, "load_s": 0.0, "tokenize_s": 0.0,
                      "fingerprint_s": 0.0, "model_load_s": 0.0, "forward_s": 0.0, "passes_s": 0.0,
                      "finish_s": now - t0, "total_s": total, "fixed_s": total}}
    atomic_write_json(out / "run.json", run)
    from ..results.files import read_scores
    from .result import ScoreRun

    chosen, rejected, *_ = read_scores(out / "results.json")
    return ScoreRun(None, chosen, rejected, json.loads(kept["summary.json"].tobytes()), run)

"""What lets a training run score itself without disturbing itself or scoring twice: a digest of a
model's weights, each step's folder and when it can be read back instead of scored, and the random
number generators' states kept across a scoring.

A step folder is read back only when it holds a finished scoring (callback.json, written after the
engine's results, summary and run.json) of the same options, weights, tokenizer source and code
(the package's version and the sources of the modules that score): a resumed run that reaches a step
again with the weights it had is not scored again, while a folder left by another training run in
the same output folder (other weights at that step), or by an older rmbench-fast, is scored again;
its old marker is removed first, so a scoring that fails half-way leaves no folder that looks
finished.

Distributed training: the main process scores the model it holds whole; FSDP and DeepSpeed ZeRO-3
shard the weights over the ranks (each holds a piece, the rest are placeholders), so they are
refused (check_distributed), as are ZeRO-3 placeholder parameters in a digest.
"""

from __future__ import annotations

import hashlib
import json
import random
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch

from ..errors import UsageError
from ..store.atomic import atomic_write_json
from ..store.keys import code_fingerprint

MARKER = "callback.json"
CODE_ROOTS = ("rmbench_fast.engine.api", "rmbench_fast.engine.score")  # and every module they import
SHARDED = ("the main process scores the model it holds whole; {what} shards the weights over the ranks. Score the "
           "checkpoints the training saves instead (rmbench-fast score / sweep)")


def check_distributed(trainer) -> None:
    """Refuse trainers whose model no one process holds whole: FSDP, DeepSpeed ZeRO-3."""
    if getattr(trainer, "is_fsdp_enabled", False):
        raise UsageError("RMBenchCallback: FSDP: " + SHARDED.format(what="FSDP"))
    state = getattr(getattr(trainer, "accelerator", None), "state", None)
    plugin = getattr(state, "deepspeed_plugin", None)
    if plugin is not None and getattr(plugin, "zero_stage", None) == 3:
        raise UsageError("RMBenchCallback: DeepSpeed ZeRO-3: " + SHARDED.format(what="ZeRO-3"))


def _placeholder(t) -> bool:
    """A DeepSpeed ZeRO-3 parameter: this rank holds a partition (ds_id), the tensor is empty."""
    return hasattr(t, "ds_id") or (t.numel() == 0 and bool(getattr(t, "ds_shape", None)))


@torch.no_grad()
def weights_digest(model) -> str:
    """A digest of every parameter and buffer of `model` (names, shapes, dtypes, and per tensor its
    float64 sum and L2 norm, computed where the tensor is: one read of the weights, no copy to the
    host). Identical weights give identical digests; a training step moves them."""
    names, stats = [], []
    for name, t in [*model.named_parameters(), *model.named_buffers()]:
        if _placeholder(t):
            raise UsageError(f"RMBenchCallback: {name} is a DeepSpeed ZeRO-3 partition: "
                             + SHARDED.format(what="ZeRO-3"))
        names.append([name, list(t.shape), str(t.dtype)])
        if t.numel() == 0:
            continue
        t = t.detach()
        if not (t.is_floating_point() or t.is_complex()):
            t = t.double()
        stats.append(torch.stack([t.sum(dtype=torch.float64),
                                  torch.linalg.vector_norm(t, dtype=torch.float64)]).cpu())
    h = hashlib.sha256(json.dumps(names).encode())
    if stats:
        h.update(torch.cat(stats).numpy().tobytes())
    return h.hexdigest()


@contextmanager
def rng_kept():
    """Python's, numpy's, torch's and every initialised CUDA device's RNG states, restored on exit:
    scoring draws nothing a training run would then draw differently."""
    py, npy, cpu = random.getstate(), np.random.get_state(), torch.get_rng_state()
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    try:
        yield
    finally:
        random.setstate(py)
        np.random.set_state(npy)
        torch.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)


def step_folder(root, step: int) -> Path:
    return Path(root) / f"step-{step}"


def identity(options: dict, weights: str, reference, tokenizer_in_memory: bool = False) -> dict:
    """What a step's numbers depend on: the run's options (less where results go and how a run shows
    itself), the weights' digest and the reference's (a digest, a path, or None), whether the
    tokenizer was the trainer's object or loaded from its files, and the code: the package's version
    and the sources of the modules that score (store.keys.code_fingerprint, computed once a process)."""
    import rmbench_fast

    kept = {k: v for k, v in options.items() if k not in ("output", "overwrite", "progress")}
    return {"options": kept, "weights": weights, "reference": reference, "tokenizer_in_memory": tokenizer_in_memory,
            "version": rmbench_fast.__version__, "code": code_fingerprint(CODE_ROOTS)}


def read_back(folder: Path, ident: dict):
    """(summary, ids, domains, subsets, chosen, rejected, run) of the finished scoring in `folder`
    when it is of `ident`, else None."""
    try:
        marker = json.loads((folder / MARKER).read_text())
        if json.loads(json.dumps(ident)) != marker.get("identity"):
            return None
        summary = json.loads((folder / "summary.json").read_text())
        run = json.loads((folder / "run.json").read_text())
        items = json.loads((folder / "results.json").read_text())
    except (OSError, ValueError):
        return None
    from ..results.files import read_scores

    chosen, rejected, domains, subsets, _ = read_scores(folder / "results.json")
    ids = [item.get("id", i) for i, item in enumerate(items)]
    return summary, ids, list(domains), list(subsets), chosen, rejected, {**run, "reused": True}


def unmark(folder: Path) -> None:
    """Before a step is scored again in its folder: no marker of the old scoring over new files."""
    (folder / MARKER).unlink(missing_ok=True)


def mark_finished(folder: Path, step: int, ident: dict) -> None:
    """Written last: the folder's results are this step's, for `ident`."""
    atomic_write_json(folder / MARKER, {"step": step, "identity": ident})

"""Running a scorer over batches: the one loop, the same in this process and in a Ray worker.

`load_for_pass` loads a model for a scorer (with glibc told to keep freed memory on CPU);
`run_batches` scores batches with it, writing each output into the pass's arrays and calling
on_batch(batch) after each. An out-of-memory error retries the batch once as it was (after freeing
the allocator's cache: a batch's shape decides the last bits of its scores, so a transient failure
leaves the numbers bit-identical to an uninterrupted run); a second one halves that batch's token
budget and retries its sequences, down to a single sequence, which then fails naming itself.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from contextlib import contextmanager, nullcontext
from dataclasses import replace

import numpy as np
import torch

from ..errors import UsageError
from ..inputs.batching import Batch, halves
from ..models.device import OUT_OF_MEMORY
from ..models.memory import cpu_peak
from ..models.placement import input_device, placed, placement_of
from .api.lent import device_of, lend
from .runtime import keep_freed_memory

CPU_PEAK_ENV = "RMBENCH_CPU_PEAK"  # "1": measure a CPU pass's peak (run.json: memory.measured)


def load_for_pass(scorer, path: str, dtype, device, trust_remote_code: bool, allow_pickle_weights: bool,
                  placement=None):
    """The scorer's model at `path`, and what run.json records of it. placement: a
    models.placement.Placement (--device-map), or None for `device` alone."""
    info = {}
    if device.type == "cpu":
        info["malloc_keeps_freed_memory"] = keep_freed_memory()
    with placed(placement):
        model = scorer.load(path, dtype, device, trust_remote_code, allow_pickle_weights)
    info.update({"class": type(model).__name__, "parameters": sum(p.numel() for p in model.parameters())})
    where = placement_of(model)
    if where is not None:
        info["placement"] = where
    info["attention"] = getattr(getattr(model, "config", None), "_attn_implementation", None)
    return model, info


@contextmanager
def offload_folder(placement):
    """The placement with a disk-offload folder: its own, else a temporary one removed afterwards."""
    if placement is None or placement.offload_folder is not None:
        yield placement
        return
    folder = tempfile.mkdtemp(prefix="rmbench-offload-")
    try:
        yield replace(placement, offload_folder=folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _reset_gpu_peaks(device):
    if device.type == "cuda":
        for i in range(torch.cuda.device_count()):
            torch.cuda.reset_peak_memory_stats(i)


def measured(model, device, activation_peak: int | None) -> dict:
    """The pass's measured peak: on CUDA torch.cuda.max_memory_allocated (since loading began) per
    GPU; on the CPU the resident weights plus the peak the batches' allocations reached (profiler
    allocation events replayed: models.memory.cpu_peak) on the batches run_batches measured."""
    from ..models.memory import resident_bytes

    if device.type == "cuda":
        per = {f"cuda:{i}": torch.cuda.max_memory_allocated(i) for i in range(torch.cuda.device_count())
               if torch.cuda.max_memory_allocated(i) > 0}
        return {"peak_bytes": max(per.values(), default=0), "per_device": per,
                "how": "torch.cuda.max_memory_allocated since loading began"}
    weights = resident_bytes(model)
    if activation_peak is None:
        return {"peak_bytes": None, "weights_bytes": weights,
                "how": f"not measured on the CPU unless {CPU_PEAK_ENV}=1 (torch's profiler costs time)"}
    return {"peak_bytes": weights + activation_peak,
            "weights_bytes": weights, "activation_peak_bytes": activation_peak,
            "how": "resident weights + the batches' peak of live CPU-allocator bytes (torch.profiler memory "
                   "events replayed) over the first and the largest batch"}


@contextmanager
def model_for_pass(scorer, path: str, lent, dtype, device, trust_remote_code: bool, allow_pickle_weights: bool,
                   plan=None):
    """(model, device, info) for one pass: the scorer's model at `path` loaded onto `device` in
    `dtype` (or placed over the devices: plan.placement), or a model lent in memory (engine.api.lent) as
    it is, on its own device, lent back as it was when the pass ends. plan: the pass's
    engine.preflight.PassPlan, checked before loading (a model that will not fit is a UsageError)
    and recorded in info["memory"] with the measured peak. The device yielded is where inputs go:
    a placed model's input embedding's."""
    t0 = time.perf_counter()
    if lent is None:
        if plan is not None:
            plan.check()
        with offload_folder(plan.placement if plan is not None else None) as placement:
            _reset_gpu_peaks(device)
            model, info = load_for_pass(scorer, path, dtype, device, trust_remote_code, allow_pickle_weights,
                                        placement)
            info["load_s"] = time.perf_counter() - t0
            yield model, input_device(model, device), info
            info["memory"] = {"estimate": plan.estimate if plan is not None else None,
                              "measured": measured(model, device, info.pop("activation_peak_bytes", None))}
        return
    with lend(scorer, lent) as model:
        info = {"class": type(model).__name__, "parameters": sum(p.numel() for p in model.parameters()),
                "load_s": 0.0}
        own = device_of(model)
        _reset_gpu_peaks(own)
        yield model, input_device(model, own), info
        info["memory"] = {"estimate": None, "measured": measured(model, own, info.pop("activation_peak_bytes", None))}


def check_token_ids(scorer, model, seqs, indices, describe) -> None:
    """Every token id the pass will feed must exist in the model's vocabulary."""
    limit = scorer.vocab_limit(model)
    for i in indices:
        top = max(seqs[i].ids, default=0)
        if top >= limit or min(seqs[i].ids, default=0) < 0:
            bad = top if top >= limit else min(seqs[i].ids)
            raise UsageError(f"{describe(int(i))}: token id {bad} is outside the model's vocabulary of {limit} "
                             "(tokenizer and model do not match)")


def run_batches(scorer, model, seqs, batches: list[Batch], arrays: dict, device, batch_lengths,
                describe, on_batch=None, prefix=None) -> dict:
    """Score `batches` of `seqs` (tokenize.Encoded) with `scorer` on `model`, writing each output
    into arrays[name][batch.indices]. batch_lengths: per sequence, the tokens its batch row holds
    (its length, less a shared prefix); describe(i) names sequence i in errors. Returns what the
    scorer's batch function noted for run.json (its `info`, if any) and first_batch_s, the first
    batch's seconds (on a GPU: kernel compilation and tuning, apart from the steady state)."""
    check_token_ids(scorer, model, seqs, np.concatenate([b.indices for b in batches]) if batches else [], describe)
    run = scorer.batch_fn(model, device)

    oom = {"out_of_memory_retries": 0, "out_of_memory_halvings": 0}

    def one(batch, retried=False):
        try:
            out = run(seqs, batch, prefix)
        except OUT_OF_MEMORY:
            if device.type == "cuda":
                torch.cuda.empty_cache()
            if not retried:
                oom["out_of_memory_retries"] += 1
                return one(batch, retried=True)
            oom["out_of_memory_halvings"] += 1
            if len(batch.indices) == 1:
                i = int(batch.indices[0])
                raise UsageError(f"out of memory scoring {describe(i)} ({len(seqs[i].ids)} tokens) alone: use a "
                                 "smaller --dtype, a bigger device, or --compat official to truncate") from None
            for half in halves(batch, batch_lengths):
                one(half)
            return
        for name, values in out.items():
            arrays[name][batch.indices] = values
        if on_batch is not None:
            on_batch(batch)

    # on the CPU the allocations of the first batch (the head's self-check) and of the largest are measured
    largest = max(range(len(batches)), key=lambda k: batches[k].padded_tokens, default=0)
    # (opt-in: the profiler costs time and, in some builds, prints a line as it starts)
    measure = {0, largest} if device.type == "cpu" and os.environ.get(CPU_PEAK_ENV) == "1" else set()
    peaks = []
    t0, first_s = time.perf_counter(), None
    for k, batch in enumerate(batches):
        with cpu_peak() if k in measure else nullcontext({}) as peak:
            one(batch)
        peaks.append(peak.get("bytes") or 0)
        if first_s is None:  # compilation, autotuning and the head's self-check land here
            first_s = time.perf_counter() - t0
    if measure and batches:
        oom["activation_peak_bytes"] = max(peaks)
    return {**getattr(run, "info", {}), **({"first_batch_s": first_s} if first_s is not None else {}), **oom}

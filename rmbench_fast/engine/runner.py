"""Running a scorer over batches: the one loop, the same in this process and in a Ray worker.

`load_for_pass` loads a model for a scorer (with glibc told to keep freed memory on CPU);
`run_batches` scores batches with it, writing each output into the pass's arrays and calling
on_batch(batch) after each. An out-of-memory error retries the batch once as it was (after freeing
the allocator's cache: a batch's shape decides the last bits of its scores, so a transient failure
leaves the numbers bit-identical to an uninterrupted run); a second one halves that batch's token
budget and retries its sequences, down to a single sequence, which then fails naming itself.
"""

from __future__ import annotations

import time
from contextlib import contextmanager

import numpy as np
import torch

from ..errors import UsageError
from ..inputs.batching import Batch, halves
from ..models.device import OUT_OF_MEMORY
from .lent import device_of, lend
from .runtime import keep_freed_memory


def load_for_pass(scorer, path: str, dtype, device, trust_remote_code: bool, allow_pickle_weights: bool):
    """The scorer's model at `path`, and what run.json records of it."""
    info = {}
    if device.type == "cpu":
        info["malloc_keeps_freed_memory"] = keep_freed_memory()
    model = scorer.load(path, dtype, device, trust_remote_code, allow_pickle_weights)
    info.update({"class": type(model).__name__, "parameters": sum(p.numel() for p in model.parameters())})
    return model, info


@contextmanager
def model_for_pass(scorer, path: str, lent, dtype, device, trust_remote_code: bool, allow_pickle_weights: bool):
    """(model, device, info) for one pass: the scorer's model at `path` loaded onto `device` in
    `dtype`, or a model lent in memory (engine.lent) as it is, on its own device, lent back as it
    was when the pass ends."""
    t0 = time.perf_counter()
    if lent is None:
        model, info = load_for_pass(scorer, path, dtype, device, trust_remote_code, allow_pickle_weights)
        info["load_s"] = time.perf_counter() - t0
        yield model, device, info
        return
    with lend(scorer, lent) as model:
        info = {"class": type(model).__name__, "parameters": sum(p.numel() for p in model.parameters()),
                "load_s": 0.0}
        yield model, device_of(model), info


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

    t0, first_s = time.perf_counter(), None
    for batch in batches:
        one(batch)
        if first_s is None:  # compilation, autotuning and the head's self-check land here
            first_s = time.perf_counter() - t0
    return {**getattr(run, "info", {}), **({"first_batch_s": first_s} if first_s is not None else {}), **oom}

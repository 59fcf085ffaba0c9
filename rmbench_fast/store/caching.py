"""A model pass through the result store, wrapped from outside (as lm-eval's CachingLM wraps a
model): a finished pass is reused as it is; an interrupted one resumes from its partial entry;
progress is saved every `flush_every_s` seconds and whenever the pass fails, so nothing finished
is lost. The pass itself is any compute(todo, arrays, on_batch) that fills `arrays`."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import numpy as np

from .entries import Store


@dataclass
class PassResult:
    arrays: dict  # one float64 array per scorer output, over every sequence of the run
    info: dict  # what run.json records: fingerprint, class, cached or computed, seconds


def cached_pass(store: Store, key: str | None, outputs, n: int, batches, compute, progress, on_batch=None,
                flush_every_s: float | None = None) -> PassResult:
    """outputs: {name: shape of one sequence's value} (scorers.base.Scorer.outputs).
    compute(todo, arrays, on_batch) runs the batches not done yet and returns an info dict;
    on_batch(batch) (hooks) runs after each batch. key None: nothing is stored."""
    t0 = time.perf_counter()
    if flush_every_s is None:  # RMBENCH_FLUSH_SECONDS=0 saves progress after every batch
        flush_every_s = float(os.environ.get("RMBENCH_FLUSH_SECONDS", "5"))
    finished = store.get(key) if key else None
    if finished is not None:
        progress.skip(n)
        progress.close()
        return PassResult(finished, {"cached": True, "seconds": time.perf_counter() - t0})
    partial = store.get_partial(key) if key else None
    if partial is not None:
        arrays, done = {k: partial[k] for k in outputs}, partial["done"].astype(bool)
    else:
        arrays, done = {k: np.zeros((n, *shape)) for k, shape in outputs.items()}, np.zeros(n, dtype=bool)
    todo = [b for b in batches if not done[b.indices].all()]
    resumed = int(done.sum())
    progress.skip(resumed)
    last_flush = time.perf_counter()

    def flush():
        if key:
            store.put_partial(key, {**arrays, "done": done})

    def batch_done(batch):
        nonlocal last_flush
        new = int((~done[batch.indices]).sum())  # a batch part done before an interruption runs whole again
        done[batch.indices] = True
        progress(batch, new)
        if on_batch is not None:
            on_batch(batch)
        if key and time.perf_counter() - last_flush >= flush_every_s:
            flush()
            last_flush = time.perf_counter()

    try:
        info = compute(todo, arrays, batch_done) if todo else {}
    except BaseException:
        if int(done.sum()) > resumed:
            flush()  # nothing finished is lost
        raise
    finally:
        progress.close()
    if key:
        store.put(key, arrays)
    return PassResult(arrays, {**info, "cached": False, "resumed_sequences": resumed,
                               "seconds": time.perf_counter() - t0})

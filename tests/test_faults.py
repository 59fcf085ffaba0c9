"""Faults that must not write wrong numbers: an out-of-memory error injected at every decoder call of
a run (prefix batches of a multi-batch wave, the prefix self-check, the fused head's self-check,
suffix batches, the reference pass; an adapter's batches in test_faults_adapters.py), after which
the run retries and ends bit-identical to an uninterrupted one. Before, an error in a wave's second
prefix batch left the wave marked loaded, and the retry read zeros for the prompts it never ran."""

import functools

import numpy as np
import pytest
import torch
from transformers import LlamaModel

from rmbench_fast.engine.score import ScoreOptions, score
from rmbench_fast.models.native_llama import LlamaModel as NativeLlamaModel


def inject(monkeypatch, fail_at: set):
    """Every decoder forward counted (and its kind: a prefix batch asks for a cache), transformers'
    Llama and the native one alike; the calls numbered in `fail_at` raise an out-of-memory error instead."""
    calls = []

    def wrapped(real):
        @functools.wraps(real)
        def forward(self, *args, **kwargs):
            ids = kwargs.get("input_ids", args[0] if args else None)
            kind = "prefix" if kwargs.get("use_cache") and kwargs.get("position_ids") is None else "other"
            calls.append((kind, int(ids.shape[0])))
            if len(calls) - 1 in fail_at:
                raise torch.cuda.OutOfMemoryError("CUDA out of memory (injected)")
            return real(self, *args, **kwargs)
        return forward

    for cls in (LlamaModel, NativeLlamaModel):
        monkeypatch.setattr(cls, "forward", wrapped(cls.forward))
    return calls


def runs(world):
    common = dict(data=world["data"], share_prefix=True, max_tokens_per_batch=120, progress=False, cache=False)
    return {"rm": ScoreOptions(model=world["rm"], **common),
            "dpo": ScoreOptions(model=world["policy"], ref_model=world["ref"], **common)}


@pytest.mark.parametrize("kind", ["rm", "dpo"])
def test_out_of_memory_anywhere_ends_bit_identical(world, monkeypatch, kind):
    o = runs(world)[kind]
    calls = inject(monkeypatch, set())
    clean = score(o)
    n = len(calls)
    assert clean.run["shared_prefix"]["prompts"] > 0
    prefix_calls = [c for c in calls if c[0] == "prefix"]
    assert len(prefix_calls) >= 2 * len(clean.run["models"]), calls  # a wave needs several prefix batches
    for k in range(n):
        calls = inject(monkeypatch, {k})
        again = score(o)
        info = again.run["models"]
        assert sum(p["out_of_memory_retries"] + p["prefix_out_of_memory_halvings"] for p in info.values()) == 1
        assert all(p["logprob_head"] == "fused" for p in info.values() if "logprob_head" in p)
        assert len(calls) > n  # the failed call, and what its retry redid
        assert np.array_equal(again.chosen, clean.chosen) and np.array_equal(again.rejected, clean.rejected), \
            f"out of memory at decoder call {k} of {n} ({calls[k]}) changed the scores"

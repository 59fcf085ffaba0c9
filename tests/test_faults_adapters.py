"""An adapter's batches under an injected out-of-memory error (tests/test_faults.py for the plain
scorers): the retry ends bit-identical to an uninterrupted run."""

import numpy as np
from adapter_world import build, options, world  # noqa: F401 (world: the fixture)
from test_faults import inject

from rmbench_fast.engine.score import score


def test_adapter_out_of_memory_anywhere_ends_bit_identical(world, monkeypatch):  # noqa: F811
    d, *_ = build(world, "grm-llama")  # GRM: a Llama decoder under an MLP value head
    o = options(d, world, max_tokens_per_batch=200)
    calls = inject(monkeypatch, set())
    clean = score(o)
    n = len(calls)
    assert n >= 2 and max(rows for _, rows in calls) > 1
    for k in range(n):
        calls = inject(monkeypatch, {k})
        again = score(o)
        assert again.run["models"]["model"]["out_of_memory_retries"] == 1
        assert np.array_equal(again.chosen, clean.chosen) and np.array_equal(again.rejected, clean.rejected), k

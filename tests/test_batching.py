"""The length-bucketed batcher against its rules, on random lengths (hypothesis): every sequence in
exactly one batch, longest batches first, no row under 97% of its batch's longest (so padded/real
stays under 1/0.97 per batch), the token budget and the row cap kept."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from rmbench_fast.inputs.batching import make_batches, token_counts


@settings(max_examples=300, deadline=None)
@given(lengths=st.lists(st.integers(1, 5000), min_size=1, max_size=300), budget=st.integers(1, 40000),
       cap=st.one_of(st.none(), st.integers(1, 64)))
def test_batches_keep_the_rules(lengths, budget, cap):
    lengths = np.array(lengths)
    batches = make_batches(lengths, budget, cap)
    seen = np.concatenate([b.indices for b in batches])
    assert sorted(seen.tolist()) == list(range(len(lengths)))  # each sequence exactly once
    longest = [b.max_len for b in batches]
    assert longest == sorted(longest, reverse=True)  # longest first
    for b in batches:
        rows = lengths[b.indices]
        assert b.max_len == rows.max()
        assert rows.min() >= 0.97 * b.max_len  # the 3% padding rule, row by row
        assert len(rows) * b.max_len <= budget or len(rows) == 1
        assert cap is None or len(rows) <= cap
    counts = token_counts(lengths, batches)
    assert counts["padded_tokens"] <= counts["real_tokens"] / 0.97 + 1e-9

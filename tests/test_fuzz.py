"""Fuzzed data files: each one either loads and scores as the official formula or fails with the
one-line DataError naming the file."""

import json

import numpy as np
from conftest import DOMAINS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference import official_summary

from rmbench_fast.inputs.data import load_dataset
from rmbench_fast.errors import DataError
from rmbench_fast.results.metrics import summarize

json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                          max_size=4), max_leaves=10)
good_item = st.builds(
    lambda i, d, c, r: {"id": i, "domain": d, "prompt": "p", "chosen": c, "rejected": r},
    st.integers(0, 5), st.sampled_from(DOMAINS), st.lists(st.text(max_size=3), min_size=3, max_size=3),
    st.lists(st.text(max_size=3), min_size=3, max_size=3))
maybe_broken = st.one_of(good_item, good_item.map(lambda x: {k: v for k, v in x.items() if k != "chosen"}),
                         st.tuples(good_item, st.sampled_from(["id", "domain", "prompt", "chosen", "rejected"]),
                                   json_values).map(lambda t: {**t[0], t[1]: t[2]}), json_values)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(items=st.one_of(st.lists(maybe_broken, max_size=8), json_values), seed=st.integers(0, 2**16))
def test_fuzzed_files_load_or_fail_cleanly(tmp_path, items, seed):
    p = tmp_path / "fuzz.json"
    p.write_text(json.dumps(items))
    try:
        samples = load_dataset(p)
    except DataError as e:
        assert str(p) in str(e) and "\n" not in e.one_line()
        return
    rng = np.random.default_rng(seed)
    chosen = rng.integers(0, 3, (len(samples), 3)).astype(float)
    rejected = rng.integers(0, 3, (len(samples), 3)).astype(float)
    ours = summarize(chosen, rejected, [s.domain for s in samples])
    ref = official_summary([{"domain": s.domain, "score_chosen": c.tolist(), "score_rejected": r.tolist()}
                            for s, c, r in zip(samples, chosen, rejected)])
    assert abs(ours["overall"] - ref["overall"]) <= 1e-12

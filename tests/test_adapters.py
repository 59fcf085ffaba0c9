"""Reward-model adapters against plain references written here.

Each family's tiny model is built from plain parts (a transformers decoder and head tensors with
random weights) and saved under the family's published config and weight names (remote-code
families with their minimal modeling file from rmbench_fast.tiny.adapters, named in auto_map;
tokenizers shaped like each family's come from there too). The engine scores it; the reference
reads the documented score of each sequence alone, from the plain parts, in a loop. The folders
carry no official names, so selection by architecture, auto_map, weight names and files is
exercised too; selection by name, --adapter, and the errors have their own tests
(tests/test_adapter_selection.py).
"""

import pickle

import numpy as np
import pytest
import torch
from adapter_families import FAMILIES
from adapter_world import build, options, reference, world  # noqa: F401 (world: the fixture)

from rmbench_fast.inputs.batching import Batch
from rmbench_fast.engine.score import score
from rmbench_fast.engine.prepare import prepare
from rmbench_fast.store.entries import Store


@pytest.mark.parametrize("name", list(FAMILIES))
def test_family_matches_its_plain_reference(world, name):
    d, decoder, spec, tok_kind, adapter = build(world, name)
    run = score(options(d, world, trust_remote_code="remote" in spec))
    assert run.run["adapter"] == adapter and run.run["scorer"] == adapter  # chosen by architecture / auto_map / weights
    chosen, rejected = reference(d, decoder, spec, tok_kind, run.samples)
    assert np.ptp(chosen) > 1e-2  # scores that tell responses apart
    np.testing.assert_allclose(run.chosen, chosen, atol=2e-5, rtol=0)
    np.testing.assert_allclose(run.rejected, rejected, atol=2e-5, rtol=0)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_padding_never_changes_a_score(world, name):
    """Every sequence in one padded batch scores as it does alone."""
    d, _, spec, _, _ = build(world, name)
    prep = prepare(options(d, world, trust_remote_code="remote" in spec), Store(None))
    prep.scorer = pickle.loads(pickle.dumps(prep.scorer))  # as Ray workers get it
    model = prep.scorer.load(d, torch.float32, torch.device("cpu"), "remote" in spec)
    run = prep.scorer.batch_fn(model, torch.device("cpu"))
    lengths = np.array([len(e.ids) for e in prep.seqs])
    assert lengths.max() > 1.5 * lengths.min()  # the batch really pads
    together = run(prep.seqs, Batch(np.arange(len(lengths)), int(lengths.max())))["scores"]
    alone = [run(prep.seqs, Batch(np.array([i]), int(n)))["scores"][0] for i, n in enumerate(lengths)]
    np.testing.assert_allclose(together, alone, atol=1e-5, rtol=0)

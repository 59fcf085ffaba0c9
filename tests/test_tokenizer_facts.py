"""Tokenizer facts (models.tokenizer_facts): a StoredTokenizer answers what a run reads before
encoding as the real tokenizer does, renders the probe conversation as it did, and loads the real
one for anything else; a run whose tokenizations are stored never loads a tokenizer, and scores
as the run that did."""

import numpy as np
import pytest
from conftest import TEST_TEMPLATE

from rmbench_fast.engine import prepare as prepare_mod
from rmbench_fast.engine.score import ScoreOptions, score
from rmbench_fast.models.tokenizer_facts import ATTRS, PROBE, facts, stored_tokenizer


def test_stored_tokenizer_answers_as_the_real_one(world):
    tok = world["tok"]
    tok.chat_template = TEST_TEMPLATE
    try:
        loads = []
        stored = stored_tokenizer(facts(tok, TEST_TEMPLATE), lambda: loads.append(1) or tok)
        assert type(stored).__name__ == type(tok).__name__  # the official tokenizer class is decided from it
        for name in ATTRS:
            assert getattr(stored, name) == getattr(tok, name), name
        probe = tok.apply_chat_template(PROBE, chat_template=TEST_TEMPLATE, tokenize=False)
        assert stored.apply_chat_template(PROBE, chat_template=TEST_TEMPLATE, tokenize=False) == probe
        assert loads == []  # all of that from the facts
        other = [{"role": "user", "content": "hello"}]
        assert stored.apply_chat_template(other, chat_template=TEST_TEMPLATE, tokenize=False) == \
            tok.apply_chat_template(other, chat_template=TEST_TEMPLATE, tokenize=False)
        assert stored("some words")["input_ids"] == tok("some words")["input_ids"]
        assert stored.get_vocab() == tok.get_vocab() and len(stored) == len(tok)
        assert loads == [1]  # loaded once, on the first read the facts do not hold
    finally:
        tok.chat_template = None


@pytest.mark.parametrize("kind", ["rm", "dpo"])
def test_a_run_with_stored_tokenizations_loads_no_tokenizer(world, tmp_path, monkeypatch, kind):
    models = {"rm": dict(model=world["rm"]), "dpo": dict(model=world["policy"], ref_model=world["ref"])}[kind]
    o = ScoreOptions(data=world["data"], progress=False, dtype="float32", cache_dir=str(tmp_path / "store"),
                     bootstrap=0, **models)
    first = score(o)

    def refuse(*a, **kw):
        raise AssertionError("the tokenizer was loaded")

    monkeypatch.setattr(prepare_mod, "load_tokenizer", refuse)
    again = score(o)
    np.testing.assert_array_equal(again.chosen, first.chosen)
    np.testing.assert_array_equal(again.rejected, first.rejected)
    assert again.summary == first.summary


def test_a_stored_tokenizer_pickles_as_the_real_one(world):
    import pickle

    tok = world["tok"]
    stored = stored_tokenizer(facts(tok, None), lambda: tok)
    back = pickle.loads(pickle.dumps(stored))
    assert type(back) is type(tok) and back.get_vocab() == tok.get_vocab()

"""The engine against the plain official references (tests/reference.py): fixed batches of 8 padded
to the longest, whole-model logits, full-vocabulary log_softmax + gather. Tiny random-weight models."""

import json

import numpy as np
import pytest
from conftest import encode_run, make_item
from reference import assert_same_accuracy, official_dpo, official_rm, render
from transformers import AutoTokenizer

from rmbench_fast.inputs.data import load_dataset
from rmbench_fast.engine.score import ScoreOptions, score
from rmbench_fast.errors import UsageError
from rmbench_fast.tiny.models import build_model, llama_config, save_model, train_tokenizer


@pytest.mark.parametrize("tok_kind, append_eos", [("tmpl", False), ("llama", True), ("plain", False)])
def test_rm_matches_official(models, data_path, tok_kind, append_eos):
    run = score(ScoreOptions(model=models[tok_kind]["rm"], data=data_path, limit=3, progress=False))
    ref = official_rm(models[tok_kind]["rm"], run.samples, append_eos)
    np.testing.assert_allclose(run.chosen, ref[0], atol=1e-4, rtol=0)
    np.testing.assert_allclose(run.rejected, ref[1], atol=1e-4, rtol=0)
    assert_same_accuracy(run.samples, (run.chosen, run.rejected), ref)
    assert run.run["chat_template"] == ("tokenizer" if tok_kind == "tmpl" else "tulu")


def test_rm_template_paths_token_for_token(models, data_path):
    """The exact ids: tokenizer template -> no EOS; Llama class without template -> tulu + EOS;
    other classes without template -> tulu, no EOS (add_eos_token does nothing for them in 4.51)."""
    samples = load_dataset(data_path, limit=1)
    for kind, eos in (("tmpl", False), ("llama", True), ("plain", False)):
        tok = AutoTokenizer.from_pretrained(models[kind]["rm"])
        seqs = encode_run(samples, models[kind]["rm"], "rm")
        s = samples[0]
        expected = tok(render(tok, s.prompt, s.rejected[2]))["input_ids"] + ([tok.eos_token_id] if eos else [])
        assert seqs[5].ids == expected
        assert expected[0] == tok.bos_token_id


@pytest.mark.parametrize("ref_free", [None, "sum", "avg", "norm"])
def test_dpo_matches_official(models, data_path, ref_free):
    m = models["tmpl"]
    ref_model = m["ref"] if ref_free is None else None
    run = score(ScoreOptions(model=m["policy"], ref_model=ref_model, ref_free=ref_free, data=data_path, limit=3,
                             progress=False))
    chosen, rejected, n_c, n_r = official_dpo(m["policy"], ref_model, run.samples, ref_free or "avg")
    tol_c = 1e-5 * (n_c if ref_free in (None, "sum") else 1) + 1e-6
    tol_r = 1e-5 * (n_r if ref_free in (None, "sum") else 1) + 1e-6
    assert np.all(np.abs(run.chosen - chosen) <= tol_c)
    assert np.all(np.abs(run.rejected - rejected) <= tol_r)
    assert_same_accuracy(run.samples, (run.chosen, run.rejected), (chosen, rejected))


def test_dpo_tulu_template_matches_official(models, data_path):
    m = models["llama"]
    run = score(ScoreOptions(model=m["policy"], ref_model=m["ref"], data=data_path, limit=2, progress=False))
    chosen, rejected, n_c, n_r = official_dpo(m["policy"], m["ref"], run.samples)
    assert np.all(np.abs(run.chosen - chosen) <= 1e-5 * n_c + 1e-6)
    assert np.all(np.abs(run.rejected - rejected) <= 1e-5 * n_r + 1e-6)


@pytest.mark.parametrize("kind", ["rm", "dpo"])
def test_batch_invariance(models, data_path, kind):
    m = models["tmpl"]
    kw = dict(model=m["rm"]) if kind == "rm" else dict(model=m["policy"], ref_model=m["ref"])
    one = score(ScoreOptions(data=data_path, limit=3, max_batch_size=1, progress=False, **kw))
    many = score(ScoreOptions(data=data_path, limit=3, max_tokens_per_batch=6000, progress=False, **kw))
    assert many.run["n_batches"] < one.run["n_batches"]
    if kind == "rm":
        tol = 1e-5
    else:
        seqs = encode_run(one.samples, m["policy"], "dpo")
        tol = 1e-5 * np.array([len(e.ids) - e.start for e in seqs]).reshape(-1, 3, 2)
    assert np.all(np.abs(one.chosen - many.chosen) <= (tol if kind == "rm" else tol[:, :, 0]))
    assert np.all(np.abs(one.rejected - many.rejected) <= (tol if kind == "rm" else tol[:, :, 1]))


@pytest.fixture
def long_data(tmp_path):
    item = make_item(1, "math", prompt="Please explain in great detail. " * 60)
    item["chosen"][2] = "a long careful derivation step " * 700  # thousands of tokens
    item["rejected"][1] = "short wrong answer"
    p = tmp_path / "long.json"
    p.write_text(json.dumps([item, make_item(2, "math")]))
    return str(p)


def test_compat_truncation_dpo(models, long_data):
    m = models["tmpl"]
    samples = load_dataset(long_data)
    seqs = encode_run(samples, m["policy"], "dpo", compat=True)
    chosen_md, rejected_md = seqs[4], seqs[5]
    assert chosen_md.start == 128 and len(chosen_md.ids) == 2048 and chosen_md.cut > 0
    assert rejected_md.start == 128  # the pair's longer response decides for both
    assert seqs[0].cut == 0  # pairs that fit are untouched
    run = score(ScoreOptions(model=m["policy"], ref_model=m["ref"], data=long_data, compat="official", progress=False))
    chosen, rejected, n_c, n_r = official_dpo(m["policy"], m["ref"], run.samples, truncate=True)
    assert np.all(np.abs(run.chosen - chosen) <= 1e-5 * n_c + 1e-6)
    assert np.all(np.abs(run.rejected - rejected) <= 1e-5 * n_r + 1e-6)
    assert run.run["truncated"]["sequences"] == 2 and run.run["sequences_over_2048_tokens"] >= 1


def test_compat_truncation_rm(models, long_data):
    m = models["llama"]
    tok = AutoTokenizer.from_pretrained(m["rm"])
    samples = load_dataset(long_data)
    seqs = encode_run(samples, m["rm"], "rm", compat=True)
    long = seqs[4]
    full = tok(render(tok, samples[0].prompt, samples[0].chosen[2]))["input_ids"] + [tok.eos_token_id]
    assert len(full) > 2048
    # left truncation keeps BOS and the appended EOS, and the content's last tokens
    assert len(long.ids) == 2048 and long.cut == len(full) - 2048
    assert long.ids[0] == tok.bos_token_id and long.ids[-1] == tok.eos_token_id
    assert long.ids[1:-1] == full[1:-1][-(2048 - 2):]


def test_too_long_without_compat_is_an_error(tmp_path, long_data):
    tok = train_tokenizer(["some text to learn from"] * 4, vocab_size=280)
    short = save_model(build_model("rm", llama_config(len(tok), hidden=16, layers=1, heads=2, max_positions=512),
                                   seed=0), tok, tmp_path / "short")
    with pytest.raises(UsageError, match=r"sample math/1, chosen \w+: \d+ tokens exceed the model.s context length 512"):
        score(ScoreOptions(model=str(short), data=long_data, progress=False))


def test_option_conflicts(models, data_path):
    m = models["tmpl"]
    with pytest.raises(UsageError, match="exclude each other"):
        score(ScoreOptions(model=m["policy"], ref_model=m["ref"], ref_free="avg", data=data_path))
    with pytest.raises(UsageError, match="sequence classifier"):
        score(ScoreOptions(model=m["rm"], ref_model=m["ref"], data=data_path))


@pytest.mark.parametrize("impl", ["triton", "torch"])
def test_dpo_fused_op_equals_plain_path(models, impl, tmp_path):
    """The fused op (Triton in interpreter mode on CPU, or its torch twin) against the model's own
    full logits: fp32, 1e-5 per scored token. Short samples: the interpreter is slow."""
    m = models["tmpl"]
    data = tmp_path / "short.json"
    data.write_text(json.dumps([make_item(1, "chat"), make_item(2, "math"), make_item(3, "safety-refuse")]))
    kw = dict(model=m["policy"], ref_model=m["ref"], data=str(data), progress=False)
    plain = score(ScoreOptions(logprob_impl="plain", **kw))
    fused = score(ScoreOptions(logprob_impl=impl, **kw))
    assert fused.run["logprob_impl"] == impl
    seqs = encode_run(plain.samples, m["policy"], "dpo")
    n_tok = np.array([len(e.ids) - e.start for e in seqs]).reshape(-1, 3, 2)
    assert np.all(np.abs(fused.chosen - plain.chosen) <= 1e-5 * n_tok[:, :, 0])
    assert np.all(np.abs(fused.rejected - plain.rejected) <= 1e-5 * n_tok[:, :, 1])


def test_pad_ids_that_disagree_score_each_sequence_alone(tmp_path, data_path):
    """A tokenizer pad id other than the config's: the official flow pools at a pad position for
    every padded row (its score depends on the batch); rmbench-fast pads with the config's pad id,
    so each row scores as it would alone, at any batch size."""
    from reference import official_rm

    tok = train_tokenizer([s.prompt for s in load_dataset(data_path, limit=2)], vocab_size=300, pad=True)
    rm = build_model("rm", llama_config(len(tok), hidden=16, layers=1, heads=2, max_positions=8192,
                                        pad_token_id=tok.eos_token_id), 5)
    path = str(save_model(rm, tok, tmp_path / "rm"))
    runs = [score(ScoreOptions(model=path, data=data_path, limit=2, max_batch_size=b, progress=False, cache=False))
            for b in (1, 8)]
    alone = official_rm(path, runs[0].samples, False, batch_size=1)
    for run in runs:
        assert run.run["pad_ids"] == {"tokenizer": tok.pad_token_id, "config": tok.eos_token_id}
        np.testing.assert_allclose(run.chosen, alone[0], atol=1e-4, rtol=0)
        np.testing.assert_allclose(run.rejected, alone[1], atol=1e-4, rtol=0)

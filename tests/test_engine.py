"""The engine against a naive reference written the official way: fixed batches of 8 padded to the
longest, whole-model logits, full-vocabulary log_softmax + gather. Tiny random-weight models."""

import json

import numpy as np
import pytest
import torch
from conftest import make_item
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

from rmbench_fast.data import load_dataset
from rmbench_fast.engine import ScoreOptions, build_sequences, score
from rmbench_fast.errors import UsageError
from rmbench_fast.metrics import summarize
from rmbench_fast.templates import ChatFormat
from rmbench_fast.tiny import build_model, llama_config, save_model, train_tokenizer


def tulu(prompt, response=None):
    return f"<|user|>\n{prompt}\n" + ("" if response is None else f"<|assistant|>\n{response}\n")


def render(tok, prompt, response=None):
    if tok.chat_template is None:
        return tulu(prompt, response)
    msgs = [{"role": "user", "content": prompt}] + ([] if response is None else [{"role": "assistant", "content": response}])
    return tok.apply_chat_template(msgs, tokenize=False)


def official_rm(model_dir, samples, append_eos):
    """The official RM flow: per style, the chosen list then the rejected list, batches of 8."""
    tok = AutoTokenizer.from_pretrained(model_dir)
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    model = AutoModelForSequenceClassification.from_pretrained(model_dir).eval()
    if model.config.pad_token_id is None:
        model.config.pad_token_id = pad
    out = {"chosen": np.zeros((len(samples), 3)), "rejected": np.zeros((len(samples), 3))}
    for k in range(3):
        for side in ("chosen", "rejected"):
            texts = [render(tok, s.prompt, getattr(s, side)[k]) for s in samples]
            for b in range(0, len(texts), 8):
                enc = [tok(t)["input_ids"] + ([tok.eos_token_id] if append_eos else []) for t in texts[b:b + 8]]
                width = max(map(len, enc))
                ids = torch.tensor([e + [pad] * (width - len(e)) for e in enc])
                mask = torch.tensor([[1] * len(e) + [0] * (width - len(e)) for e in enc])
                with torch.no_grad():
                    logits = model(input_ids=ids, attention_mask=mask).logits[:, 0]
                out[side][b:b + len(enc), k] = logits.numpy()
    return out["chosen"], out["rejected"]


def official_dpo_row(tok, prompt_text, full_chosen, full_rejected, truncate):
    """tokenize_row in plain words: strip the prompt text, split where enc(prompt) ends (one back on
    a merge), BOS before, EOS after, the official truncation when asked."""
    bos = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
    p_ids = tok(prompt_text, add_special_tokens=False)["input_ids"]
    parts = []
    for full_text in (full_chosen, full_rejected):
        answer = full_text.replace(prompt_text, "")
        full = tok(prompt_text + answer, add_special_tokens=False)["input_ids"]
        cut = len(p_ids) if full[:len(p_ids)] == p_ids else len(p_ids) - 1
        parts.append([[bos] + full[:cut], full[cut:] + [tok.eos_token_id]])
    longest = max(len(a) for _, a in parts)
    seqs = []
    for prompt, answer in parts:
        if truncate and len(prompt) + longest > 2048:
            prompt = prompt[-128:]
        if truncate and len(prompt) + longest > 2048:
            answer = answer[:1920]
        seqs.append((prompt + answer, [-100] * len(prompt) + answer))
    return seqs


def official_dpo_logps(model, rows, eos):
    """Batch of rows padded with EOS (labels -100), whole-vocabulary log_softmax, gather, sums."""
    width = max(len(ids) for ids, _ in rows)
    ids = torch.tensor([r[0] + [eos] * (width - len(r[0])) for r in rows])
    labels = torch.tensor([r[1] + [-100] * (width - len(r[1])) for r in rows])
    mask = torch.tensor([[1] * len(r[0]) + [0] * (width - len(r[0])) for r in rows])
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits
    labels, logits = labels[:, 1:].clone(), logits[:, :-1]
    keep = labels != -100
    labels[~keep] = 0
    per_tok = torch.gather(logits.log_softmax(-1), 2, labels[:, :, None]).squeeze(2) * keep
    return per_tok.sum(-1).double().numpy(), keep.sum(-1).numpy(), per_tok.double().norm(dim=-1).numpy()


def official_dpo(policy_dir, ref_dir, samples, ref_free="avg", truncate=False):
    tok = AutoTokenizer.from_pretrained(policy_dir)
    models = [AutoModelForCausalLM.from_pretrained(d).eval() for d in [policy_dir] + ([ref_dir] if ref_dir else [])]
    chosen, rejected = np.zeros((len(samples), 3)), np.zeros((len(samples), 3))
    ntok_c, ntok_r = np.zeros((len(samples), 3)), np.zeros((len(samples), 3))
    for k in range(3):
        rows = [official_dpo_row(tok, render(tok, s.prompt), render(tok, s.prompt, s.chosen[k]),
                                 render(tok, s.prompt, s.rejected[k]), truncate) for s in samples]
        for b in range(0, len(rows), 8):
            batch = rows[b:b + 8]
            flat = [r[0] for r in batch] + [r[1] for r in batch]  # chosen rows, then rejected rows
            stats = [official_dpo_logps(m, flat, tok.eos_token_id) for m in models]
            total, count, norm = stats[0]
            if ref_dir:
                reward = total - stats[1][0]
            else:
                reward = {"sum": total, "avg": total / count, "norm": -norm}[ref_free]
            n = len(batch)
            chosen[b:b + n, k], rejected[b:b + n, k] = reward[:n], reward[n:]
            ntok_c[b:b + n, k], ntok_r[b:b + n, k] = count[:n], count[n:]
    return chosen, rejected, ntok_c, ntok_r


def assert_same_accuracy(samples, ours, ref):
    domains = [s.domain for s in samples]
    a = summarize(ours[0], ours[1], domains)
    b = summarize(ref[0], ref[1], domains)
    assert a == b


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
        seqs = build_sequences(samples, tok, ChatFormat(tok), "rm", False, models[kind]["rm"])
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
        tok = AutoTokenizer.from_pretrained(m["policy"])
        seqs = build_sequences(one.samples, tok, ChatFormat(tok), "dpo", False)
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
    tok = AutoTokenizer.from_pretrained(m["policy"])
    samples = load_dataset(long_data)
    seqs = build_sequences(samples, tok, ChatFormat(tok), "dpo", True)
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
    seqs = build_sequences(samples, tok, ChatFormat(tok), "rm", True, m["rm"])
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
    tok = AutoTokenizer.from_pretrained(m["policy"])
    seqs = build_sequences(plain.samples, tok, ChatFormat(tok), "dpo", False)
    n_tok = np.array([len(e.ids) - e.start for e in seqs]).reshape(-1, 3, 2)
    assert np.all(np.abs(fused.chosen - plain.chosen) <= 1e-5 * n_tok[:, :, 0])
    assert np.all(np.abs(fused.rejected - plain.rejected) <= 1e-5 * n_tok[:, :, 1])

"""The in-process transformers judge backend (judges.hf_backend) on a tiny random Llama: batched,
left-padded greedy generation against a per-request greedy loop of full forward passes; finish
reasons and token counts; seeded sampling; the missing-template error; out-of-memory halving."""

import pytest
import torch

from rmbench_fast.errors import UsageError
from rmbench_fast.judges.hf_backend import HFBackend, SeededSampler, split_reasoning
from rmbench_fast.judges.requests import Request, Sampling
from rmbench_fast.models.device import OUT_OF_MEMORY
from rmbench_fast.tiny.models import (CHAT_TEMPLATE, build_model, llama_config, save_model, save_tokenizer,
                                      train_tokenizer)

TEXTS = ["Which response is better, A or B? Answer with one letter.",
         "The quick brown fox jumps over the lazy dog. " * 3,
         "def add(a, b):\n    return a + b\n", "Paris is the capital of France; Berlin is in Germany.",
         "You are a careful judge. Compare the two answers and explain your verdict briefly.",
         "1 + 1 = 2, 2 + 2 = 4, 3 * 3 = 9", "<think>reasoning</think> Verdict: [[A]]"]
CONTENTS = ["Hi", "Which is better, A or B?", "The quick brown fox jumps over the lazy dog. " * 4,
            "def add(a, b): return a + b", "Paris or Berlin?", "x"]
MAX_NEW = 12


def req(i, content, **sampling):
    messages = ({"role": "user", "content": content},)
    if i == 3:  # one with a system message
        messages = ({"role": "system", "content": "Be brief."},) + messages
    return Request(key=f"r{i}", messages=messages, sampling=Sampling(**{"max_tokens": MAX_NEW, **sampling}))


def greedy_requests(**sampling):
    return [req(i, c, **sampling) for i, c in enumerate(CONTENTS)]


def run(backend, requests):
    got = {}

    def on_done(r, c):
        assert r.key not in got, f"{r.key} completed twice"
        got[r.key] = c
    backend.generate(requests, on_done)
    assert sorted(got) == sorted(r.key for r in requests)
    return got


def prompt_ids(tok, request):
    text = tok.apply_chat_template(list(request.messages), tokenize=False, add_generation_prompt=True)
    return tok(text, add_special_tokens=False)["input_ids"]


def greedy_reference(model, ids, max_new, eos):
    """Greedy decoding of one unpadded prompt, a full forward pass per token (no cache), up to
    one of the `eos` ids."""
    seq, out = list(ids), []
    with torch.no_grad():
        for _ in range(max_new):
            t = int(model(torch.tensor([seq])).logits[0, -1].argmax())
            out.append(t)
            seq.append(t)
            if t in eos:
                break
    return out


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    tok = train_tokenizer(TEXTS, vocab_size=300, chat_template=CHAT_TEMPLATE)
    # a wide initialisation: outputs that differ from prompt to prompt
    model = build_model("lm", llama_config(len(tok), hidden=32, layers=2, heads=4, initializer_range=0.3), seed=0)
    # a second EOS id in the generation config (as Llama 3's): the token the first prompt's greedy
    # run emits third, so that prompt stops there while others run to max_tokens
    stop = greedy_reference(model, prompt_ids(tok, greedy_requests()[0]), 3, [])[2]
    model.generation_config.eos_token_id = [tok.eos_token_id, stop]
    path = save_model(model, tok, tmp_path_factory.mktemp("judge") / "tiny-judge")
    b = HFBackend(str(path), device="cpu", max_batch_size=16)
    assert b.eos_ids == [tok.eos_token_id, stop]
    return b


REFERENCE = {}


def expected(b, r):
    """(text, finish_reason, prompt_tokens, completion_tokens) of the reference greedy run."""
    key = (id(b.model), repr(r.messages), r.sampling.max_tokens)
    if key not in REFERENCE:
        REFERENCE[key] = _expected(b, r)
    return REFERENCE[key]


def _expected(b, r):
    ids = prompt_ids(b.tokenizer, r)
    out = greedy_reference(b.model, ids, r.sampling.max_tokens, b.model.generation_config.eos_token_id)
    stopped = out[-1] in b.model.generation_config.eos_token_id
    text = b.tokenizer.decode(out[:-1] if stopped else out, skip_special_tokens=True)
    return text, "stop" if stopped else "length", len(ids), len(out)


def spy_generate(monkeypatch, model, fail_when=None):
    calls, original = [], model.generate

    def generate(**kw):
        calls.append(kw["attention_mask"].clone())
        if fail_when is not None and fail_when(kw["input_ids"]):
            raise OUT_OF_MEMORY("CUDA out of memory (injected)")
        return original(**kw)
    monkeypatch.setattr(model, "generate", generate)
    return calls


def test_batched_greedy_equals_per_request_reference(backend, monkeypatch):
    requests = greedy_requests()
    calls = spy_generate(monkeypatch, backend.model)
    got = run(backend, requests)
    # one batch of all six rows, longest prompt first, shorter ones left-padded
    assert len(calls) == 1 and calls[0].shape[0] == len(requests)
    lengths = [len(prompt_ids(backend.tokenizer, r)) for r in requests]
    assert len(set(lengths)) == len(lengths)
    assert calls[0].sum(1).tolist() == sorted(lengths, reverse=True)
    for row in calls[0].tolist():  # zeros, then ones
        assert row == sorted(row)
    finishes = []
    for r in requests:
        text, finish, n_prompt, n_out = expected(backend, r)
        c = got[r.key]
        assert (c.text, c.finish_reason, c.prompt_tokens, c.completion_tokens) == (text, finish, n_prompt, n_out), r.key
        assert c.error is None and c.reasoning is None
        finishes.append(finish)
    assert finishes == ["stop"] + ["length"] * (len(requests) - 1)
    assert [got[r.key].completion_tokens for r in requests] == [3] + [MAX_NEW] * (len(requests) - 1)
    assert len({got[r.key].text for r in requests}) == len(requests)
    assert backend.prompt(requests[0])[0] == "<|user|>\nHi</s>\n<|assistant|>\n"


def test_small_batches_budget_and_groups_give_the_same_completions(backend, monkeypatch):
    requests = greedy_requests()
    whole = run(backend, requests)
    budget = 2 * (max(len(prompt_ids(backend.tokenizer, r)) for r in requests) + MAX_NEW)
    calls = spy_generate(monkeypatch, backend.model)
    for max_batch_size, max_tokens in ((4, None), (4, budget)):
        calls.clear()
        small = HFBackend.from_loaded(backend.model, backend.tokenizer, "tiny", max_batch_size, max_tokens)
        assert run(small, requests) == whole
        sizes = [m.shape[0] for m in calls]
        if max_tokens is None:
            assert sizes == [4, 2]
        else:  # rows x (longest prompt + max_tokens) within the budget: 2 rows at first, more later
            assert sizes[0] == 2 and sum(sizes) == len(requests) and max(sizes) > 2
            assert all(m.shape[0] * (m.shape[1] + MAX_NEW) <= budget for m in calls)
    # different sampling settings never share a batch; a seed alone does not split greedy requests
    mixed = [req(i, c, max_tokens=5 if i % 2 else MAX_NEW, seed=i) for i, c in enumerate(CONTENTS)]
    calls.clear()
    got = run(backend, mixed)
    assert sorted(m.shape[0] for m in calls) == [3, 3]
    for r in mixed:
        text, finish, _, n_out = expected(backend, r)
        assert (got[r.key].text, got[r.key].finish_reason, got[r.key].completion_tokens) == (text, finish, n_out)


def test_the_models_generation_defaults_are_set_aside(backend):
    config = backend.model.generation_config
    config.repetition_penalty, config.top_k = 5.0, 1
    try:
        got = run(backend, greedy_requests())
    finally:
        config.repetition_penalty, config.top_k = 1.0, 50
    assert backend.model.generation_config is config
    for r in greedy_requests():
        assert got[r.key].text == expected(backend, r)[0]


def test_seeded_sampling_is_repeatable_whatever_the_batch(backend):
    sampled = [req(i, c, temperature=1.0, top_p=0.95, seed=100 + i) for i, c in enumerate(CONTENTS)]
    torch.manual_seed(0)
    before = torch.rand(3)
    first = run(backend, sampled)
    torch.manual_seed(0)
    second = run(backend, sampled)
    assert torch.equal(torch.rand(3), before)  # the global RNG is not used
    assert first == second
    alone = run(HFBackend.from_loaded(backend.model, backend.tokenizer, max_batch_size=1), sampled[2:4])
    assert alone == {k: first[k] for k in alone}
    greedy = run(backend, greedy_requests())
    assert any(first[k].text != greedy[k].text for k in first)
    reseeded = run(backend, [req(i, c, temperature=1.0, top_p=0.95, seed=7 + i) for i, c in enumerate(CONTENTS)])
    assert any(reseeded[k].text != first[k].text for k in first)
    # a nucleus of one token is greedy decoding, seed or no seed
    narrow = run(backend, [req(i, c, temperature=0.7, top_p=1e-9, seed=None) for i, c in enumerate(CONTENTS)])
    assert {k: (c.text, c.finish_reason, c.completion_tokens) for k, c in narrow.items()} == \
        {k: (c.text, c.finish_reason, c.completion_tokens) for k, c in greedy.items()}


def test_sampler_keeps_to_the_nucleus_and_its_proportions():
    n = 4000
    scores = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05])).repeat(n, 1)
    out = SeededSampler(list(range(n)), temperature=1.0, top_p=0.7)(None, scores)
    assert torch.isfinite(out).sum(1).tolist() == [1] * n
    picked = out.argmax(1)
    assert set(picked.tolist()) == {0, 1}  # 0.5 + 0.3 reaches 0.7: 2 and 3 are cut
    assert abs((picked == 0).float().mean().item() - 0.5 / 0.8) < 0.04
    again = SeededSampler(list(range(n)), temperature=1.0, top_p=0.7)(None, scores)
    assert torch.equal(again, out)
    # top_p 0 keeps the most probable token; a tiny temperature samples it too
    for temperature, top_p in ((1.0, 0.0), (1e-9, 1.0)):
        assert SeededSampler([1, 2], temperature, top_p)(None, scores[:2]).argmax(1).tolist() == [0, 0]


def test_a_tokenizer_without_chat_template_is_a_one_line_error(tmp_path, backend):
    tok = train_tokenizer(TEXTS, vocab_size=300)
    save_tokenizer(tok, tmp_path / "no-template")
    for make in (lambda: HFBackend(str(tmp_path / "no-template"), device="cpu"),
                 lambda: HFBackend.from_loaded(backend.model, tok, str(tmp_path / "no-template"))):
        with pytest.raises(UsageError) as e:
            make()
        msg = str(e.value)
        assert "\n" not in msg and str(tmp_path / "no-template") in msg
        assert "no chat template" in msg and "--chat-template" in msg
    # a template given in its place works
    given = HFBackend.from_loaded(backend.model, tok, "x", chat_template=CHAT_TEMPLATE)
    assert given.describe()["chat_template"].startswith("given:")


def test_out_of_memory_halves_the_batch_and_loses_nothing(backend, monkeypatch):
    requests = greedy_requests()
    whole = run(backend, requests)
    b = HFBackend.from_loaded(backend.model, backend.tokenizer, "tiny", max_batch_size=16)
    failed = []

    def once_for_a_batch(ids):
        if ids.shape[0] > 1 and not failed:
            failed.append(ids.shape[0])
            return True
        return False
    calls = spy_generate(monkeypatch, backend.model, once_for_a_batch)
    assert run(b, requests) == whole
    assert [m.shape[0] for m in calls] == [6, 3, 3]
    assert b.stats["out_of_memory_halvings"] == 1 and b.stats["batches"] == 2 and b.oom_cap is not None
    # later batches keep to half the padded tokens that failed
    calls.clear()
    assert run(b, requests) == whole
    assert all(m.shape[0] * (m.shape[1] + MAX_NEW) <= b.oom_cap for m in calls) and len(calls) >= 2


def test_a_single_request_out_of_memory_is_a_usage_error(backend, monkeypatch):
    spy_generate(monkeypatch, backend.model, lambda ids: True)
    done = []
    with pytest.raises(UsageError, match="out of memory generating request r1 alone"):
        HFBackend.from_loaded(backend.model, backend.tokenizer, "tiny").generate(greedy_requests()[:2],
                                                                                lambda r, c: done.append(r))
    assert done == []


def test_reasoning_split_and_describe(backend):
    assert split_reasoning("<think>weigh A and B</think>\nVerdict: [[A]]") == "weigh A and B"
    assert split_reasoning("  <think>cut off by max_tokens") == "cut off by max_tokens"
    assert split_reasoning("weigh</think> [[B]]", prompt_text="<|assistant|>\n<think>\n") == "weigh"
    assert split_reasoning("Verdict: [[A]] </think>") is None
    d = backend.describe()
    assert {k: d[k] for k in ("backend", "class", "dtype", "device", "chat_template")} == {
        "backend": "hf", "class": "LlamaForCausalLM", "dtype": "float32", "device": "cpu", "chat_template": "tokenizer"}
    assert d["path"].endswith("tiny-judge")

"""Logit verdicts (scorers.verdict): on tiny Llama (also with a biased LM head), Gemma-2 (final
soft-capping) and Granite (a logit divisor) judges, rendered
judge prompts of mixed lengths, batched with right padding, with and without shared-prefix caches
(rows of different prefix lengths side by side, prefixes reaching the last token but one), give the
probabilities of the plainest reference: each prompt alone through the model, its own last-position
logits, softmax over the two verdict tokens (fp32, 1e-5). A 2% logit scale the head cannot see is
caught by the self-check and the verdicts are then the model's own; verdict_probs is exact at
logits where a naive softmax overflows."""

import functools
from decimal import Decimal, localcontext

import numpy as np
import pytest
import torch

from rmbench_fast.errors import UsageError
from rmbench_fast.inputs.batching import Batch, make_batches
from rmbench_fast.inputs.prefix import PrefixKV, PrefixPlan, plan_prefixes
from rmbench_fast.inputs.tokenize import Encoded
from rmbench_fast.scorers.verdict import VerdictScorer, verdict_probs
from rmbench_fast.tiny.models import CHAT_TEMPLATE, llama_config, train_tokenizer

CPU = torch.device("cpu")
WORDS = ("the answer is correct because proof follows from lemma code returns list sorted safely refuses "
         "harmful request polite helpful explains step by step wrong off one error bound loop").split()
GROUP = 6  # prompts per shared preamble, as plan_prefixes groups them


@pytest.fixture(scope="module")
def tok():
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(WORDS, 40)) for _ in range(50)] + ["[[A]] [[B]] \\boxed{A} Assistant A B"]
    return train_tokenizer(texts, vocab_size=300, chat_template=CHAT_TEMPLATE)


def verdict_ids(tok):
    ids = [tok("A", add_special_tokens=False)["input_ids"], tok("B", add_special_tokens=False)["input_ids"]]
    assert all(len(i) == 1 for i in ids)
    return ids[0][0], ids[1][0]


def judge_prompts(tok, groups=4, seed=1) -> list[list[int]]:
    """`groups` x GROUP rendered judge prompts (generation prompt + forced "[["), of mixed lengths:
    each group shares its question, the answers differ. Two more groups: six copies of one prompt,
    and one prompt with six different last tokens (shared prefixes reaching the last token but one)."""
    rng = np.random.default_rng(seed)
    words = lambda lo, hi: " ".join(rng.choice(WORDS, int(rng.integers(lo, hi))))  # noqa: E731
    out = []
    for _ in range(groups):
        question = words(3, 30)
        for _ in range(GROUP):
            msg = f"Question: {question}\n[A] {words(1, 25)}\n[B] {words(1, 25)}\nWhich is better?"
            text = tok.apply_chat_template([{"role": "user", "content": msg}], tokenize=False,
                                           add_generation_prompt=True) + "[["
            out.append(list(tok(text)["input_ids"]))
    same = out[0]
    out += [list(same) for _ in range(GROUP)]
    out += [same[:-1] + [t] for t in range(10, 10 + GROUP)]
    return out


def scale_up(model):
    """Larger matrices: logits far from uniform, verdict probabilities spread over (0, 1)."""
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(4.0 if p.dim() == 2 else 1.0)
    return model.eval()


def tiny_llama(vocab, cls=None):
    from transformers import LlamaForCausalLM

    torch.manual_seed(3)
    return scale_up((cls or LlamaForCausalLM)(llama_config(vocab, hidden=32, layers=2, heads=4, max_positions=1024)))


def tiny_gemma2(vocab):
    from transformers import Gemma2Config, Gemma2ForCausalLM

    cfg = Gemma2Config(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=1024,
                       final_logit_softcapping=3.0, pad_token_id=1, bos_token_id=0, eos_token_id=1)
    torch.manual_seed(4)
    model = scale_up(Gemma2ForCausalLM(cfg))
    assert model.config.final_logit_softcapping == 3.0  # small: the cap bends these logits
    return model


def tiny_llama_bias(vocab):
    """A Llama judge whose LM head has a bias (as some fine-tuned heads do)."""
    model = tiny_llama(vocab)
    head = torch.nn.Linear(model.config.hidden_size, vocab, bias=True)
    with torch.no_grad():
        head.weight.copy_(model.lm_head.weight)
        head.bias.normal_(0.0, 1.0)
    model.lm_head = head
    return model.eval()


def tiny_granite(vocab):
    """Granite: logits divided by logits_scaling after the head (0.5: wider verdicts, not narrower)."""
    from transformers import GraniteConfig, GraniteForCausalLM

    cfg = GraniteConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                        logits_scaling=0.5, pad_token_id=1, bos_token_id=0, eos_token_id=1)
    torch.manual_seed(5)
    return scale_up(GraniteForCausalLM(cfg))


MODELS = {"llama": tiny_llama, "llama_bias": tiny_llama_bias, "gemma2": tiny_gemma2, "granite": tiny_granite}


def reference_probs(model, prompts, token_ids):
    """Each prompt alone, the model's own logits at its last position, softmax over the two tokens."""
    out = []
    with torch.no_grad():
        for ids in prompts:
            z = model(input_ids=torch.tensor([ids])).logits[0, -1].float()
            out.append(float(z[list(token_ids)].softmax(-1)[0]))
    return np.array(out)


def plain_batches(seqs, max_tokens=1200):
    """Batches that mix lengths (padding up to 100%), so right padding is exercised."""
    batches = make_batches([len(e.ids) for e in seqs], max_tokens, max_padding=1.0)
    assert any(len({len(seqs[i].ids) for i in b.indices}) > 1 for b in batches)
    return batches


def prefix_setup(model, scorer, seqs, max_tokens=1200):
    """A PrefixKV whose rows share none, 3 tokens or all the common prefix, in two waves, and
    batches of suffixes that mix those rows."""
    ids = [e.ids for e in seqs]
    limits = np.array([scorer.readout_limit(e) for e in seqs])
    plan = plan_prefixes(ids, limits, kv_bytes_per_token=1, budget_bytes=10**9, group_size=GROUP)
    full = plan.prefix
    assert (full > 0).all() and (full <= limits).all() and (full == limits).any()  # suffix of 1 token
    groups = len(ids) // GROUP
    # groups 1 and 2 share nothing and 3 tokens; the others (the last two among them) all they can
    mixed = np.minimum(np.repeat([{1: 0, 2: 3}.get(g, 10**6) for g in range(groups)], GROUP), full)
    assert (mixed == limits).any()
    plan = PrefixPlan(mixed, plan.group, np.repeat(np.arange(groups) % 2, GROUP))
    suffix = np.array([len(s) for s in ids]) - plan.prefix
    batches = []
    for w in (0, 1):
        idx = np.flatnonzero(plan.wave == w)
        batches += [Batch(idx[b.indices], b.max_len) for b in make_batches(suffix[idx], max_tokens, max_padding=1.0)]
    assert any(len(set(plan.prefix[b.indices])) > 1 for b in batches)
    return PrefixKV(model, ids, plan, np.arange(len(ids)), scorer.pad_id, CPU, max_tokens), batches


def score(run, seqs, batches, prefix=None):
    out = np.full((len(seqs), 2), np.nan)
    for b in batches:
        z = run(seqs, b, prefix)["verdict_logits"]
        assert z.dtype == np.float64 and z.shape == (len(b.indices), 2)
        out[b.indices] = z
    assert not np.isnan(out).any()
    return out


@pytest.mark.parametrize("shared", ["plain", "prefix"])
@pytest.mark.parametrize("arch", sorted(MODELS))
def test_verdicts_equal_each_prompt_alone(tok, arch, shared):
    model = MODELS[arch](len(tok))
    token_ids = verdict_ids(tok)
    prompts = judge_prompts(tok)
    seqs = [Encoded(p) for p in prompts]
    scorer = VerdictScorer(tok.eos_token_id, token_ids)
    run = scorer.batch_fn(model, CPU)
    kv, batches = prefix_setup(model, scorer, seqs) if shared == "prefix" else (None, plain_batches(seqs))
    logits = score(run, seqs, batches, kv)
    assert run.info["logprob_head"] == "fused", run.info  # the two head rows, not the model's own logits
    if kv is not None:
        assert kv.note == "on"
    ref = reference_probs(model, prompts, token_ids)
    assert np.ptp(ref) > 0.15  # verdicts that differ between prompts: a wrong row or position would show
    np.testing.assert_allclose(verdict_probs(logits), ref, atol=1e-5, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_an_unknown_two_percent_logit_scale_is_caught(tok, dtype):
    """A judge whose forward scales its logits by 1.02 where the head cannot see it: the self-check
    refuses the two head rows and the verdicts are the model's own (plain and shared-prefix
    batches); the same weights without the scale keep the two rows in both dtypes."""
    from transformers import LlamaForCausalLM

    class Scaled(LlamaForCausalLM):
        @functools.wraps(LlamaForCausalLM.forward)  # its signature: the KV cache keyword of this version
        def forward(self, *args, **kwargs):
            out = super().forward(*args, **kwargs)
            out.logits = out.logits * 1.02
            return out

    token_ids = verdict_ids(tok)
    prompts = judge_prompts(tok, groups=3, seed=2)
    seqs = [Encoded(p) for p in prompts]
    scorer = VerdictScorer(tok.eos_token_id, token_ids)
    model = tiny_llama(len(tok), Scaled).to(dtype)
    ref = reference_probs(model, prompts, token_ids)
    tol = 1e-5 if dtype == torch.float32 else 2e-2  # bf16: batched and alone round differently
    for shared in ("plain", "prefix"):
        run = scorer.batch_fn(model, CPU)
        kv, batches = prefix_setup(model, scorer, seqs) if shared == "prefix" else (None, plain_batches(seqs))
        probs = verdict_probs(score(run, seqs, batches, kv))
        assert run.info["logprob_head"].startswith("model logits: the LM head's logits differ"), run.info
        np.testing.assert_allclose(probs, ref, atol=tol, rtol=0)
    plain = LlamaForCausalLM(model.config).eval()
    plain.load_state_dict(model.state_dict())
    run = scorer.batch_fn(plain.to(dtype), CPU)
    probs = verdict_probs(score(run, seqs, plain_batches(seqs)))
    assert run.info["logprob_head"] == "fused", run.info
    np.testing.assert_allclose(probs, reference_probs(plain, prompts, token_ids), atol=tol, rtol=0)


def exact_prob_a(a: float, b: float) -> float:
    """1 / (1 + e^(b - a)) in 60-digit decimals, rounded once to float64."""
    with localcontext() as ctx:
        ctx.prec = 60
        return float(1 / (1 + (Decimal(b) - Decimal(a)).exp()))


def test_verdict_probs_exact_at_large_logits():
    pairs = [(1000.0, 999.0), (999.0, 1000.0), (-1000.0, -1001.5), (1e4, 0.0), (0.0, 1e4), (5.0, 5.0),
             (800.0, -800.0), (-800.0, 800.0), (3e38, 3e38 - 2**102), (0.3, -0.2), (-745.0, 0.0), (0.0, 36.5)]
    z = np.array(pairs)
    with np.errstate(over="raise", invalid="raise"):  # no overflow, not even an intermediate one
        p = verdict_probs(z)
    assert p.dtype == np.float64 and p.shape == (len(pairs),)
    expected = np.array([exact_prob_a(a, b) for a, b in pairs])
    np.testing.assert_allclose(p, expected, rtol=4e-16, atol=0)
    assert p[3] == 1.0 and p[4] == 0.0 and p[5] == 0.5 and 0 < p[10] < 1e-323
    np.testing.assert_allclose(p + verdict_probs(z[:, ::-1]), 1.0, rtol=0, atol=2e-16)
    assert verdict_probs(z.reshape(3, 4, 2)).shape == (3, 4)
    assert np.isnan(verdict_probs(np.array([np.nan, 1.0])))
    with pytest.raises(ValueError):
        verdict_probs(np.zeros((4, 3)))


def test_the_scorer_interface(tok):
    token_ids = verdict_ids(tok)
    s = VerdictScorer(tok.eos_token_id, token_ids)
    assert (s.family, s.mode, s.outputs) == ("judge-logits", "dpo", {"verdict_logits": (2,)})
    z = np.arange(6.0).reshape(3, 2)
    assert s.rewards({"model": {"verdict_logits": z}}) is z
    assert s.readout_limit(Encoded([5, 6, 7, 8])) == 3 and s.readout_limit(Encoded([5])) == 0
    assert token_ids in [x for x in s.pass_key() if isinstance(x, tuple)]
    other = VerdictScorer(tok.eos_token_id, token_ids[::-1])
    assert other.pass_key() != s.pass_key()
    s8 = VerdictScorer(tok.eos_token_id, token_ids)
    s8.int8 = True
    assert s8.pass_key() != s.pass_key()
    assert s.describe()["scorer"] == "judge-logits" and s.describe()["verdict_token_ids"] == list(token_ids)
    with pytest.raises(NotImplementedError):
        s.encode([], tok, None, False)
    with pytest.raises(UsageError):
        VerdictScorer(0, (5, 5))
    model = tiny_llama(len(tok))
    with pytest.raises(UsageError, match="rows"):
        VerdictScorer(0, (3, len(tok) + 7)).batch_fn(model, CPU)

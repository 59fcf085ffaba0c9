"""Shared-prompt prefixes (--share-prefix): scores against the naive official reference, the plan's
limits and waves, rows of different prefix lengths in one batch, and the self-check."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import encode_run
from reference import assert_same_accuracy, official_dpo, official_rm
from transformers import AutoModelForCausalLM, AutoTokenizer

import rmbench_fast.inputs.prefix as prefix_mod
from rmbench_fast.inputs import prefix_attention
from rmbench_fast.engine import prepare as prepare_mod
from rmbench_fast.inputs.data import load_dataset
from rmbench_fast.engine.score import ScoreOptions, score
from rmbench_fast.inputs.prefix import PrefixKV, PrefixPlan, plan_prefixes
from rmbench_fast.scorers import DPOScorer, RewardModelScorer
from rmbench_fast.scorers.dpo import batch_logprob_stats, lm_head_of
from rmbench_fast.inputs.tokenize import Encoded


def readout_limits(ids, starts, kind, pad):
    scorer = RewardModelScorer(pad, 0) if kind == "rm" else DPOScorer(pad, "torch", "avg")
    return np.array([scorer.readout_limit(Encoded(s, st)) for s, st in zip(ids, starts)])


@pytest.fixture
def tiny_waves(monkeypatch):
    """A prefix-cache budget of a few hundred bytes: every prompt is a wave of its own."""
    monkeypatch.setattr(prepare_mod, "default_budget_bytes", lambda device, mb: 300)


@pytest.mark.parametrize("waves", ["one", "many"])
def test_rm_shared_matches_official(models, data_path, waves, request):
    if waves == "many":
        request.getfixturevalue("tiny_waves")
    m = models["llama"]["rm"]
    run = score(ScoreOptions(model=m, data=data_path, limit=3, share_prefix=True, progress=False))
    assert run.run["shared_prefix"]["tokens_saved"] > 0
    assert run.run["padded_tokens"] < run.run["real_tokens"]
    assert run.run["models"]["model"]["prefix_sharing"] == "on"
    ref = official_rm(m, run.samples, True)
    np.testing.assert_allclose(run.chosen, ref[0], atol=1e-4, rtol=0)
    np.testing.assert_allclose(run.rejected, ref[1], atol=1e-4, rtol=0)
    assert_same_accuracy(run.samples, (run.chosen, run.rejected), ref)


def test_doubled_bos_shares_nothing(models, data_path):
    """A sequence whose first BOS is masked (the official treatment of a doubled BOS) shares no
    prefix: its cache would have been computed with the BOS attended."""
    m = models["tmpl"]["rm"]
    run = score(ScoreOptions(model=m, data=data_path, limit=2, share_prefix=True, progress=False))
    assert run.run["double_bos_sequences"] == run.run["n_sequences"]
    assert run.run["shared_prefix"] == {"prompts": 0, "tokens_saved": 0}
    ref = official_rm(m, run.samples, False)
    np.testing.assert_allclose(run.chosen, ref[0], atol=1e-4, rtol=0)


@pytest.mark.parametrize("ref_free", [None, "norm"])
def test_dpo_shared_matches_official(models, data_path, ref_free, tiny_waves):
    m = models["llama"]
    ref_model = m["ref"] if ref_free is None else None
    run = score(ScoreOptions(model=m["policy"], ref_model=ref_model, ref_free=ref_free, data=data_path, limit=3,
                             share_prefix=True, cache=False, progress=False))
    assert run.run["shared_prefix"]["prompts"] == len(run.samples)
    assert all(p["prefix_sharing"] == "on" for p in run.run["models"].values())
    chosen, rejected, n_c, n_r = official_dpo(m["policy"], ref_model, run.samples, ref_free or "avg")
    tol = 1e-5 if ref_free else 1e-5 * np.maximum(n_c, n_r) + 1e-6
    assert np.all(np.abs(run.chosen - chosen) <= tol)
    assert np.all(np.abs(run.rejected - rejected) <= tol)


def _dpo_setup(models, data_path, limit=3):
    m = models["tmpl"]["policy"]
    tok = AutoTokenizer.from_pretrained(m)
    samples = load_dataset(data_path, limit=limit)
    seqs = encode_run(samples, m, "dpo")
    model = AutoModelForCausalLM.from_pretrained(m).eval()
    return model, seqs, [e.ids for e in seqs], [e.start for e in seqs], tok.eos_token_id


def _plain_stats(model, ids, starts, pad):
    """Each sequence alone, whole logits, log_softmax, gather: the plainest possible reference."""
    out = []
    with torch.no_grad():
        for s, st in zip(ids, starts):
            logp = model(input_ids=torch.tensor([s])).logits[0, :-1].log_softmax(-1)
            out.append(logp[torch.arange(st - 1, len(s) - 1), torch.tensor(s[st:])].double().sum().item())
    return np.array(out)


@pytest.mark.parametrize("limit, prefix_batch_tokens", [(3, 4000), (6, 16)])
def test_rows_of_different_prefixes_in_one_batch(models, data_path, limit, prefix_batch_tokens):
    """Prefix lengths 0, short and full side by side in the same batches, across waves, a wave's
    prefixes computed in one batch or in several: each sequence's log-probs equal its plain
    whole-sequence ones."""
    model, seqs, ids, starts, eos = _dpo_setup(models, data_path, limit)
    limits = readout_limits(ids, starts, "dpo", eos)
    plan = plan_prefixes(ids, limits, kv_bytes_per_token=1, budget_bytes=10**9)
    full = plan.prefix.copy()
    assert (full > 0).all() and (full <= np.array(starts) - 1).all()
    # any prefix up to the common one is valid: mix none, a few tokens and all of it, 2 waves
    groups = len(full) // 6
    mixed = np.minimum(np.repeat([[0, 3, 10**6][g % 3] for g in range(groups)], 6), full)
    plan = PrefixPlan(mixed, plan.group, np.repeat(np.arange(groups) % 2, 6))
    lengths = np.array([len(s) for s in ids])
    batches = prefix_mod.plan_batches(lengths, plan, max_tokens=4000, max_batch_size=None)
    assert any(len(set(plan.prefix[b.indices])) > 1 for b in batches)
    n = len(ids)
    total = np.zeros(n)
    kv = PrefixKV(model, ids, plan, np.arange(n), eos, torch.device("cpu"), prefix_batch_tokens)
    for b in batches:
        total[b.indices] = batch_logprob_stats(model, seqs, b, eos, torch.device("cpu"), "torch", lm_head_of(model),
                                               prefix=kv)["total"]
    assert kv.note == "on"
    np.testing.assert_allclose(total, _plain_stats(model, ids, starts, eos), atol=1e-4, rtol=0)


def test_plan_limits_and_waves():
    pad = 0
    # 2 groups of 6: group 0 shares 5 tokens, group 1 shares 12 but one sequence ends in pad tokens
    g0 = [[1, 2, 3, 4, 5, 10 + k, 7, 8] for k in range(6)]
    g1 = [list(range(20, 32)) + [40 + k, 9] for k in range(6)]
    g1[3] = list(range(20, 32)) + [pad, pad]  # pooled at its last non-pad token, position 11
    ids = g0 + g1
    rm = readout_limits(ids, [0] * 12, "rm", pad)
    assert rm[0] == 7 and rm[9] == 11
    plan = plan_prefixes(ids, rm, kv_bytes_per_token=1, budget_bytes=100, min_prefix=1)
    assert list(plan.prefix) == [5] * 6 + [11] * 6  # group 1 capped by the pooled position of g1[3]
    dpo = readout_limits(ids, [3] * 6 + [13] * 6, "dpo", pad)
    plan = plan_prefixes(ids, dpo, kv_bytes_per_token=1, budget_bytes=100, min_prefix=1)
    assert list(plan.prefix) == [2] * 6 + [12] * 6
    assert plan.shared_tokens() == 14 and plan.saved_tokens() == 5 * 14
    # min_prefix drops short ones; a budget of 10 tokens puts the two prompts in different waves
    plan = plan_prefixes(ids, dpo, kv_bytes_per_token=1, budget_bytes=10, min_prefix=3)
    assert list(plan.prefix) == [0] * 6 + [12] * 6
    plan = plan_prefixes(ids, rm, kv_bytes_per_token=1, budget_bytes=10, min_prefix=1)
    assert list(plan.wave) == [0] * 6 + [1] * 6
    batches = prefix_mod.plan_batches(np.array([len(s) for s in ids]), plan, 10**6, None)
    assert [set(plan.wave[b.indices]) for b in batches] == [{0}, {1}]
    assert sorted(np.concatenate([b.indices for b in batches])) == list(range(12))


@pytest.mark.parametrize("path", ["masked cache", "split"])
def test_self_check_turns_sharing_off(models, data_path, monkeypatch, caplog, path, request):
    """A model for which shared and plain states differ (here: a broken cache, or a broken split
    attention) is scored without sharing, with a warning and the reason in run.json."""
    def broken(kvs):
        from transformers import DynamicCache

        cache = DynamicCache()
        for layer, (k, v) in enumerate(kvs):
            cache.update(k + 1.0, v, layer)
        return cache

    if path == "masked cache":  # transformers' model: the native one takes no cache
        request.getfixturevalue("no_native")
        monkeypatch.setattr(prefix_mod, "_new_cache", broken)
        monkeypatch.setattr(prefix_mod, "applies", lambda *a: False)
    else:
        from transformers import AutoModelForSequenceClassification

        rm = AutoModelForSequenceClassification.from_pretrained(models["llama"]["rm"])
        if not prefix_attention.applies(rm, rm, "cpu"):
            pytest.skip("this transformers' sequence classifier takes no extra arguments: its suffix batches "
                        "use the masked cache (the other case)")
        split = prefix_attention.split_attention
        monkeypatch.setattr(prefix_attention, "split_attention", lambda *a, **k: split(*a, **k) + 1.0)
    m = models["llama"]["rm"]
    run = score(ScoreOptions(model=m, data=data_path, limit=2, share_prefix=True, cache=False, progress=False))
    assert run.run["models"]["model"]["prefix_sharing"].startswith("off: shared and plain states differ")
    assert run.run["models"]["model"]["prefix_attention"] == "none"  # nothing attended to a shared prefix
    ref = official_rm(m, run.samples, True)
    np.testing.assert_allclose(run.chosen, ref[0], atol=1e-4, rtol=0)
    np.testing.assert_allclose(run.rejected, ref[1], atol=1e-4, rtol=0)


def test_rm_off_by_default(models, data_path):
    """A reward model keeps its read-out (the last layer at one position) by default: no sharing."""
    run = score(ScoreOptions(model=models["tmpl"]["rm"], data=data_path, limit=2, progress=False))
    assert run.run["shared_prefix"] == {"prompts": 0, "tokens_saved": 0}
    assert "prefix_sharing" not in run.run["models"]["model"]
    assert run.run["padded_tokens"] >= run.run["real_tokens"]


def test_dpo_on_by_default_on_cpu(models, data_path):
    """DPO on the CPU shares prefixes unless told not to, and scores what the unshared run scores
    (up to the order of the attention's sums); --no-share-prefix and --compat official do not share."""
    m = models["llama"]
    common = dict(model=m["policy"], ref_model=m["ref"], data=data_path, limit=2, cache=False, progress=False)
    shared = score(ScoreOptions(**common))
    assert shared.run["shared_prefix"]["prompts"] == len(shared.samples)
    assert all(p["prefix_sharing"] == "on" for p in shared.run["models"].values())
    plain = score(ScoreOptions(**common, share_prefix=False))
    assert plain.run["shared_prefix"] == {"prompts": 0, "tokens_saved": 0}
    assert all("prefix_sharing" not in p for p in plain.run["models"].values())
    np.testing.assert_allclose(shared.chosen, plain.chosen, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(shared.rejected, plain.rejected, rtol=1e-5, atol=1e-5)
    compat = score(ScoreOptions(**common, compat="official"))
    assert compat.run["shared_prefix"] == {"prompts": 0, "tokens_saved": 0}


def test_wave_tokens_is_the_largest_wave_kept():
    """What the pre-flight counts for a shared pass's prefix store: the largest wave's prefix tokens
    (each prompt's once) plus the zero row, not the whole budget."""
    seqs = [[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, i] for i in range(6)] + [[5] * 20 + [i] for i in range(6)] \
        + [[7] * 15 + [i] for i in range(6)]
    plan = plan_prefixes(seqs, np.full(18, 100), kv_bytes_per_token=1, budget_bytes=40)
    naive = {}
    for g in range(3):
        w = int(plan.wave[6 * g])
        naive[w] = naive.get(w, 0) + int(plan.prefix[6 * g])
    assert list(plan.prefix[::6]) == [11, 20, 15] and len(naive) == 2  # 11 + 20 fit 40 tokens; 15 more do not
    assert plan.wave_tokens() == max(naive.values()) + 1 == 32


LLAMA = SimpleNamespace(model_type="llama")


@pytest.mark.parametrize("given, mode, device, compat, extra, config, want", [
    (None, "dpo", "cpu", False, {}, LLAMA, True),
    (None, "dpo", "cpu", False, {}, SimpleNamespace(model_type="qwen2", sliding_window=64, use_sliding_window=False),
     True),  # Qwen2 with its window switched off
    (None, "rm", "cpu", False, {}, LLAMA, False),  # the read-out saves more
    (None, "dpo", "cuda", False, {}, LLAMA, False),  # unmeasured on GPUs
    (None, "dpo", "cpu", True, {}, LLAMA, False),  # --compat official scores unshared
    (None, "dpo", "cpu", False, {"tp": 2}, LLAMA, False),  # --tp: prefixes are not kept across ranks
    (None, "dpo", "cpu", False, {"device_map": "auto"}, LLAMA, False),  # --device-map: no one cache device
    (None, "dpo", "cpu", False, {"engine": "ray"}, LLAMA, False),  # Ray's units: other prefix batches
    (None, "dpo", "cpu", False, {}, SimpleNamespace(model_type="gpt2"), False),  # the masked cache: unmeasured
    (None, "dpo", "cpu", False, {}, SimpleNamespace(model_type="mistral", sliding_window=4096), False),
    (None, "dpo", "cpu", False, {}, SimpleNamespace(model_type="llama", auto_map={"AutoModel": "x.Y"}), False),
    (True, "rm", "cuda", True, {}, SimpleNamespace(model_type="gpt2"), True),  # given: as given
    (False, "dpo", "cpu", False, {}, LLAMA, False),
])
def test_share_prefix_default(given, mode, device, compat, extra, config, want):
    o = ScoreOptions(model="m", share_prefix=given, **extra)
    assert prepare_mod.shares_prefix(o, mode, torch.device(device), compat, config) is want


def test_doubled_bos_rows_beside_shared_prefix_rows(models, data_path):
    """A batch mixing rows that start with a doubled BOS (first token masked, no prefix) and rows
    on a shared prefix cache: each row scores as it does alone (the official masking, plain forward)."""
    from transformers import AutoModelForSequenceClassification

    m = models["tmpl"]["rm"]
    tok = AutoTokenizer.from_pretrained(m)
    seqs = encode_run(load_dataset(data_path, limit=2), m, "rm")
    # every second prompt's sequences lose their first BOS: single BOS, so they may share a prefix
    seqs = [Encoded(e.ids[1:]) if (i // 6) % 2 else e for i, e in enumerate(seqs)]
    model = AutoModelForSequenceClassification.from_pretrained(m).eval()
    scorer = RewardModelScorer(tok.eos_token_id, 0, 1, tok.bos_token_id, tok.eos_token_id)
    model.config.pad_token_id = scorer.pad_id
    ids = [e.ids for e in seqs]
    limits = np.array([scorer.readout_limit(e) for e in seqs])
    plan = plan_prefixes(ids, limits, kv_bytes_per_token=1, budget_bytes=10**9)
    assert (plan.prefix[:6] == 0).all() and (plan.prefix[6:12] > 0).all()  # doubled-BOS prompt: nothing shared
    batches = prefix_mod.plan_batches(np.array([len(s) for s in ids]), plan, max_tokens=10**6, max_batch_size=None)
    assert any(plan.prefix[b.indices].min() == 0 < plan.prefix[b.indices].max() for b in batches)
    kv = PrefixKV(model, ids, plan, np.arange(len(ids)), scorer.pad_id, torch.device("cpu"), 10**6)
    run = scorer.batch_fn(model, torch.device("cpu"))
    scores = np.zeros(len(ids))
    for b in batches:
        scores[b.indices] = run(seqs, b, kv)["scores"]
    assert kv.note == "on"
    alone = []
    with torch.no_grad():
        for e in seqs:
            mask = torch.ones(1, len(e.ids), dtype=torch.long)
            mask[0, 0] = 0 if scorer.double_bos(e.ids) else 1
            alone.append(model(input_ids=torch.tensor([e.ids]), attention_mask=mask).logits[0, 0].item())
    np.testing.assert_allclose(scores, alone, atol=1e-4, rtol=0)

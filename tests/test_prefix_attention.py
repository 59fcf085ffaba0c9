"""The split attention of suffixes on shared prefixes (inputs.prefix_attention) against attention
written out plainly in fp64, and the shared DPO run that uses it against the unshared run."""

import numpy as np
import pytest
import torch

from rmbench_fast.engine.score import ScoreOptions, score
from rmbench_fast.inputs import prefix_attention
from rmbench_fast.inputs.prefix_attention import SplitPrefix, split_attention


def naive(q, k, v, scale):
    """softmax(q k^T * scale + causal mask) v for one row and head, in fp64: q [L, D], k/v [P + L, D]
    (the prefix first); query i sees the prefix and suffix positions up to i."""
    q, k, v = q.double(), k.double(), v.double()
    p = k.shape[0] - q.shape[0]
    s = q @ k.T * scale
    allowed = torch.arange(k.shape[0])[None, :] <= p + torch.arange(q.shape[0])[:, None]
    s = s.masked_fill(~allowed, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


@pytest.mark.parametrize("heads, kv_heads", [(4, 4), (4, 2)])
def test_split_attention_is_attention_on_prefix_and_suffix(heads, kv_heads):
    torch.manual_seed(0)
    b, length, d = 3, 7, 16
    lengths = [5, 0, 9]  # row 1 has no prefix
    starts = [0, 5, 5]
    flat_k = torch.randn(15, kv_heads, d)  # the prefixes' keys one after another, as PrefixKV keeps them
    flat_v = torch.randn(15, kv_heads, d)
    q = torch.randn(b, heads, length, d)
    k = torch.randn(b, kv_heads, length, d)
    v = torch.randn(b, kv_heads, length, d)
    split = SplitPrefix([(torch.zeros(1), torch.zeros(1)), (flat_k, flat_v)], list(zip(starts, lengths)))
    out = split_attention(q.clone(), k, v, split, layer=1, scale=0.3)
    n = heads // kv_heads
    for r in range(b):
        pk = flat_k[starts[r]:starts[r] + lengths[r]]
        pv = flat_v[starts[r]:starts[r] + lengths[r]]
        for h in range(heads):
            keys = torch.cat([pk[:, h // n], k[r, h // n]])
            values = torch.cat([pv[:, h // n], v[r, h // n]])
            want = naive(q[r, h], keys, values, 0.3)
            assert float((out[r, h].double() - want).abs().max()) < 1e-5


def test_split_attention_in_bfloat16_is_within_its_rounding():
    """A bf16 DPO run shares prefixes on the CPU too: there the suffix's own attention is rounded to
    bf16 before the merge, and the merge's result again. Against fp64, that stays within the error
    of one bf16 SDPA over prefix and suffix at once (what the unshared forward computes), give or
    take one bf16 step of the output."""
    import torch.nn.functional as F

    torch.manual_seed(2)
    b, heads, length, d, lengths = 2, 4, 24, 32, [40, 17]
    starts = [0, 40]
    flat_k, flat_v = (torch.randn(57, heads, d) for _ in range(2))
    q, k, v = (torch.randn(b, heads, length, d) for _ in range(3))
    split = SplitPrefix([(flat_k.bfloat16(), flat_v.bfloat16())], list(zip(starts, lengths)))
    out = split_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), split, layer=0, scale=d ** -0.5)
    assert out.dtype == torch.bfloat16
    for r in range(b):
        keys = torch.cat([flat_k[starts[r]:starts[r] + lengths[r]].transpose(0, 1), k[r]], dim=1)  # [heads, P + L, d]
        values = torch.cat([flat_v[starts[r]:starts[r] + lengths[r]].transpose(0, 1), v[r]], dim=1)
        # the bf16-rounded inputs both paths see, in fp64
        q64, k64, v64 = (x.bfloat16().double() for x in (q[r], keys, values))
        want = torch.stack([naive(q64[h], k64[h], v64[h], d ** -0.5) for h in range(heads)])
        allowed = torch.arange(keys.shape[1])[None, :] <= lengths[r] + torch.arange(length)[:, None]
        whole = F.scaled_dot_product_attention(q[r:r + 1].bfloat16(), keys[None].bfloat16(), values[None].bfloat16(),
                                               attn_mask=allowed, scale=d ** -0.5)[0]
        err_split = float((out[r].double() - want).abs().max())
        err_whole = float((whole.double() - want).abs().max())
        step = float(want.abs().max()) * 2.0 ** -8  # one bf16 step at the output's largest magnitude
        assert err_split <= err_whole + step, (err_split, err_whole, step)


def test_registered_attention_without_a_split_is_sdpa():
    """Outside a split forward the registered implementation is causal SDPA, as transformers' own."""
    import torch.nn.functional as F

    torch.manual_seed(1)

    class Module(torch.nn.Module):
        is_causal = True
        layer_idx = 0

    q, k, v = (torch.randn(2, 4, 6, 8) for _ in range(3))
    ours, _ = prefix_attention.attention(Module(), q, k, v, None, scaling=0.25)
    plain = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.25).transpose(1, 2)
    assert torch.equal(ours, plain)


def test_shared_dpo_run_uses_the_split_attention(models, data_path):
    """A shared DPO run on a Llama pair attends through the split attention and scores what the
    unshared run scores."""
    m = models["llama"]
    common = dict(model=m["policy"], ref_model=m["ref"], data=data_path, limit=3, cache=False, progress=False)
    shared = score(ScoreOptions(**common, share_prefix=True))
    plain = score(ScoreOptions(**common, share_prefix=False))
    assert all(p["prefix_sharing"] == "on" and p["prefix_attention"] == "split" for p in shared.run["models"].values())
    assert shared.run["shared_prefix"]["tokens_saved"] > 0
    # sums of a few hundred token log-probs: the same up to the order of fp32 sums
    np.testing.assert_allclose(shared.chosen, plain.chosen, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(shared.rejected, plain.rejected, rtol=1e-5, atol=1e-5)


def test_not_for_other_devices_or_attention(models):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(models["llama"]["policy"], attn_implementation="sdpa").eval()
    assert prefix_attention.applies(model, model.model, "cpu")
    assert not prefix_attention.applies(model, model.model, "cuda")
    eager = AutoModelForCausalLM.from_pretrained(models["llama"]["policy"], attn_implementation="eager").eval()
    assert not prefix_attention.applies(eager, eager.model, "cpu")
    model.config.sliding_window = 16
    assert not prefix_attention.applies(model, model.model, "cpu")


def test_switched_puts_the_implementation_back(models):
    """The split implementation is the model's only inside the block, an error in it included."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(models["llama"]["policy"], attn_implementation="sdpa").eval()
    with prefix_attention.switched(model.model):
        assert model.config._attn_implementation == prefix_attention.NAME
    assert model.config._attn_implementation == "sdpa"
    with pytest.raises(RuntimeError):
        with prefix_attention.switched(model.model):
            raise RuntimeError("a failing forward")
    assert model.config._attn_implementation == "sdpa"


def test_ray_units_report_every_way_they_attended():
    """A pass on Ray merges its units' notes: prefix_attention names every way any unit took."""
    from rmbench_fast.engine.scaleout.distributed import _merge

    notes = {}
    for note in ({"prefix_attention": "split"}, {"prefix_attention": "none"}, {"prefix_attention": "masked cache"},
                 {"prefix_attention": "split"}):
        _merge(notes, note)
    assert notes["prefix_attention"] == "masked cache and split"
    notes = {}
    for note in ({"prefix_attention": "none"}, {"prefix_attention": "split"}):
        _merge(notes, note)
    assert notes["prefix_attention"] == "split"

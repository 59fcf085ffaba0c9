"""The reward model's last layer at its read-out positions only (scorers.readout) against the model's
own whole forward: every layer but the last bit for bit, the read-out logits within fp32 rounding, for
each architecture it restates, and the models it must leave to their own forward."""

import numpy as np
import pytest
import torch

from rmbench_fast.scorers.readout import readout_fn, readout_positions

PAD = 3


def _config(arch: str, **extra):
    import transformers

    kw = dict(vocab_size=97, hidden_size=64, num_hidden_layers=3, num_attention_heads=4, intermediate_size=96,
              max_position_embeddings=512, num_labels=2, pad_token_id=PAD, attn_implementation="sdpa",
              num_key_value_heads=extra.pop("kv", 2 if arch == "qwen2" else 4))
    if arch == "mistral":
        kw["sliding_window"] = None
    kw.update(extra)
    cls = {"llama": transformers.LlamaConfig, "mistral": transformers.MistralConfig, "qwen2": transformers.Qwen2Config}
    return cls[arch](**kw)


def _model(arch: str, seed: int = 0, **extra):
    import transformers

    cls = {"llama": transformers.LlamaForSequenceClassification,
           "mistral": transformers.MistralForSequenceClassification,
           "qwen2": transformers.Qwen2ForSequenceClassification}[arch]
    torch.manual_seed(seed)
    model = cls(_config(arch, **extra)).eval()
    with torch.no_grad():  # visible scores and biases: default init leaves them near 0
        torch.nn.init.normal_(model.score.weight, std=1.0)
        for m in model.modules():
            if isinstance(m, torch.nn.Linear) and m.bias is not None:
                torch.nn.init.normal_(m.bias, std=0.2)
    return model


def _batch(rows=5, width=41, seed=1):
    """Right-padded ids: rows of several lengths, one ending in pad-id tokens inside its text (the
    read-out then sits before them, as transformers pools), one a single token."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, 97, (rows, width), generator=g)
    lengths = [width, width - 7, 19, 1, width - 2][:rows]
    for r, n in enumerate(lengths):
        ids[r, n:] = PAD
    ids[4 % rows, lengths[4 % rows] - 3:] = PAD  # a text ending in two pad-id tokens
    return ids


def _whole(model, ids):
    with torch.inference_mode():
        return model(input_ids=ids, use_cache=False).logits


@pytest.mark.parametrize("arch,extra", [("llama", {}), ("llama", {"kv": 2}), ("mistral", {}), ("qwen2", {}),
                                        ("llama", {"attention_bias": True, "mlp_bias": True})])
def test_readout_equals_the_whole_forward(arch, extra):
    model = _model(arch, **extra)
    run = readout_fn(model, PAD)
    assert run is not None
    ids = _batch()
    whole, got = _whole(model, ids), run(ids)
    assert got.shape == whole.shape == (5, 2)
    assert torch.allclose(got, whole, rtol=0, atol=2e-5), (got - whole).abs().max()
    assert not torch.equal(got, torch.zeros_like(got))


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_a_masked_batch_reads_out_as_the_whole_forward(arch):
    """An attention mask with holes (the official pipeline's masked doubled BOS: attention 0 on a
    row's first token) goes through the model's own mask: the read-out row of it."""
    model = _model(arch)
    ids = _batch()
    mask = (ids != PAD).long()
    mask[ids == PAD] = 1  # right padding is never attended by a real token of a causal decoder
    mask[[0, 2, 4], 0] = 0
    with torch.inference_mode():
        whole = model(input_ids=ids, attention_mask=mask, use_cache=False).logits
    got = readout_fn(model, PAD)(ids, mask)
    assert torch.allclose(got, whole, rtol=0, atol=2e-5), (got - whole).abs().max()
    unmasked = readout_fn(model, PAD)(ids)
    assert (unmasked - got).abs()[[0, 2, 4]].min() > 1e-4  # the holes matter, and were applied


def test_layers_before_the_last_are_bit_for_bit_the_models(monkeypatch):
    """What the read-out computes from (the last layer's input hidden states) is bit for bit what the
    model's whole forward hands its last layer; the last layer itself is never called, and it is
    back in place afterwards."""
    from rmbench_fast.scorers import readout as module

    model = _model("llama", kv=2)
    last = model.model.layers[-1]
    seen = []
    hook = last.register_forward_pre_hook(lambda m, args, kw: seen.append(args[0].clone()), with_kwargs=True)
    got = []
    real = module._readout
    monkeypatch.setattr(module, "_readout", lambda *a: got.append(a[7].clone()) or real(*a))
    try:
        _whole(model, _batch())
        readout_fn(model, PAD)(_batch())
    finally:
        hook.remove()
    assert len(seen) == 1 and len(got) == 1
    assert torch.equal(got[0], seen[0])
    assert model.model.layers[-1] is last


def test_the_last_layer_is_put_back_when_the_forward_fails():
    model = _model("llama")
    last = model.model.layers[-1]
    model.model.layers[0].mlp.down_proj.register_forward_hook(lambda *a: (_ for _ in ()).throw(MemoryError("oom")))
    with pytest.raises(MemoryError):
        readout_fn(model, PAD)(_batch())
    assert model.model.layers[-1] is last


@pytest.mark.parametrize("extra", [
    {"head_dim": 8},  # head_dim apart from hidden / heads
    {"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 16}},
])
def test_head_dims_and_rope_scaling_read_out_as_the_whole_forward(extra):
    model = _model("llama", **extra)
    ids = _batch()
    assert torch.allclose(readout_fn(model, PAD)(ids), _whole(model, ids), rtol=0, atol=2e-5)
    one = ids[:1, :1]  # a batch one token wide
    assert torch.allclose(readout_fn(model, PAD)(one), _whole(model, one), rtol=0, atol=2e-5)


def test_bf16_reads_out_no_farther_from_fp32_than_the_whole_bf16_forward():
    """In bf16 the last layer's other shapes round otherwise: the read-out stays as close to the fp32
    scores as the model's own bf16 forward is (within 3x, on a bf16 ulp of the scores' size)."""
    model = _model("llama", kv=2)
    ids = _batch()
    exact = _whole(model, ids)
    half = model.to(torch.bfloat16)
    whole = _whole(half, ids).float()
    got = readout_fn(half, PAD)(ids).float()
    ulp = exact.abs().max().item() * 2 ** -8
    assert (got - exact).abs().max() <= 3 * (whole - exact).abs().max() + ulp


def test_read_out_positions_follow_transformers_pooling():
    ids = _batch()
    want = []
    for row in ids.tolist():  # the rightmost token that is not the pad id, written plainly
        want.append(max([t for t, x in enumerate(row) if x != PAD], default=0))
    assert readout_positions(ids, PAD).tolist() == want
    assert readout_positions(torch.full((1, 4), PAD), PAD).tolist() == [0]


@pytest.mark.parametrize("change", ["eager", "sliding", "qwen2-sliding", "training", "no-pad", "causal-lm", "placed",
                                    "int8-like", "remote-code", "other-pad"])
def test_models_it_does_not_restate_keep_their_own_forward(change):
    import transformers

    if change == "eager":
        model = _model("llama", attn_implementation="eager")
    elif change == "sliding":
        model = _model("mistral")
        model.config.sliding_window = 16
    elif change == "qwen2-sliding":
        model = _model("qwen2", use_sliding_window=True, sliding_window=16, max_window_layers=0)
    elif change == "training":
        model = _model("llama").train()
    elif change == "causal-lm":
        cfg = _config("llama")
        model = transformers.LlamaForCausalLM(cfg).eval()
    elif change == "placed":
        model = _model("llama")
        model.hf_device_map = {"": "cpu"}
    elif change == "int8-like":  # a Linear subclass (bitsandbytes, GPTQ, PEFT) does more in forward
        model = _model("llama")
        old = model.model.layers[-1].self_attn.q_proj
        new = type("Linear8bit", (torch.nn.Linear,), {})(old.in_features, old.out_features, bias=False)
        model.model.layers[-1].self_attn.q_proj = new
    elif change == "remote-code":
        model = _model("llama")
        model.__class__ = type("LlamaForSequenceClassification", (type(model),), {"__module__": "remote.modeling"})
    elif change == "other-pad":
        model = _model("llama")
        model.config.pad_token_id = PAD + 1
    else:
        model = _model("llama")
    assert readout_fn(model, None if change == "no-pad" else PAD) is None


@pytest.mark.parametrize("tokenizer", ["plain", "tmpl"])
def test_the_scorer_reads_out_and_scores_as_the_whole_forward(models, data_path, tokenizer):
    """RewardModelScorer's batches: the read-out path gives the whole forward's scores within fp32
    rounding, on causal batches (plain) and on batches whose doubled BOS is masked (tmpl's template
    starts with the BOS the tokenizer adds too); --compat official (readout=False) runs the whole
    forward."""
    from rmbench_fast.inputs.batching import make_batches
    from rmbench_fast.inputs.data import load_dataset
    from rmbench_fast.inputs.templates import ChatFormat
    from rmbench_fast.models.loading import load_model, load_tokenizer
    from rmbench_fast.scorers import RewardModelScorer
    from rmbench_fast.scorers import rm as rm_module

    path = models[tokenizer]["rm"]
    tok = load_tokenizer(path, False)
    model = load_model(path, "rm", torch.float32, "cpu", False)
    _, pad = rm_module.official_pad_ids(tok, model.config)  # run_rm.py's: EOS where the tokenizer has no pad
    model.config.pad_token_id = pad
    samples = load_dataset(data_path, limit=2)
    scores, calls, n = {}, [], 0
    real = rm_module.readout_fn

    def spy(m, p):
        fn = real(m, p)
        return None if fn is None else (lambda ids, mask: calls.append(mask is not None) or fn(ids, mask))

    rm_module.readout_fn = spy
    try:
        for readout in (True, False):
            scorer = RewardModelScorer(pad, 0, bos_id=tok.bos_token_id, readout=readout)
            seqs = scorer.encode(samples, tok, ChatFormat(tok), False, path)
            run = scorer.batch_fn(model, "cpu")
            out = np.zeros(len(seqs))
            for b in make_batches([len(s.ids) for s in seqs], 2048):
                out[b.indices] = run(seqs, b)["scores"]
            scores[readout] = out
            if readout:
                assert calls, "the read-out path was not taken"
                assert any(calls) == (tokenizer == "tmpl")  # masked batches go through it too
                n = len(calls)
            else:
                assert len(calls) == n
    finally:
        rm_module.readout_fn = real
    assert np.abs(scores[True] - scores[False]).max() <= 2e-5
    assert scorer.pass_key() != RewardModelScorer(pad, 0).pass_key()


def test_runs_that_compute_otherwise_are_keyed_apart(models):
    """The store serves a pass to a run whose options compute the same numbers: a placed model
    (--device-map) and --compat official run the whole forward, so their RM passes are not the
    read-out's (placement on the CPU adds no key of its own)."""
    from rmbench_fast.engine.options import ScoreOptions
    from rmbench_fast.models.loading import load_config, load_tokenizer
    from rmbench_fast.scorers import make_scorer

    path = models["plain"]["rm"]
    tok, cfg = load_tokenizer(path, False), load_config(path, False)

    def key(**kw):
        o = ScoreOptions(model=path, data="d", cache=False, progress=False, bootstrap=0, **kw)
        s = make_scorer(o, "rm", None, cfg, tok, "cpu", path)
        return s.readout, s.pass_key()

    plain, placed, official = key(), key(device_map="auto"), key(compat="official")
    assert plain[0] and not placed[0] and not official[0]
    assert plain[1] != placed[1] and plain[1] != official[1]

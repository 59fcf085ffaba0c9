"""The native Llama (WIP, issue 34) against transformers' own, bit for bit: whole forwards of a
sequence classifier and a causal LM, their keys and values for a cache, and a suffix batch on
shared prefixes through the split attention."""

import pytest
import torch

from rmbench_fast.inputs import prefix_attention
from rmbench_fast.inputs.prefix_attention import KEY, SplitPrefix
from rmbench_fast.models import native_llama
from rmbench_fast.models.native_config import native_config


def build(tmp_path, kind, kv_heads, dtype, **kw):
    from transformers import LlamaConfig, LlamaForCausalLM, LlamaForSequenceClassification

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=320, hidden_size=64, intermediate_size=176, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=kv_heads, max_position_embeddings=512,
                      num_labels=1, pad_token_id=0, **kw)
    real = (LlamaForSequenceClassification if kind == "rm" else LlamaForCausalLM)(cfg)
    for p in real.parameters():
        if p.dim() == 1:
            torch.nn.init.normal_(p, std=0.3)
    d = tmp_path / f"{kind}{kv_heads}"
    real.save_pretrained(d)
    kw = {"dtype": dtype} if __import__("transformers").__version__ >= "5" else {"torch_dtype": dtype}
    real = type(real).from_pretrained(str(d), attn_implementation="sdpa", **kw).eval()
    native = native_llama.load(str(d), native_config(str(d), None), dtype, torch.device("cpu"))
    return real, native


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("kv_heads", [4, 2])
def test_whole_forwards_are_the_same_bits(tmp_path, dtype, kv_heads):
    ids = torch.randint(1, 320, (3, 37))
    for kind in ("rm", "lm"):
        real, native = build(tmp_path, kind, kv_heads, dtype)
        with torch.inference_mode():
            want, got = real(input_ids=ids, use_cache=False), native(input_ids=ids, use_cache=False)
            assert torch.equal(got.logits, want.logits), kind
            if kind == "lm":
                assert torch.equal(native.model(input_ids=ids)[0], real.model(input_ids=ids, use_cache=False)[0])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("kv_heads", [4, 2])
def test_masked_forwards_are_the_same_bits(tmp_path, dtype, kv_heads):
    """A batch whose rows have their first token masked (a doubled BOS), and right padding, as the RM
    scorer hands it: the same bits as transformers 5's (whose mask the native one restates), in the
    whole forward and in the RM read-out, which takes the model's own mask."""
    from rmbench_fast.models.versions import transformers_version
    from rmbench_fast.scorers.readout import readout_fn

    if transformers_version() < (5,):
        pytest.skip("transformers 4 builds another mask: those runs load transformers' model")
    ids = torch.randint(1, 320, (4, 29))
    mask = torch.ones_like(ids)
    mask[[0, 2], 0] = 0  # rows 0 and 2: the first BOS masked
    ids[1, 20:], mask[1, 20:] = 0, 0  # row 1 right-padded
    ids[2, 25:], mask[2, 25:] = 0, 0  # row 2 both
    for kind in ("rm", "lm"):
        real, native = build(tmp_path, kind, kv_heads, dtype)
        with torch.inference_mode():
            want = real(input_ids=ids, attention_mask=mask, use_cache=False).logits
            got = native(input_ids=ids, attention_mask=mask, use_cache=False).logits
            assert torch.equal(got, want), kind
            if kind == "rm":
                want = readout_fn(real, 0)(ids, mask)
                assert torch.equal(readout_fn(native, 0)(ids, mask), want)
                assert not torch.equal(want, readout_fn(real, 0)(ids, torch.ones_like(mask)))  # the mask matters
    with pytest.raises(TypeError, match="whole sequences"):
        native.model(input_ids=ids, attention_mask=mask, use_cache=True)


def test_tied_embeddings_are_one_tensor(tmp_path):
    real, native = build(tmp_path, "lm", 4, torch.float32, tie_word_embeddings=True)
    ids = torch.randint(1, 320, (2, 19))
    with torch.inference_mode():
        assert torch.equal(native(input_ids=ids).logits, real(input_ids=ids, use_cache=False).logits)
    assert native.lm_head.weight is native.model.embed_tokens.weight  # one Parameter, as transformers ties them
    assert sum(p.numel() for p in native.parameters()) == sum(p.numel() for p in real.parameters())
    assert all(p.data_ptr() % 64 == 0 for p in native.parameters())  # blocks of their own (see load)


def test_cache_and_split_prefix_are_the_same_bits(tmp_path):
    from rmbench_fast.inputs.prefix import _layers

    real, native = build(tmp_path, "lm", 2, torch.float32)
    prefix = torch.randint(1, 320, (1, 11))
    with torch.inference_mode():
        want = _layers(real.model(input_ids=prefix, use_cache=True).past_key_values)
        got = native.model(input_ids=prefix, use_cache=True)["past_key_values"]
        assert all(torch.equal(a, b) and torch.equal(c, d) for (a, c), (b, d) in zip(got, want))
        flat = [(k[0].transpose(0, 1).contiguous(), v[0].transpose(0, 1).contiguous()) for k, v in got]
        suffix = torch.randint(1, 320, (2, 9))
        split = SplitPrefix(flat, [(0, 11), (0, 7)])
        pos = torch.tensor([[11], [7]]) + torch.arange(9)[None]
        inputs = {"input_ids": suffix, "position_ids": pos, "use_cache": False, KEY: split}
        with prefix_attention.switched(real.model):
            want = real.model(**inputs)[0]
        assert torch.equal(native.model(**inputs)[0], want)


def test_what_it_does_not_take_is_an_error(tmp_path):
    _, native = build(tmp_path, "lm", 4, torch.float32)
    ids = torch.randint(1, 320, (1, 5))
    for bad in ({"past_key_values": object()}, {"logits_to_keep": 1}, {"output_hidden_states": True},
                {"attention_mask": torch.ones(1, 5, dtype=torch.long), "use_cache": True}):
        with pytest.raises((TypeError, ValueError)):
            native(input_ids=ids, **bad)
    native(input_ids=ids, output_hidden_states=False, output_attentions=False, use_cache=False)


def test_wrong_weights_are_an_error(tmp_path):
    from safetensors.torch import load_file, save_file

    real, _ = build(tmp_path, "lm", 4, torch.float32)
    d = tmp_path / "lm4"
    w = load_file(str(d / "model.safetensors"))
    del w["model.norm.weight"]
    save_file(w, str(d / "model.safetensors"))
    with pytest.raises(ValueError, match="model.norm.weight"):
        native_llama.load(str(d), native_config(str(d), None), torch.float32, torch.device("cpu"))


@pytest.mark.parametrize("kind", ["rm", "dpo", "rm with a chat template", "rm with a doubled BOS"])
def test_a_plain_llama_run_never_imports_transformers(world, kind, request, tmp_path):
    """The whole run (config, tokenizer, its chat template, model, passes, results) without
    transformers' import, and the scores of the run with it (the same bits). Under transformers 4
    the tokenizer is always AutoTokenizer's (models.tokenizer_loading), which imports it."""
    from rmbench_fast.models import native_template
    from rmbench_fast.models.versions import transformers_version

    if transformers_version() < (5,):
        pytest.skip("under transformers 4 the run's tokenizer is AutoTokenizer's")
    import json
    import shutil
    import subprocess
    import sys

    import numpy as np

    from rmbench_fast.engine.score import ScoreOptions, score

    models = {"model": world["rm"]} if kind.startswith("rm") else {"model": world["policy"], "ref_model": world["ref"]}
    if kind.startswith("rm with"):
        if not native_template.restates_installed():
            pytest.skip("this transformers' chat-template rendering is not restated (its tokenizer renders)")
        shutil.copytree(world["rm"], tmp_path / "rm")
        cfg = json.loads((tmp_path / "rm" / "tokenizer_config.json").read_text())
        # the tokenizer adds a BOS: a template's own makes it a doubled one, whose first is masked
        cfg["chat_template"] = (("{{ bos_token }}" if kind.endswith("BOS") else "") + "{% for m in messages %}<|"
                                "{{ m['role'] }}|>\n{{ m['content'] | trim }}{{ eos_token }}\n{% endfor %}")
        (tmp_path / "rm" / "tokenizer_config.json").write_text(json.dumps(cfg))
        models = {"model": str(tmp_path / "rm")}
    code = ("import json, sys\nfrom rmbench_fast.engine.score import ScoreOptions, score\n"
            f"r = score(ScoreOptions(data={world['data']!r}, cache=False, progress=False, **{models!r}))\n"
            "print(json.dumps([r.chosen.tolist(), r.rejected.tolist(), 'transformers' in sys.modules, r.run]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    chosen, rejected, imported, run = json.loads(out.stdout.strip().splitlines()[-1])
    assert imported is False
    if kind.startswith("rm"):  # a doubled BOS (masked batches) in that run and no other
        doubled = int(__import__("re").search(r'"double_bos_sequences": (\d+)', json.dumps(run)).group(1))
        assert (doubled > 0) is kind.endswith("BOS"), doubled
    request.getfixturevalue("no_native")
    plain = score(ScoreOptions(data=world["data"], cache=False, progress=False, **models))
    assert np.array_equal(np.array(chosen), plain.chosen) and np.array_equal(np.array(rejected), plain.rejected)


def test_grouped_query_attention_sdpa_would_call_otherwise_loads_transformers(tmp_path, monkeypatch):
    """Key / value heads as native_llama hands them to SDPA (grouped by SDPA without a mask, repeated
    with one) are transformers 5's choice for heads up to 256 wide without TRANSFORMERS_SDPA_FORCE_GQA:
    other models load transformers' own."""
    from rmbench_fast.models import loading

    build(tmp_path / "narrow", "lm", 2, torch.float32)
    build(tmp_path / "wide", "lm", 2, torch.float32, head_dim=264)
    build(tmp_path / "wide_mha", "lm", 4, torch.float32, head_dim=264)
    load = lambda d: loading._native_model(str(next((tmp_path / d).iterdir())), "lm", torch.float32,  # noqa: E731
                                           torch.device("cpu"))
    assert load("narrow") is not None and load("wide_mha") is not None
    assert load("wide") is None
    monkeypatch.setenv("TRANSFORMERS_SDPA_FORCE_GQA", "1")
    assert load("narrow") is None and load("wide_mha") is not None

"""native_config answers as transformers' LlamaConfig answers, for every name a run reads before a
model loads, without loading it; anything else loads the real config; configs it cannot answer for
exactly give None."""

import json

import pytest

from rmbench_fast.models.native_config import ABSENT, READS, native_config


def saved(tmp_path, name, **kw):
    from transformers import LlamaConfig

    d = tmp_path / name
    LlamaConfig(vocab_size=320, hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4,
                max_position_embeddings=512, **kw).save_pretrained(d)
    return d


VARIANTS = {
    "rm": dict(architectures=["LlamaForSequenceClassification"], num_labels=1, pad_token_id=0),
    "lm": dict(architectures=["LlamaForCausalLM"]),
    "gqa": dict(architectures=["LlamaForCausalLM"], num_key_value_heads=2, head_dim=32, pad_token_id=None),
    "labels": dict(architectures=["LlamaForSequenceClassification"], num_labels=3, tie_word_embeddings=True),
}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_answers_as_the_class(tmp_path, name):
    from transformers import AutoConfig

    folder = saved(tmp_path, name, **VARIANTS[name])
    real = AutoConfig.from_pretrained(str(folder))
    loads = []
    native = native_config(str(folder), lambda: loads.append(1) or real)
    assert native is not None
    for n in READS:
        assert getattr(native, n) == getattr(real, n) and type(getattr(native, n)) is type(getattr(real, n)), n
    for n in ABSENT:
        assert not hasattr(real, n) and not hasattr(native, n), n
    assert native.get_text_config() is native and real.get_text_config() is real
    assert loads == []
    assert native.rms_norm_eps == real.rms_norm_eps and loads == [1]  # not a fact: the real config answers


@pytest.mark.parametrize("change", [
    {"model_type": "mistral"}, {"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, {"attention_bias": True},
    {"hidden_act": "gelu"}, {"auto_map": {"AutoConfig": "x.Config"}}, {"sliding_window": 128},
    {"architectures": ["LlamaForTokenClassification"]}, {"architectures": None}, {"unknown_key": 1},
    {"num_attention_heads": True}, {"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 2.0}},
    {"rope_theta": 5e5, "rope_parameters": {"rope_type": "default", "rope_theta": 1e4}},  # which one counts
    {"num_attention_heads": 5}, {"pad_token_id": 320}, {"pad_token_id": -1}])
def test_not_plain_llama(tmp_path, change):
    folder = saved(tmp_path, "x", architectures=["LlamaForCausalLM"])
    raw = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**raw, **change}))
    assert native_config(str(folder), lambda: None) is None


def test_unreadable(tmp_path):
    assert native_config(str(tmp_path / "missing"), lambda: None) is None
    (tmp_path / "config.json").write_text("{not json")
    assert native_config(str(tmp_path), lambda: None) is None

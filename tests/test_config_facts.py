"""A config's attributes kept in the store (models.config_facts) answer every attribute read as the
config class itself does, for plain, aliased (GPT-2's n_embd) and composite (text_config)
configs under the installed transformers; a run after the first reads them from the store and
gives byte-identical results."""

import json
import math

import pytest

from rmbench_fast.models.config_facts import StoredConfig, facts
from rmbench_fast.models.loading import load_config
from rmbench_fast.store.entries import Store

TYPES = ["llama", "gemma", "gemma2", "qwen2", "mistral", "mixtral", "phi3", "gpt2", "gpt_neox", "opt", "bloom",
         "falcon", "starcoder2", "deberta-v2", "bert", "gemma3", "llava", "qwen2_vl"]


def public_attributes(config):
    """Every public attribute the real config answers, properties included, sub-configs as dicts."""
    from transformers import PretrainedConfig

    out = {}
    for name in dir(config):
        if name.startswith("_"):
            continue
        try:
            value = getattr(config, name)
        except Exception:  # a property that raises on this config: nothing to answer
            continue
        if callable(value) and not isinstance(value, PretrainedConfig):
            continue
        out[name] = value.to_dict() if isinstance(value, PretrainedConfig) else value
    return out


def same(a, b):
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def saved_config(tmp_path, model_type, **changes):
    from transformers import CONFIG_MAPPING

    try:
        config = CONFIG_MAPPING[model_type](**changes)
    except KeyError:
        pytest.skip(f"transformers has no {model_type}")
    folder = tmp_path / model_type
    config.save_pretrained(folder)
    return folder


def answer(config, name):
    """What `getattr(config, name)` gives, in a form two configs' answers compare by: a value with
    its type (sub-configs as their dicts, methods by name), or the exception's type."""
    from transformers import PretrainedConfig

    try:
        value = getattr(config, name)
    except Exception as e:
        return ("raises", type(e).__name__)
    if isinstance(value, (PretrainedConfig, StoredConfig)):
        return ("config", json.dumps(value.to_dict(), sort_keys=True, default=str))
    if callable(value) and not isinstance(value, type):
        return ("callable", getattr(value, "__name__", None))
    text = json.dumps(value, sort_keys=True, default=str)
    if " object at 0x" in text:  # a view the property builds anew on each read: by its type
        return ("object", type(value).__name__)
    return ("value", type(value).__name__, text)


# config.json asking for eager attention: transformers 4.51-5.24 read `_attn_implementation`, 5.25
# ignores it and reads the public `attn_implementation`
EAGER = {"_attn_implementation": "eager", "attn_implementation": "eager"}

# Names a run reads that no config class defines (getattr with a default): both must not have them.
ABSENT = ("sliding_window_pattern", "logit_scale", "logits_scaling", "reward_token_id", "score_dim", "n_layer")


@pytest.mark.parametrize("model_type", TYPES)
def test_stored_config_answers_as_the_class(tmp_path, model_type):
    """Every name dir() lists, private ones included (`_attn_implementation_internal` decides the
    pre-flight's attention), answers the same value of the same type, or loads the real config for it."""
    from transformers import AutoConfig

    changes = {"num_labels": 1, "pad_token_id": 2} if model_type in ("llama", "gpt2", "deberta-v2") else {}
    folder = saved_config(tmp_path, model_type, **changes)
    raw = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**raw, **EAGER}))  # as a user asks it
    real = AutoConfig.from_pretrained(str(folder))
    kept = facts(real, str(folder))
    assert kept is not None
    loads = []
    stored = StoredConfig(json.loads(json.dumps(kept)), str(folder), lambda: loads.append(1) or real)
    for config, twin in ((real, stored), (real.get_text_config(), stored.get_text_config())):
        names = [n for n in dir(config) if not n.startswith("__")] + list(ABSENT)
        wrong = [f"{n}: {answer(twin, n)} != {answer(config, n)}" for n in names if answer(twin, n) != answer(config, n)]
        assert not wrong, wrong
    assert stored._attn_implementation_internal == real._attn_implementation_internal == "eager"
    assert same(stored.get_text_config().to_dict(), real.get_text_config().to_dict())
    assert stored.num_labels == real.num_labels


def test_the_reads_of_a_run_need_no_real_config(tmp_path):
    """The plain values a run reads come from the facts: the real config is loaded only for what
    they cannot hold (methods, sub-config objects)."""
    from transformers import AutoConfig

    folder = saved_config(tmp_path, "llama", num_labels=1, pad_token_id=0)
    real = AutoConfig.from_pretrained(str(folder))
    loads = []
    stored = StoredConfig(json.loads(json.dumps(facts(real, str(folder)))), str(folder),
                          lambda: loads.append(1) or real)
    for name in ("model_type", "architectures", "hidden_size", "num_attention_heads", "_attn_implementation",
                 "_attn_implementation_internal", "dtype", "name_or_path", "_name_or_path", "pad_token_id",
                 "max_position_embeddings", "num_labels", "is_encoder_decoder", "transformers_version"):
        assert answer(stored, name) == answer(real, name), name
    assert loads == []
    assert answer(stored, "to_json_string") == answer(real, "to_json_string") and loads == [1]


def _plain(value) -> bool:
    try:
        json.dumps(value, allow_nan=False)
        return True
    except (TypeError, ValueError):
        return False


def test_a_second_run_reads_the_stored_config(tmp_path):
    folder = saved_config(tmp_path, "gemma2", pad_token_id=0)
    store = Store(tmp_path / "store")
    first = load_config(str(folder), False, store)
    second = load_config(str(folder), False, store)
    assert not getattr(first, "stored", False) and second.stored
    assert second.pad_token_id == first.pad_token_id == 0 and second.final_logit_softcapping == 30.0
    # config.json edited: the class builds it again
    cfg = json.loads((folder / "config.json").read_text())
    cfg["pad_token_id"] = 1
    (folder / "config.json").write_text(json.dumps(cfg))
    third = load_config(str(folder), False, store)
    assert not getattr(third, "stored", False) and third.pad_token_id == 1
    assert load_config(str(folder), False, store).pad_token_id == 1
    # a config built by the model's own code is never stored
    cfg["auto_map"] = {"AutoConfig": "configuration_x.XConfig"}
    assert not __import__("rmbench_fast.models.config_facts", fromlist=["storable"]).storable(cfg)


def test_reading_the_facts_prints_no_deprecation_warnings(capfd):
    """facts() reads every public property, deprecated ones too (torch_dtype, use_return_dict under
    transformers 5): a first run's output must not carry their warnings."""
    import transformers
    from transformers.utils import logging as hf_logging

    hf_logging.warning_once.cache_clear()  # the warnings are once per process: as in a fresh one
    config = transformers.LlamaConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2)
    import warnings

    capfd.readouterr()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert facts(config) is not None
    err = capfd.readouterr().err
    assert "deprecated" not in err.lower(), err
    assert not [w for w in caught if "deprecat" in str(w.message).lower()]

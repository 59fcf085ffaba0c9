"""A plain Llama config.json read without transformers (issue 34: transformers' import and its config
chain are 1.2 s of a run's 2.7 s fixed cost on a 2-core CPU).

`native_config(path)` gives a StoredConfig whose facts come from config.json itself, for the
configs it can answer for exactly: model_type llama, one of the two Llama architectures a run
scores, and only keys of PLAIN_KEYS with the values a plain Llama has (no rope scaling, no biases,
SiLU, no remote code). It answers the names a run reads before loading a model (READS, each as
LlamaConfig answers it, defaults included: tests/test_native_config.py compares them with the real
class), raises AttributeError for the names LlamaConfig lacks (ABSENT, which a run reads with
getattr defaults), and loads the real config through AutoConfig for anything else. Any other
config.json gives None: the caller loads it through transformers as always.
"""

from __future__ import annotations

import json
from pathlib import Path

from .config_facts import StoredConfig
from .versions import transformers_version

ARCHITECTURES = ("LlamaForSequenceClassification", "LlamaForCausalLM")
# every key a plain Llama config.json may hold, and the values it must have where one is required
PLAIN_KEYS = {"architectures", "attention_bias", "attention_dropout", "bos_token_id", "eos_token_id", "pad_token_id",
              "dtype", "torch_dtype", "head_dim", "hidden_act", "hidden_size", "id2label", "label2id",
              "initializer_range", "intermediate_size", "max_position_embeddings", "mlp_bias", "model_type",
              "num_attention_heads", "num_hidden_layers", "num_key_value_heads", "pretraining_tp", "rms_norm_eps",
              "rope_parameters", "rope_theta", "rope_scaling", "tie_word_embeddings", "transformers_version",
              "use_cache", "vocab_size"}
REQUIRED = ("hidden_size", "intermediate_size", "num_attention_heads", "num_hidden_layers", "vocab_size",
            "max_position_embeddings", "rms_norm_eps")
FIXED = {"attention_bias": False, "mlp_bias": False, "hidden_act": "silu", "pretraining_tp": 1,
         "attention_dropout": 0.0, "rope_scaling": None}
# what a run reads before a model loads (recorded with a proxy around the loaded config)
READS = ("_attn_implementation_internal", "architectures", "head_dim", "hidden_size", "intermediate_size",
         "is_encoder_decoder", "max_position_embeddings", "model_type", "num_attention_heads", "num_hidden_layers",
         "num_key_value_heads", "num_labels", "pad_token_id", "vocab_size")
# read with getattr defaults; a plain LlamaConfig has none of them
ABSENT = ("auto_map", "attn_implementation", "num_quantiles", "score_type", "sliding_window", "use_sliding_window")


def plain_llama(raw) -> bool:
    """Whether a parsed config.json is one this module answers for."""
    if not isinstance(raw, dict) or raw.get("model_type") != "llama" or set(raw) - PLAIN_KEYS:
        return False
    if not (isinstance(raw.get("architectures"), list) and len(raw["architectures"]) == 1
            and raw["architectures"][0] in ARCHITECTURES):
        return False
    if any(not isinstance(raw.get(k), int) or isinstance(raw.get(k), bool) for k in REQUIRED if k != "rms_norm_eps"):
        return False
    if not isinstance(raw.get("rms_norm_eps"), float) or any(k in raw and raw[k] != v for k, v in FIXED.items()):
        return False
    rope = raw.get("rope_parameters")
    if rope is not None and not (isinstance(rope, dict) and set(rope) <= {"rope_theta", "rope_type"}
                                 and rope.get("rope_type", "default") == "default"):
        return False
    if "rope_parameters" in raw and ("rope_theta" in raw or transformers_version() < (5,)):
        return False  # transformers 4 reads only rope_theta (10000 without it); 5 rope_parameters
    if raw["hidden_size"] % raw["num_attention_heads"]:
        return False  # transformers 5 refuses it
    pad = raw.get("pad_token_id")
    if pad is not None and not (isinstance(pad, int) and 0 <= pad < raw["vocab_size"]):
        return False  # nn.Embedding(padding_idx=...) refuses it
    labels = raw.get("id2label")
    if labels is not None and not (isinstance(labels, dict) and labels):
        return False
    for k in ("head_dim", "num_key_value_heads", "pad_token_id"):
        if raw.get(k) is not None and (not isinstance(raw[k], int) or isinstance(raw[k], bool)):
            return False
    return True


def native_config(path: str, load) -> StoredConfig | None:
    """The config at `path` answered from its config.json (None: not a plain Llama, or unreadable).
    load: a function loading the real config, for the reads the facts do not answer."""
    try:
        raw = json.loads((Path(path).expanduser() / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not plain_llama(raw):
        return None
    heads = raw["num_attention_heads"]
    values = {k: raw[k] for k in REQUIRED if k != "rms_norm_eps"}
    values.update(model_type="llama", architectures=list(raw["architectures"]), is_encoder_decoder=False,
                  _attn_implementation_internal=None, pad_token_id=raw.get("pad_token_id"),
                  num_key_value_heads=raw.get("num_key_value_heads") or heads,
                  head_dim=raw.get("head_dim") or raw["hidden_size"] // heads,
                  num_labels=len(raw["id2label"]) if raw.get("id2label") else 2)
    facts = {"class": "LlamaConfig", "attrs": {}, "values": values, "at_path": [], "real": [],
             "absent": list(ABSENT), "open": True, "attribute_map": {}}
    return StoredConfig(facts, path, load)

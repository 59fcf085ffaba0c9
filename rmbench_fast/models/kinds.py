"""What a config says a model is, in one table for every caller: a reward model (sequence
classifier) or a language model (a DPO policy or reference), whether it is a causal decoder, and
the parts of a loaded model the scorers reach into (its text config, the decoder under its head)."""

from __future__ import annotations

import functools
import inspect

from ..errors import UsageError

# the model argument that carries a suffix batch's shared prefixes (inputs.prefix_attention.SplitPrefix)
SPLIT_PREFIX = "rmbench_split_prefix"

# The suffix of a config.json `architectures` entry -> what the model is. "lm": it has a
# language-model head over the vocabulary (AutoModelForCausalLM loads it; ForConditionalGeneration
# covers the multimodal decoders such as Gemma 3); "rm": one head of scores per sequence.
ARCHITECTURE_KINDS = {
    "ForSequenceClassification": "rm",
    "ForCausalLM": "lm",
    "LMHeadModel": "lm",
    "ForConditionalGeneration": "lm",
}

# Decoder-only model types: causal attention, positions counted from 0 on each row. For these, right
# padding cannot change the outputs at real positions, so batches run without an attention mask
# (the fast causal attention path). Any other type keeps its mask (encoders are bidirectional).
CAUSAL_DECODER_TYPES = {
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma", "gemma2", "gemma3_text",
    "phi", "phi3", "gpt2", "gpt_neox", "gptj", "starcoder2", "olmo", "olmo2", "cohere", "granite", "stablelm",
    "deepseek_v2", "deepseek_v3", "internlm2", "falcon", "opt", "bloom", "smollm3",
}


def architectures(config) -> list[str]:
    return list(getattr(config, "architectures", None) or [])


def architecture_kind(arch: str) -> str | None:
    """"rm", "lm", or None for an architecture the table does not name (a model's own class)."""
    return next((kind for suffix, kind in ARCHITECTURE_KINDS.items() if arch.endswith(suffix)), None)


def is_reward_model(config) -> bool:
    return any(architecture_kind(a) == "rm" for a in architectures(config))


def is_language_model(config) -> bool:
    return any(architecture_kind(a) == "lm" for a in architectures(config))


def detect_mode(config) -> str:
    """rm for sequence classifiers, dpo for language models."""
    if is_reward_model(config):
        return "rm"
    if is_language_model(config):
        return "dpo"
    raise UsageError(f"cannot tell the mode from the model's architectures {architectures(config)}: pass --mode rm "
                     "or --mode dpo")


def is_causal_decoder(config) -> bool:
    return getattr(config, "model_type", None) in CAUSAL_DECODER_TYPES and not getattr(config, "is_encoder_decoder",
                                                                                       False)


def sliding_window(config):
    """The attention window a config sets (None: attention over the whole sequence); Qwen2 keeps a
    window size even when its `use_sliding_window` switch is off."""
    return getattr(config, "sliding_window", None) if getattr(config, "use_sliding_window", True) else None


def text_config(config):
    """The text decoder's config (a multimodal config nests it; any other config is its own)."""
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def base_model(model):
    """The decoder under a model's head (transformers' `base_model`), or None when the model has no
    separate one."""
    base = getattr(model, "base_model", None)
    return None if base is None or base is model else base


@functools.lru_cache(maxsize=None)
def forward_keywords(module_class: type) -> frozenset | None:
    """The keyword names a module class's forward takes (None: it takes **kwargs)."""
    params = inspect.signature(module_class.forward).parameters
    if any(p.kind == p.VAR_KEYWORD for p in params.values()):
        return None
    return frozenset(params)

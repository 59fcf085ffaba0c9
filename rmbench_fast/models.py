"""Loading tokenizers and models, deciding the mode, and fingerprinting model files."""

from __future__ import annotations

from pathlib import Path

import torch

from .errors import UsageError, one_line
from .options import DTYPES


def resolve_device(device: str | None) -> torch.device:
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError as e:
        raise UsageError(f"--device {device}: not a device ({e})") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"--device {device}: CUDA is not available on this machine")
    return dev


def resolve_dtype(dtype: str | None, device: torch.device) -> torch.dtype:
    if dtype is None:
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if dtype not in DTYPES:
        raise UsageError(f"--dtype {dtype}: expected one of {', '.join(DTYPES)}")
    return getattr(torch, dtype)


def check_model_path(path: str, what: str = "model") -> None:
    """A path that can only be local (absolute, relative with ./ or ~, or deeper than owner/name)
    must exist: say so plainly rather than as a failed hub look-up."""
    local = Path(path).expanduser()
    if local.exists():
        return
    if path.startswith(("/", ".", "~")) or path.count("/") != 1:
        raise UsageError(f"{what} {path}: no such folder (and not a hub id of the form owner/name)")


def load_config(path: str, trust_remote_code: bool):
    from transformers import AutoConfig

    check_model_path(path)
    local = Path(path)
    if local.exists() and not (local / "config.json").is_file():
        raise UsageError(f"model {path}: folder has no config.json")
    try:
        return AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
    except OSError as e:
        raise UsageError(f"model {path}: cannot load its config ({one_line(e, 300)})") from None
    except ValueError as e:
        raise UsageError(f"model {path}: {one_line(e, 300)}") from None


def detect_mode(config) -> str:
    """rm for *ForSequenceClassification, dpo for causal LMs."""
    archs = getattr(config, "architectures", None) or []
    if any(a.endswith("ForSequenceClassification") for a in archs):
        return "rm"
    if any(a.endswith(("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")) for a in archs):
        return "dpo"
    raise UsageError(f"cannot tell the mode from the model's architectures {archs}: pass --mode rm or --mode dpo")


def load_tokenizer(path: str, trust_remote_code: bool):
    from transformers import AutoTokenizer

    check_model_path(path, "tokenizer")
    try:
        tok = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    except (OSError, ValueError, TypeError) as e:
        raise UsageError(f"tokenizer {path}: cannot load it ({one_line(e, 300)})") from None
    if tok.eos_token_id is None and tok.pad_token_id is None:
        raise UsageError(f"tokenizer {path}: has neither an EOS nor a pad token")
    return tok


PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt")


def load_model(path: str, mode: str, dtype: torch.dtype, device: torch.device, trust_remote_code: bool,
               allow_pickle_weights: bool = False):
    """Load weights from safetensors; pickle-format weights (which can run code when loaded) only
    with allow_pickle_weights."""
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # our own progress bar reports the work
    cls = AutoModelForSequenceClassification if mode == "rm" else AutoModelForCausalLM
    local = Path(path)
    if local.is_dir() and not allow_pickle_weights:
        names = [p.name for p in local.iterdir()]
        if not any(n.endswith(".safetensors") for n in names):
            pickled = [n for n in names if n.endswith(PICKLE_SUFFIXES)]
            if pickled:
                raise UsageError(f"model {path}: weights are pickle files ({pickled[0]}), which can run code when "
                                 "loaded; pass --allow-pickle-weights if you trust them, or convert them to "
                                 "safetensors")
    kw = {"trust_remote_code": trust_remote_code}
    if not allow_pickle_weights:
        kw["use_safetensors"] = True
    try:
        try:
            model = cls.from_pretrained(path, dtype=dtype, **kw)
        except TypeError:  # transformers < 4.56 names it torch_dtype
            model = cls.from_pretrained(path, torch_dtype=dtype, **kw)
    except (OSError, ValueError) as e:
        hint = "" if allow_pickle_weights else " (only safetensors weights load without --allow-pickle-weights)"
        raise UsageError(f"model {path}: cannot load it as {'a sequence classifier' if mode == 'rm' else 'a causal LM'}"
                         f" ({one_line(e, 300)}){hint}") from None
    return model.to(device).eval().requires_grad_(False)


# Decoder-only model types: causal attention, positions counted from 0 on each row. For these, right
# padding cannot change the outputs at real positions, so batches run without an attention mask
# (the fast causal attention path). Any other type keeps its mask (encoders are bidirectional).
CAUSAL_DECODER_TYPES = {
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma", "gemma2", "gemma3_text",
    "phi", "phi3", "gpt2", "gpt_neox", "gptj", "starcoder2", "olmo", "olmo2", "cohere", "granite", "stablelm",
    "deepseek_v2", "deepseek_v3", "internlm2", "falcon", "opt", "bloom", "smollm3",
}


def is_causal_decoder(config) -> bool:
    return getattr(config, "model_type", None) in CAUSAL_DECODER_TYPES and not getattr(config, "is_encoder_decoder",
                                                                                       False)

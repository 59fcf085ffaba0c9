"""Loading a model's config, its tokenizer (a local folder, or the hub's files for a hub id) and its
weights, with one-line errors for what does not load or does not match."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from ..errors import UsageError, one_line
from .placement import Placement, TensorParallel, current, splittable, tp_kwargs
from .versions import transformers_version
from .weight_files import check_weights


def check_model_path(path: str, what: str = "model") -> None:
    """A path that can only be local (absolute, relative with ./ or ~, or deeper than owner/name)
    must exist: say so plainly rather than as a failed hub look-up."""
    local = Path(path).expanduser()
    if local.exists():
        return
    if path.startswith(("/", ".", "~")) or path.count("/") != 1:
        raise UsageError(f"{what} {path}: no such folder (and not a hub id of the form owner/name)")


def load_config(path: str, trust_remote_code: bool, store=None):
    """A model's config: from its folder, or for a hub id from a snapshot of its small files
    (hub_snapshot), so that an unreachable hub fails at once with a hint instead of retrying.
    store: a result store (store.entries.Store) that keeps a local folder's config attributes, so
    later runs read them without the config class (models.config_facts)."""
    if store is not None and store.enabled:
        return _stored_config(path, trust_remote_code, store)
    if not trust_remote_code:  # a plain Llama's config.json answers without transformers (native_config)
        from .native_config import native_config

        config = native_config(path, lambda: _load_config(path, trust_remote_code))
        if config is not None:
            return config
    return _load_config(path, trust_remote_code)


def _stored_config(path: str, trust_remote_code: bool, store):
    import json

    import numpy as np

    from ..store.keys import config_key
    from .config_facts import StoredConfig, facts, storable

    file = Path(path).expanduser() / "config.json"
    try:
        data = file.read_bytes()
        raw = json.loads(data)
    except (OSError, ValueError):  # a hub id, or a config AutoConfig must report on
        return _load_config(path, trust_remote_code)
    if not isinstance(raw, dict) or not storable(raw):
        return _load_config(path, trust_remote_code)
    key = config_key(data, trust_remote_code)
    got = store.get(key)
    if got is not None:
        return StoredConfig(json.loads(str(got["facts"])), path, lambda: _load_config(path, trust_remote_code))
    config = _load_config(path, trust_remote_code)
    kept = facts(config, path)
    if kept is not None:
        store.put(key, {"facts": np.array(json.dumps(kept))})
    return config


def _load_config(path: str, trust_remote_code: bool):
    from transformers import AutoConfig

    check_model_path(path)
    local = Path(path)
    if local.exists() and not (local / "config.json").is_file():
        raise UsageError(f"model {path}: folder has no config.json")
    source = path if local.exists() else hub_snapshot(path, "model")
    try:
        return AutoConfig.from_pretrained(source, trust_remote_code=trust_remote_code)
    except OSError as e:
        raise UsageError(f"model {path}: cannot load its config ({one_line(e, 300)})") from None
    except ValueError as e:
        if "trust_remote_code" in str(e):
            raise UsageError(f"model {path}: its config is the model's own code (config.json auto_map AutoConfig): "
                             "pass --trust-remote-code if you trust it") from None
        raise UsageError(f"model {path}: {one_line(e, 300)}") from None


def hub_snapshot(path: str, what: str) -> str:
    """The local snapshot of a hub id's files other than weights: config, the tokenizer's files of
    whatever format (vocab.txt, *.model, *.tiktoken, ...), code, generation config (downloaded when
    online, else the cache); the folder's fingerprint covers the same files. One listing of the
    repository, which fails at once when the hub cannot be reached (a file-by-file download retries
    with backoff: 27 s offline). Subfolders (other formats' weights, originals) are left out."""
    from huggingface_hub import snapshot_download

    from ..store.fingerprints import WEIGHT_SUFFIXES

    try:
        return snapshot_download(path, ignore_patterns=[f"*{s}" for s in WEIGHT_SUFFIXES] + ["*/*", ".*"])
    except Exception as e:  # offline and not cached, unknown repo, gated, ...
        import os

        if os.environ.get("HF_HUB_OFFLINE") not in (None, "", "0"):  # the hub's own text would be cut mid-hint
            why = "HF_HUB_OFFLINE is set and it is not in the local hub cache"
        else:
            text = one_line(e)
            why = f"{type(e).__name__}: {text if len(text) <= 200 else text[:200].rsplit(' ', 1)[0] + ' ...'}"
        raise UsageError(f"{what} {path}: not a local folder, and fetching it from the hub failed ({why}); pass a "
                         "local folder (a model saved with save_pretrained, or a download of the hub repository)"
                         ) from None


def tokenizer_folder(path: str) -> str:
    """A local folder holding the tokenizer's files: `path` itself, or for a hub id its snapshot of
    the tokenizer files and config.json, so that tokenizers from the hub load as transformers 4.51
    builds them too (tokenizer_loading reads the folder)."""
    if Path(path).expanduser().is_dir():
        return path
    check_model_path(path, "tokenizer")
    return hub_snapshot(path, "tokenizer")


def load_tokenizer(path: str, trust_remote_code: bool, native: bool = False):
    """The tokenizer as the official flow (transformers 4.51) loads it (tokenizer_loading). native: built
    with `tokenizers` alone where native_tokenizer can (it loads the real one for anything else)."""
    from .tokenizer_loading import load_tokenizer as load_as_official

    check_model_path(path, "tokenizer")
    try:
        tok = None
        if native and not trust_remote_code:
            from .native_tokenizer import native_tokenizer

            tok = native_tokenizer(path, lambda: load_tokenizer(path, trust_remote_code))
        tok = tok if tok is not None else load_as_official(path, trust_remote_code=trust_remote_code)
    except (OSError, ValueError, TypeError) as e:
        raise UsageError(f"tokenizer {path}: cannot load it ({one_line(e, 300)})") from None
    if tok.eos_token_id is None and tok.pad_token_id is None:
        raise UsageError(f"tokenizer {path}: has neither an EOS nor a pad token")
    return tok


def own_class(cls, path: str):
    """For an Auto class and a folder whose config.json maps it to the model's own code (auto_map),
    that class itself. Loading through the Auto class would also register the class for the
    config's class process-wide (transformers' `cls.register(config.__class__, ...)`): a remote
    class declared for LlamaConfig, as ArmoRM's is, would then be what every later
    AutoModel*.from_config / from_pretrained of a plain Llama in this process builds."""
    from transformers import AutoConfig
    from transformers.dynamic_module_utils import get_class_from_dynamic_module

    if not hasattr(cls, "_model_mapping"):  # not an Auto class: the class itself
        return cls
    ref = (getattr(AutoConfig.from_pretrained(path, trust_remote_code=True), "auto_map", None) or {}).get(cls.__name__)
    return get_class_from_dynamic_module(ref, path) if ref else cls


def _dtype_kwarg() -> str:
    """transformers 4.56 renamed from_pretrained's torch_dtype to dtype."""
    return "dtype" if transformers_version() >= (4, 56) else "torch_dtype"


def load_model(path: str, mode: str, dtype: torch.dtype, device: torch.device, trust_remote_code: bool,
               allow_pickle_weights: bool = False, load_in_8bit: bool = False, model_class=None,
               attn_implementation: str | None = None, native: bool = False):
    """Load weights from safetensors; pickle-format weights (which can run code when loaded) only
    with allow_pickle_weights. Every weight of the model's class must come from the files and
    every weight in the files must be used: a head whose names do not match its class would
    otherwise be random (or silently dropped), so that is an error naming the weights.
    load_in_8bit: bitsandbytes LLM.int8 on CUDA, as the official scripts load most models. Inside
    `placed(...)` the model is placed over the devices by accelerate (or split over a --tp group)
    instead of moved to `device`."""
    if native and model_class is None and attn_implementation is None and not (load_in_8bit or trust_remote_code):
        model = _native_model(path, mode, dtype, device)
        if model is not None:
            return model
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # our own progress bar reports the work
    cls = model_class or (AutoModelForSequenceClassification if mode == "rm" else AutoModelForCausalLM)
    check_weights(path, "model", allow_pickle_weights)
    kw = {"trust_remote_code": trust_remote_code, _dtype_kwarg(): dtype, "output_loading_info": True}
    if attn_implementation is not None:  # else transformers' default for the class and version
        kw["attn_implementation"] = attn_implementation
    if not allow_pickle_weights:
        kw["use_safetensors"] = True
    placement = current()
    if isinstance(placement, TensorParallel):
        kw.update(tp_kwargs(placement.n))
    elif placement is not None:
        kw.update(device_map=placement.device_map, max_memory=placement.max_memory,
                  offload_folder=placement.offload_folder)
    if load_in_8bit:
        kw.update(quantization_config=_int8_config(), device_map=kw.get("device_map") or {"": device.index or 0})
    what = "a sequence classifier" if mode == "rm" else "a causal LM"
    try:
        if trust_remote_code:
            cls = own_class(cls, path)
        if isinstance(placement, Placement):
            cls = splittable(cls)
        model, info = cls.from_pretrained(path, **kw)
    except (OSError, ValueError) as e:
        hint = "" if allow_pickle_weights else " (only safetensors weights load without --allow-pickle-weights)"
        raise UsageError(f"model {path}: cannot load it as {what} ({one_line(e, 300)}){hint}") from None
    check_loading(path, type(model).__name__, info)
    model = model if load_in_8bit or placement is not None else model.to(device)
    return model.eval().requires_grad_(False)


def _native_model(path: str, mode: str, dtype: torch.dtype, device: torch.device):
    """A plain Llama (native_config) built without transformers (native_llama), on the CPU, from one
    model.safetensors, of the class `mode` loads; None for anything else."""
    from .native_config import native_config

    folder = Path(path).expanduser()
    if torch.device(device).type != "cpu" or current() is not None or dtype not in (torch.float32, torch.bfloat16):
        return None
    if not (folder / "model.safetensors").is_file() or (folder / "model.safetensors.index.json").exists():
        return None
    config = native_config(path, None)
    want = "LlamaForSequenceClassification" if mode == "rm" else "LlamaForCausalLM"
    if config is None or config.architectures != [want]:
        return None
    # grouped-query attention as native_llama calls SDPA: key / value heads repeated under a mask, SDPA's
    # own grouping without one; transformers 5 repeats them for heads over 256 wide or groups them under
    # a mask when TRANSFORMERS_SDPA_FORCE_GQA is set (and 4.51 has other rules): those load transformers'
    if config.num_key_value_heads != config.num_attention_heads and (
            config.head_dim > 256 or os.environ.get("TRANSFORMERS_SDPA_FORCE_GQA", "0") == "1"):
        return None
    from .native_llama import load

    try:
        return load(path, config, dtype, device)
    except ValueError:  # weights of other names or shapes: transformers loads it, and reports what is wrong
        return None


def check_loading(path: str, cls_name: str, info: dict) -> None:
    """Missing, unexpected or mismatched weights end the run before any pass, naming them."""
    problems = []
    for key, what in (("missing_keys", "not in the files, so they would be random"),
                      ("unexpected_keys", "in the files but unused by the class"),
                      ("mismatched_keys", "of another shape in the files")):
        names = sorted(str(k[0] if isinstance(k, tuple) else k) for k in (info.get(key) or []))
        if names:
            more = f" and {len(names) - 5} more" if len(names) > 5 else ""
            problems.append(f"{', '.join(names[:5])}{more} ({what})")
    if problems:
        raise UsageError(f"model {path}: loading it as {cls_name} does not match its weights: {'; '.join(problems)}. "
                         "Its head probably has other names than the class expects: choose the right class "
                         "(rmbench-fast adapters) or convert the checkpoint")


def _int8_config():
    try:
        import bitsandbytes  # noqa: F401
        from transformers import BitsAndBytesConfig
    except ImportError:
        raise UsageError("8-bit loading (the official precision for this model) needs bitsandbytes: "
                         "pip install 'rmbench-fast[quant]'") from None
    return BitsAndBytesConfig(load_in_8bit=True)

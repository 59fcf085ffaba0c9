"""Load a tokenizer the way the official flow (transformers 4.51) loads it, under any transformers.

transformers 4.51 builds the *fast* class that tokenizer_config.json names (PreTrainedTokenizerFast,
LlamaTokenizerFast, ...): it loads tokenizer.json as it is, then the class's __init__ adds its own
touches (default special tokens, Llama/Gemma rebuilding the post-processor from add_bos_token /
add_eos_token, a left padding side). transformers 5 may build another class: the model type's (a
folder naming PreTrainedTokenizerFast or LlamaTokenizerFast under a qwen2 config loads as
Qwen2Tokenizer), which rebuilds the pipeline from the vocabulary with its own normalizer and
pre-tokenizer (other ids) and invents default special tokens (ids outside the embedding); and when
it does keep tokenizer.json, it ignores add_bos_token (no BOS where 4.51 adds one).

So under transformers >= 5, for the classes below, we load tokenizer.json as it is (TokenizersBackend,
which 4.51 calls PreTrainedTokenizerFast) and redo what the named 4.51 class adds on top. Anything
else (other classes, remote code, folders without tokenizer.json, hub ids, transformers 4.x) goes
through AutoTokenizer, unchanged.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from .versions import transformers_version

# What each 4.51 fast class adds to the tokenizer.json it loads, from its __init__ signature:
# default special tokens (used when neither tokenizer_config.json nor special_tokens_map.json
# sets them), the class's padding side, and for the classes that rebuild the post-processor, the
# add_bos_token / add_eos_token defaults. Checked against transformers 4.51.0's sources.
_LLAMA = {"specials": {"unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>"},
          "padding_side": "left", "bos_eos": (True, False), "add_prefix_space": None}
# Keys are class names without "Fast" (4.51 builds the fast class of a named slow one).
CLASSES_451 = {
    "PreTrainedTokenizer": {"specials": {}},  # PreTrainedTokenizerFast: tokenizer.json alone
    "TokenizersBackend": {"specials": {}},  # a folder saved by transformers 5 names this
    "LlamaTokenizer": _LLAMA,
    "GemmaTokenizer": {"specials": {"unk_token": "<unk>", "bos_token": "<bos>", "eos_token": "<eos>",
                                    "pad_token": "<pad>"}, "padding_side": "left", "bos_eos": (True, False)},
    "Qwen2Tokenizer": {"specials": {"unk_token": "<|endoftext|>", "bos_token": None, "eos_token": "<|endoftext|>",
                                    "pad_token": "<|endoftext|>"}},
    "GPT2Tokenizer": {"specials": {"unk_token": "<|endoftext|>", "bos_token": "<|endoftext|>",
                                   "eos_token": "<|endoftext|>"}},
    "GPTNeoXTokenizer": {"specials": {"unk_token": "<|endoftext|>", "bos_token": "<|endoftext|>",
                                      "eos_token": "<|endoftext|>", "pad_token": None}, "bos_eos": (False, False)},
}
# transformers 4.51's class for a model type, when neither tokenizer_config.json nor config.json
# names one (only the common decoder types whose class is above; others go through AutoTokenizer).
MODEL_TYPE_CLASS_451 = {
    **dict.fromkeys(["llama", "mistral", "mixtral", "deepseek_v3", "phi3"], "LlamaTokenizer"),
    **dict.fromkeys(["gemma", "gemma2", "gemma3", "gemma3_text"], "GemmaTokenizer"),
    **dict.fromkeys(["qwen2", "qwen2_moe", "qwen3", "qwen3_moe"], "Qwen2Tokenizer"),
    **dict.fromkeys(["gpt2", "gptj", "gpt_neo", "starcoder2", "opt"], "GPT2Tokenizer"),
    **dict.fromkeys(["gpt_neox", "olmo", "olmo2", "stablelm"], "GPTNeoXTokenizer"),
    **dict.fromkeys(["falcon", "glm", "nemotron"], "PreTrainedTokenizer"),
}


def read_json(path: Path) -> dict:
    try:
        out = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return out if isinstance(out, dict) else {}


def class_451(folder: Path, cfg: dict) -> str | None:
    """The tokenizer class transformers 4.51 builds for `folder` ("Fast" dropped): the one
    tokenizer_config.json names, else config.json's tokenizer_class, else the model type's."""
    model_cfg = read_json(folder / "config.json")
    name = cfg.get("tokenizer_class") or model_cfg.get("tokenizer_class")
    if not name:
        name = MODEL_TYPE_CLASS_451.get(model_cfg.get("model_type"))
    return name[:-4] if name and name.endswith("Fast") else name


def load_tokenizer(path: str, trust_remote_code: bool = False):
    """A tokenizer giving the ids, special tokens, padding side and chat template that
    transformers 4.51's AutoTokenizer.from_pretrained(path) gives. Errors as AutoTokenizer's
    (OSError / ValueError / TypeError)."""
    from transformers import AutoTokenizer

    folder = Path(path).expanduser()
    cfg = read_json(folder / "tokenizer_config.json")
    name = class_451(folder, cfg) if folder.is_dir() else None
    if transformers_version() < (5,) or name not in CLASSES_451 or "auto_map" in cfg:
        return AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    if (not (folder / "tokenizer.json").is_file() or cfg.get("from_slow")
            # 4.51's LlamaTokenizerFast re-converts from the sentencepiece model when this is set
            or (name == "LlamaTokenizer" and cfg.get("add_prefix_space") is not None)):
        # Converted from the slow files (tokenizer.model) by both versions alike (same ids on
        # the RM-Bench texts for Mistral's sentencepiece model); only the class's padding side
        # is lost in transformers 5.
        tok = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
        side = CLASSES_451[name].get("padding_side")
        if side and "padding_side" not in cfg:
            tok.padding_side = side
        return tok
    return _load_as_451(folder, cfg, name)


def _load_as_451(folder: Path, cfg: dict, name: str):
    from transformers import TokenizersBackend

    spec = CLASSES_451[name]
    # Keys the folder sets itself: tokenizer_config.json, and special_tokens_map.json, which both
    # versions read only when tokenizer_config.json has no added_tokens_decoder.
    given = set(cfg)
    if "added_tokens_decoder" not in cfg:
        given |= set(read_json(folder / "special_tokens_map.json"))
    kwargs = {k: v for k, v in spec["specials"].items() if k not in given}
    if "padding_side" not in given and "padding_side" in spec and not saved_padding(folder / "tokenizer.json"):
        kwargs["padding_side"] = spec["padding_side"]
    # TokenizersBackend loads tokenizer.json as it is; the class defaults go in as if the folder
    # had set them, so a default missing from the vocabulary is added as 4.51 adds it.
    tok = TokenizersBackend.from_pretrained(str(folder), local_files_only=True, **kwargs)
    _fix_prefix_space(tok, cfg.get("add_prefix_space", spec.get("add_prefix_space", False)))
    if "bos_eos" in spec:
        add_bos, add_eos = spec["bos_eos"]
        _update_post_processor(tok, bool(cfg.get("add_bos_token", add_bos)), bool(cfg.get("add_eos_token", add_eos)))
    tok.chat_template = _chat_template_451(folder, cfg)
    return tok


# the key "padding" as JSON can write it: each letter as itself or as a \uXXXX escape (any hex case)
_PADDING_KEY = re.compile('"' + "".join(f"(?:{c}|\\\\u(?i:{ord(c):04x}))" for c in "padding") + '"' + r"\s*:\s*")


def saved_padding(path: Path) -> bool:
    """Whether the tokenizer.json at `path` sets padding (a top-level "padding" that is not null),
    without parsing the whole file (2.3 MB of JSON: 0.11 s here) where its text already says:
    no "padding" key anywhere in it, or a single one whose value is null. Else it is parsed. Read
    as read_json reads it (strict UTF-8 text; a file that does not parse has no padding)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, ValueError):
        return False
    keys = [m.end() for m in _PADDING_KEY.finditer(text)]
    if not keys or (len(keys) == 1 and text.startswith("null", keys[0])):
        return False
    try:
        data = json.loads(text)
    except ValueError:
        return False
    return isinstance(data, dict) and bool(data.get("padding"))


def _fix_prefix_space(tok, want) -> None:
    """4.51's PreTrainedTokenizerFast.__init__ resets a top-level pre-tokenizer's add_prefix_space
    (ByteLevel's) to tokenizer_config.json's (else the class's: False, None for Llama);
    transformers 5 leaves it as saved. Where 4.51 failed to rebuild it (None), it kept the saved one."""
    set_prefix_space(tok.backend_tokenizer, want)


def set_prefix_space(backend, want) -> bool:
    """_fix_prefix_space on a tokenizers.Tokenizer; False where the pre-tokenizer could not be rebuilt
    (it is left as saved)."""
    from tokenizers import pre_tokenizers

    pre = backend.pre_tokenizer
    if pre is None or not isinstance(want, bool):
        return True
    state = json.loads(pre.__getstate__())
    if state.get("add_prefix_space", want) == want:
        return True
    kind = getattr(pre_tokenizers, state.pop("type"))
    state["add_prefix_space"] = want
    try:
        backend.pre_tokenizer = kind(**state)
    except Exception:  # noqa: BLE001 - 4.51 ignores any failure here too
        return False
    return True


def _update_post_processor(tok, add_bos: bool, add_eos: bool) -> None:
    """LlamaTokenizerFast / GemmaTokenizerFast / GPTNeoXTokenizerFast.update_post_processor of
    4.51, run by their __init__: the post-processor becomes [BOS] $A [EOS] from the flags,
    whatever tokenizer.json held. Like 4.51 (and unlike transformers 5), a flag without its token
    is an error."""
    bos, eos = tok.bos_token, tok.eos_token
    if bos is None and add_bos:
        raise ValueError("add_bos_token = True but bos_token = None")
    if eos is None and add_eos:
        raise ValueError("add_eos_token = True but eos_token = None")
    # the flags as 4.51 holds them, without transformers 5's setters (which rebuild it again)
    object.__setattr__(tok, "_add_bos_token", add_bos)
    object.__setattr__(tok, "_add_eos_token", add_eos)
    tok.backend_tokenizer.post_processor = bos_eos_processor((bos, tok.bos_token_id) if add_bos else None,
                                                             (eos, tok.eos_token_id) if add_eos else None)


def bos_eos_processor(bos, eos):
    """The post-processor 4.51's update_post_processor builds: [BOS] $A [EOS], bos / eos a (token, id)
    to add or None."""
    from tokenizers import processors

    b = f"{bos[0]}:0 " if bos else ""
    e = f" {eos[0]}:0" if eos else ""
    single = f"{b}$A:0{e}"
    pair = f"{single}{(' ' + bos[0] + ':1') if bos else ''} $B:1{(' ' + eos[0] + ':1') if eos else ''}"
    return processors.TemplateProcessing(single=single, pair=pair, special_tokens=[t for t in (bos, eos) if t])


def _chat_template_451(folder: Path, cfg: dict):
    """The chat template 4.51 exposes: chat_template.jinja when present (it wins over the config),
    else tokenizer_config.json's, a list of named templates becoming a {name: template} dict.
    (transformers 5 also reads additional_chat_templates/, which 4.51 ignores.)"""
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    template = cfg.get("chat_template")
    if isinstance(template, (list, tuple)):
        return {t["name"]: t["template"] for t in template}
    return template

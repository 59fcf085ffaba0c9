"""Synthetic tokenizer folders for the tokenizer-loading tests (tests/test_tokenizer_loading.py):
a byte-level BPE trained on the fly (the `texts` and `backend` fixtures), folders shaped like
published ones (FOLDERS, make_folder, the `folders` fixture), and the ids helpers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

EDGY = ["Hello world!  It's   2024.\n\nWhat are drawers? \u2014 socks & ties.  ", " leading space", "caf\u00e9 x"]
TEMPLATE = "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}{{ eos_token }}\n{% endfor %}"


@pytest.fixture(scope="module")
def texts(data_path):
    from rmbench_fast.inputs.data import load_dataset
    from rmbench_fast.tiny.models import corpus

    return corpus(load_dataset(data_path, limit=4)) + EDGY


@pytest.fixture(scope="module")
def backend(texts):
    """A byte-level BPE over the texts with <s>, </s> (no pad), and a post-processor that adds
    nothing, like Llama-3 / DeepSeek / Qwen tokenizer.json files."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<s>", "</s>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def make_folder(root: Path, name: str, backend: Tokenizer, tokenizer_config: dict, model_type: str,
                special_tokens_map: dict | None = None, pre_tokenizer=None, padding: dict | None = None) -> Path:
    d = root / name
    d.mkdir()
    tok = Tokenizer.from_str(backend.to_str())
    if pre_tokenizer is not None:
        tok.pre_tokenizer = pre_tokenizer
    if padding is not None:  # saved in tokenizer.json's "padding"
        tok.enable_padding(**padding)
    tok.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    (d / "config.json").write_text(json.dumps({"model_type": model_type}))
    if special_tokens_map is not None:
        (d / "special_tokens_map.json").write_text(json.dumps(special_tokens_map))
    return d


SPECIALS = {"bos_token": "<s>", "eos_token": "</s>"}
# name: (tokenizer_config.json, model_type, special_tokens_map.json, pre-tokenizer override, padding)
FOLDERS = {
    # the issue's folder: PreTrainedTokenizerFast under qwen2, no pad (transformers 5 builds Qwen2Tokenizer)
    "qwen2_ptf": ({"tokenizer_class": "PreTrainedTokenizerFast", **SPECIALS, "chat_template": TEMPLATE}, "qwen2"),
    "qwen2_ptf_pad_null": ({"tokenizer_class": "PreTrainedTokenizerFast", **SPECIALS, "pad_token": None}, "qwen2"),
    "qwen2_class": ({"tokenizer_class": "Qwen2Tokenizer", "bos_token": None, "eos_token": "</s>",
                     "pad_token": "</s>", "unk_token": None}, "qwen2"),
    # DeepSeek-style: LlamaTokenizerFast over a byte-level tokenizer.json whose post-processor adds no BOS
    "llama_bos": ({"tokenizer_class": "LlamaTokenizerFast", **SPECIALS, "add_bos_token": True}, "llama"),
    "llama_default": ({"tokenizer_class": "LlamaTokenizer", **SPECIALS}, "llama"),
    "llama_eos": ({"tokenizer_class": "LlamaTokenizerFast", **SPECIALS, "add_bos_token": False,
                   "add_eos_token": True}, "llama"),
    "llama_under_qwen2": ({"tokenizer_class": "LlamaTokenizerFast", **SPECIALS, "add_bos_token": True,
                           "pad_token": "</s>"}, "qwen2"),
    "llama_map": ({"tokenizer_class": "LlamaTokenizerFast"}, "llama", SPECIALS),
    "gemma": ({"tokenizer_class": "GemmaTokenizer", **SPECIALS, "unk_token": None}, "gemma2"),
    "gpt2": ({"tokenizer_class": "GPT2Tokenizer", **SPECIALS, "unk_token": None}, "gpt2"),
    "neox": ({"tokenizer_class": "GPTNeoXTokenizer", **SPECIALS, "unk_token": None, "add_eos_token": True},
             "gpt_neox"),
    "no_class_qwen2": ({**SPECIALS, "pad_token": None, "unk_token": None}, "qwen2"),
    "templates_list": ({"tokenizer_class": "PreTrainedTokenizerFast", **SPECIALS,
                        "chat_template": [{"name": "default", "template": TEMPLATE},
                                          {"name": "tool_use", "template": "{{ messages[0]['content'] }}"}]}, "llama"),
    "prefix_space": ({"tokenizer_class": "PreTrainedTokenizerFast", **SPECIALS}, "llama", None,
                     pre_tokenizers.ByteLevel(add_prefix_space=True)),
    # padding saved in tokenizer.json: its side wins over LlamaTokenizerFast's left
    "llama_padded": ({"tokenizer_class": "LlamaTokenizerFast", **SPECIALS}, "llama", None, None,
                     {"direction": "right", "pad_id": 1, "pad_token": "</s>"}),
}


@pytest.fixture(scope="module")
def folders(tmp_path_factory, backend):
    root = tmp_path_factory.mktemp("toks")
    out = {name: make_folder(root, name, backend, *spec) for name, spec in FOLDERS.items()}
    slow = out["slow_gpt2"] = root / "slow_gpt2"  # slow files only: vocab.json + merges.txt
    slow.mkdir()
    backend.model.save(str(slow))
    (slow / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "GPT2Tokenizer", **SPECIALS}))
    (slow / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    return out


def file_ids(folder, text):
    """The folder's own tokenizer.json, without its post-processor's special tokens."""
    return Tokenizer.from_file(str(folder / "tokenizer.json")).encode(text, add_special_tokens=False).ids


def ids(tok, texts):
    return tok(list(texts), add_special_tokens=True)["input_ids"]

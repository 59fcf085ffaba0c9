"""A family's folder, built once per test module, and its plain reference: the `world` fixture
(the data, the tokenizers shaped like each family's), build(world, name) saving a family of
tests/adapter_families.py under its published config and weight names, and reference(...) reading
the documented score of each sequence alone, from the plain parts, in a loop."""

import json

import numpy as np
import pytest
import torch
from adapter_families import DECODER_CONFIG, FAMILIES, H
from conftest import TEST_TEMPLATE, make_item
from reference import render
from safetensors.torch import save_file
from transformers import (Gemma2Config, Gemma2Model, LlamaConfig, LlamaModel, MistralConfig,
                          MistralModel, PreTrainedTokenizerFast, Qwen2Config, Qwen2Model)

from rmbench_fast.engine.score import ScoreOptions
from rmbench_fast.tiny.adapters import tokenizer, write_code

BACKBONES = {"llama": (LlamaConfig, LlamaModel), "gemma2": (Gemma2Config, Gemma2Model),
             "mistral": (MistralConfig, MistralModel), "qwen2": (Qwen2Config, Qwen2Model)}
QWEN_TEMPLATE = ("<|im_start|>system\nBe brief.<|im_end|>\n{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
                 "{{ m['content'] }}<|im_end|>\n{% endfor %}")
TOKENIZERS = {"tmpl": ("tmpl-reward", TEST_TEMPLATE), "llama": ("llama", None), "qwen": ("qwen", QWEN_TEMPLATE),
              "llama3": ("llama3", None), "gemma": ("gemma", TEST_TEMPLATE)}  # here: (tiny_adapters.tokenizer kind, chat template)


def items():
    out = [make_item(i, d, prompt=f"Q{i} in {d}: " + "why " * (4 * i + 1)) for d in ("chat", "math") for i in range(2)]
    out[1]["chosen"][1] += " with </s> and <unk> inside the text"  # EOS (a pad id) and Starling's read id mid-text
    return out


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("adapters")
    data = root / "data.json"
    data.write_text(json.dumps(items()))
    texts = [json.dumps(x) for x in items()] * 3
    toks = {k: tokenizer(kind, texts, vocab_size=300, chat_template=tmpl) for k, (kind, tmpl) in TOKENIZERS.items()}
    return {"root": root, "data": str(data), "toks": toks, "built": {}}


def build(world, name):
    """The family's folder (built once) and what its reference needs."""
    if name in world["built"]:
        return world["built"][name]
    from rmbench_fast.tiny.models import save_tokenizer

    spec_fn, kind, tok_kind, adapter = FAMILIES[name]
    tok = world["toks"][tok_kind]
    cfg_cls, model_cls = BACKBONES[kind]
    cfg = cfg_cls(vocab_size=len(tok) + 8, hidden_size=H, intermediate_size=32, num_hidden_layers=1,
                  num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=1024, tie_word_embeddings=False,
                  bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                  **({"head_dim": 8} if kind == "gemma2" else {}), **DECODER_CONFIG.get(name, {}))
    if kind == "gemma2":  # the official classes get eager attention (LDL: flash), which softcaps attention
        cfg._attn_implementation = "eager"  # logits; transformers 4.51 gives a bare Gemma2Model SDPA, which does not
    torch.manual_seed(len(name))
    decoder = model_cls(cfg).eval()
    with torch.no_grad():  # weights that tell responses apart
        for p in decoder.parameters():
            p.copy_(torch.randn_like(p) * (p.shape[-1] ** -0.5 if p.dim() > 1 else 0.1) + (1 if p.dim() == 1 else 0))
    spec = spec_fn(tok)
    d = world["root"] / name
    d.mkdir()
    state = {spec.get("prefix", "model.") + k: v for k, v in decoder.state_dict().items()} | spec["heads"]
    save_file({k: v.contiguous() for k, v in state.items()}, d / "model.safetensors", metadata={"format": "pt"})
    named = write_code(d, spec["remote"]) if "remote" in spec else {}  # the modeling file, named in config.json
    saved = {k: v for k, v in cfg.to_dict().items() if k != "_attn_implementation_autoset"}  # as published configs
    (d / "config.json").write_text(json.dumps(saved | spec["extra"] | named))
    for f, heads in spec.get("files", {}).items():
        torch.save(heads, d / f)
    save_tokenizer(tok, d)
    world["built"][name] = (str(d), decoder, spec, tok_kind, adapter)
    return world["built"][name]


def reference(d, decoder, spec, tok_kind, samples):
    """The documented score of every sequence alone: the official ids (the chat template, or tulu;
    special tokens unless the pipeline encodes without; EOS when the official flow sets
    add_eos_token on a Llama tokenizer), the doubled BOS kept, masked or dropped, the decoder, the
    family's read-out."""
    tok = PreTrainedTokenizerFast.from_pretrained(d)  # tokenizer.json as saved (AutoTokenizer 5.x may rebuild it)
    plain, append = spec.get("plain", False), spec.get("append")
    out = {"chosen": np.zeros((len(samples), 3)), "rejected": np.zeros((len(samples), 3))}
    for i, s in enumerate(samples):
        for k in range(3):
            for side in ("chosen", "rejected"):
                ids = tok(render(tok, s.prompt, getattr(s, side)[k]), add_special_tokens=not plain)["input_ids"]
                ids += [tok.eos_token_id] if tok_kind == "llama" and not plain else []
                if append and ids[-1] != tok.convert_tokens_to_ids(append):
                    ids += [tok.convert_tokens_to_ids(append)]
                mask = [1] * len(ids)
                if tok.bos_token_id is not None and ids[:2] == [tok.bos_token_id] * 2:
                    if spec.get("bos") == "mask":
                        mask[0] = 0
                    elif spec.get("bos") == "drop":
                        ids, mask = ids[1:], mask[1:]
                with torch.no_grad():
                    h = decoder(input_ids=torch.tensor([ids]), attention_mask=torch.tensor([mask])).last_hidden_state[0]
                    out[side][i, k] = float(spec["read"](h, ids))
    return out["chosen"], out["rejected"]


def options(d, world, **kw):
    return ScoreOptions(model=d, data=world["data"], progress=False, cache=False, **kw)

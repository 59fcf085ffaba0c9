"""Tiny random-weight models and tokenizers, built offline: the one place the demo, the tests and
the benchmarks get their models from.

The tokenizer is a byte-level BPE trained on the fly with `tokenizers` (every byte encodes, so
any text works); models are Llama-style with random weights.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import torch

# A minimal chat template (Jinja, as in tokenizer_config.json) for tokenizers that carry one.
CHAT_TEMPLATE = ("{% for m in messages %}{{ '<|' + m['role'] + '|>\n' + m['content'] + eos_token + '\n' }}"
                 "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}")


def corpus(samples) -> list[str]:
    """Every prompt and response of `samples` (data.Sample): text to train a tokenizer on."""
    return [s.prompt for s in samples] + [r for s in samples for r in s.chosen + s.rejected]


def train_tokenizer(texts, vocab_size: int = 512, chat_template: str | None = None,
                    tokenizer_class: str = "PreTrainedTokenizerFast", pad: bool = False):
    """A byte-level BPE tokenizer with <s> (BOS, prepended by the post-processor) and </s> (EOS);
    a pad token only when `pad`. `tokenizer_class` is what tokenizer_config.json will name. Like
    real decoder tokenizers it returns no token_type_ids."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<s>", "</s>"] + (["<pad>"] if pad else [])
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(list(texts), trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", tok.token_to_id("<s>"))])
    out = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                  pad_token="<pad>" if pad else None,
                                  model_input_names=["input_ids", "attention_mask"])
    if chat_template is not None:
        out.chat_template = chat_template
    out._rmbench_class = tokenizer_class
    return out


def save_tokenizer(tokenizer, dest) -> None:
    """Save, naming a class that both transformers 4.x and 5.x can load."""
    dest = Path(dest)
    tokenizer.save_pretrained(dest)
    cfg_path = dest / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["tokenizer_class"] = getattr(tokenizer, "_rmbench_class", "PreTrainedTokenizerFast")
    cfg_path.write_text(json.dumps(cfg, indent=2))


def llama_config(vocab_size: int, hidden: int = 64, layers: int = 2, heads: int = 4, kv_heads: int | None = None,
                 intermediate: int | None = None, max_positions: int = 4096, **extra):
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=layers,
                       num_attention_heads=heads, num_key_value_heads=kv_heads or heads,
                       intermediate_size=intermediate or 4 * hidden, max_position_embeddings=max_positions,
                       bos_token_id=0, eos_token_id=1, tie_word_embeddings=False, **extra)


def build_model(kind: str, config, seed: int):
    """kind "rm": LlamaForSequenceClassification with one label; "lm": LlamaForCausalLM."""
    from transformers import LlamaForCausalLM, LlamaForSequenceClassification

    torch.manual_seed(seed)
    if kind == "rm":
        config.num_labels = 1
        model = LlamaForSequenceClassification(config)
        # a visible head: default init gives logits too small to tell apart
        torch.nn.init.normal_(model.score.weight, std=1.0)
    else:
        model = LlamaForCausalLM(config)
    return model.eval()


def save_model(model, tokenizer, dest) -> Path:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # no "Writing model shards" bars for tiny models
    dest = Path(dest)
    model.save_pretrained(dest)
    save_tokenizer(tokenizer, dest)
    return dest


TRIO = {"rm": "rm", "policy": "lm", "reference": "lm"}  # folder -> build_model kind


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def readable(folder) -> None:
    """The folder and everything under it with the modes of ordinary files (0666 / 0777 less the
    umask: 0644 / 0755 under the usual 022): a temporary folder is made 0700, and safetensors writes
    its file 0600, which other users (a shared cache, a container's other user) could not read."""
    mask = _umask()
    root = Path(folder)
    root.chmod(0o777 & ~mask)
    for p in root.rglob("*"):
        p.chmod((0o777 if p.is_dir() else 0o666) & ~mask)


def build_trio(dest, tokenizer, dtype=None, seeds: tuple[int, int, int] = (0, 1, 2), **config) -> dict[str, Path]:
    """A reward model, a DPO policy and a reference sharing `tokenizer` (llama_config(**config),
    vocabulary from the tokenizer unless given), under dest/{rm,policy,reference}. Built once:
    into a temp folder renamed into place, so a half-built folder is never used."""
    dest = Path(dest)
    paths = {name: dest / name for name in TRIO}
    if (dest / "COMPLETE").is_file():
        return paths
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    try:
        config.setdefault("vocab_size", len(tokenizer))
        for (name, kind), seed in zip(TRIO.items(), seeds):
            model = build_model(kind, llama_config(**config), seed)
            save_model(model if dtype is None else model.to(dtype), tokenizer, tmp / name)
        (tmp / "COMPLETE").write_text("ok\n")
        readable(tmp)
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(tmp, dest)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return paths

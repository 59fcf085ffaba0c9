"""Tiny instances of the reward-model families whose code ships with the model, for tests and
benchmarks: the one place the adapter tests (tests/adapter_world.py) and benchmarks/peer/adapters_equivalence.py get
them from (plain models come from tiny.py).

- `REMOTE`: per family, a minimal modeling file of the published architecture (Eurus, Ziya,
  InternLM2, WorldPM, ArmoRM) on a transformers decoder, with the published class name, head names
  and read-out; `write_code` writes it into a model folder and returns the config.json fields that
  name it (architectures, auto_map), `load_class` imports it from there to build a model.
- `tokenizer`: byte-level BPE tokenizers shaped like each family's real one (special tokens, BOS,
  padding side, chat template), with Llama-3's ids where the gating families read them.

Nothing heavy is imported until a function runs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

# <|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n: where QRM and ArmoRM read their gating
LLAMA3_HEADER = [128009, 128006, 78191, 128007, 271]

# ---- tokenizers

TMPL = "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}{{ eos_token }}\n{% endfor %}"
LLAMA3_TMPL = ("{% for m in messages %}{% set c = '<|start_header_id|>' + m['role'] + '<|end_header_id|>\n\n' + "
               "m['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set c = bos_token + c %}{% endif %}"
               "{{ c }}{% endfor %}")
QWEN_TMPL = ("{% if messages[0]['role'] != 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
             "{% endif %}{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}")
TOKENIZERS = {  # kind: (special tokens, BOS, tokenizer arguments, chat template)
    "tmpl": (("<s>", "</s>"), "<s>", dict(eos_token="</s>"), TMPL),
    "tmpl-left": (("<s>", "</s>"), "<s>", dict(eos_token="</s>", padding_side="left"), TMPL),
    "tmpl-reward": (("<s>", "</s>", "<|reward|>"), "<s>", dict(eos_token="</s>"), TMPL),  # InternLM2's reward token
    # no EOS inside the texts and no pad token: EOS pads (right), and reads stop at the padding
    "tmpl-noeos": (("<s>", "</s>"), "<s>", dict(eos_token="</s>"), TMPL.replace("{{ eos_token }}", "")),
    "llama": (("<unk>", "<s>", "</s>"), "<s>", dict(eos_token="</s>", unk_token="<unk>"), None),
    "yi": (("<unk>", "<|startoftext|>", "<|endoftext|>"), "<|startoftext|>",
           dict(eos_token="<|endoftext|>", unk_token="<unk>", pad_token="<unk>"), None),
    "gemma": (("<pad>", "<eos>", "<bos>"), "<bos>", dict(eos_token="<eos>", pad_token="<pad>"), TMPL),
    "qwen": (("<|endoftext|>", "<|im_start|>", "<|im_end|>"), None,
             dict(eos_token="<|im_end|>", pad_token="<|endoftext|>"), QWEN_TMPL),
    "llama3": ((), "<|begin_of_text|>", dict(eos_token="<|eot_id|>", pad_token="<|pad|>"), LLAMA3_TMPL),
}


def tokenizer(kind: str, texts, vocab_size: int, chat_template: str | None = None):
    """A byte-level BPE tokenizer trained on `texts`, shaped like the family's real one (TOKENIZERS;
    `chat_template` replaces the kind's). tokenizer_config.json will name LlamaTokenizerFast for the
    Llama and Yi kinds (tiny.save_tokenizer), so that pipelines that check the class see one."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    specials, bos, kw, template = TOKENIZERS[kind]
    t = Tokenizer(models.BPE())
    t.pre_tokenizer, t.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
    t.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(specials),
                                                     show_progress=False,
                                                     initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    if kind == "llama3":
        t = llama3_ids(t)
    if bos:
        t.post_processor = processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
                                                         special_tokens=[(bos, t.token_to_id(bos))])
    tok = PreTrainedTokenizerFast(tokenizer_object=t, bos_token=bos, model_input_names=["input_ids", "attention_mask"],
                                  **kw)
    tok.chat_template = chat_template or template
    tok._rmbench_class = "LlamaTokenizerFast" if kind in ("llama", "yi") else "PreTrainedTokenizerFast"
    return tok


def llama3_ids(trained):
    """The trained BPE re-numbered so that Llama-3's ids hold: "\\n\\n" 271, "assistant" 78191 (both
    added tokens, so the header always tokenizes to them), specials at 128000+, pad 128256."""
    from tokenizers import AddedToken, Tokenizer

    data = json.loads(trained.to_str())
    fixed = {271: "\n\n", 78191: "assistant", 128000: "<|begin_of_text|>", 128001: "<|end_of_text|>",
             128006: "<|start_header_id|>", 128007: "<|end_header_id|>", 128009: "<|eot_id|>", 128256: "<|pad|>"}
    free = (i for i in range(128257) if i not in fixed)
    vocab = {tok: next(free) for tok in sorted(data["model"]["vocab"], key=data["model"]["vocab"].get)
             if tok not in fixed.values()}
    vocab.update({f"<|reserved_{i}|>": i for i in free})
    vocab.update({v: k for k, v in fixed.items()})
    data["model"]["vocab"], data["added_tokens"] = vocab, []
    t = Tokenizer.from_str(json.dumps(data))
    t.add_tokens([AddedToken(s, normalized=False) for s in ("\n\n", "assistant")])
    t.add_special_tokens([AddedToken(fixed[i], normalized=False, special=True) for i in fixed if i >= 128000])
    assert t.token_to_id("assistant") == 78191 and t.token_to_id("<|pad|>") == 128256
    return t


# ---- the model's own code: minimal versions of the published classes, on a transformers decoder

HEADER = """
import torch, torch.nn as nn
from transformers import {decoder}Model, PreTrainedModel, {decoder}Config
from transformers.modeling_outputs import SequenceClassifierOutputWithPast
def last(mask):  # the last attended token
    return mask.long().cumsum(1).argmax(1)
def before_pad(ids, pad):  # just before the first pad id, else the last column
    return (torch.eq(ids, pad).int().argmax(-1) - 1) % ids.shape[-1]
class Base(PreTrainedModel):
    config_class = {decoder}Config
    base_model_prefix = "model"
    def __init__(self, config):
        super().__init__(config)
        self.model = {decoder}Model(config)
        self.heads(config)
        self.post_init()
    def hidden(self, input_ids, attention_mask):
        return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
"""


@dataclass(frozen=True)
class Remote:
    module: str  # the modeling file, without .py
    cls: str  # the published class, named in config.json
    auto: str  # the auto class auto_map names it under
    decoder: str  # the transformers decoder: {decoder}Model, {decoder}Config
    source: str  # the class, after HEADER


REMOTE = {
    "eurus": Remote("modeling_eurus_rm", "EurusRewardModel", "AutoModel", "Mistral", """
class EurusRewardModel(Base):  # regression_head at the last attended token, [B, 1]
    def heads(self, c):
        self.regression_head = nn.Linear(c.hidden_size, 1, bias=False)
    def forward(self, input_ids=None, attention_mask=None, **kw):
        r = self.regression_head(self.hidden(input_ids, attention_mask)).squeeze(-1)
        return torch.gather(r, 1, last(attention_mask).view(-1, 1))
"""),
    "ziya": Remote("modeling_llama_rm", "LlamaRewardModel", "AutoModelForSequenceClassification", "Llama", """
class LlamaRewardModel(Base):  # Ziya: value_head on the last hidden state at the last attended token, [B]
    def heads(self, c):
        self.value_head = nn.Linear(c.hidden_size, 1, bias=False)
    def forward(self, input_ids=None, attention_mask=None, **kw):
        h = self.model(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True).hidden_states[-1]
        return self.value_head(h[torch.arange(h.shape[0]), last(attention_mask)]).squeeze(-1)
"""),
    "internlm2": Remote("modeling_internlm2", "InternLM2ForRewardModel", "AutoModel", "Llama", """
class InternLM2ForRewardModel(Base):  # v_head at the last attended token, which must be the reward token
    def heads(self, c):
        self.v_head, self.reward_token_id = nn.Linear(c.hidden_size, 1, bias=False), c.reward_token_id
    def forward(self, input_ids=None, attention_mask=None, **kw):
        end = last(attention_mask).view(-1, 1)
        assert (torch.gather(input_ids, 1, end) == self.reward_token_id).all()
        r = self.v_head(self.hidden(input_ids, attention_mask)).squeeze(-1)
        return SequenceClassifierOutputWithPast(logits=torch.gather(r, 1, end))
"""),
    "worldpm": Remote("modeling_qwen2_rm", "Qwen2ForRewardModel", "AutoModel", "Qwen2", """
class Qwen2ForRewardModel(Base):  # WorldPM: two-layer score head just before the first pad id
    def heads(self, c):
        self.score = nn.Sequential(nn.Linear(c.hidden_size, c.hidden_size), nn.ReLU(), nn.Linear(c.hidden_size, 1))
    def forward(self, input_ids=None, attention_mask=None, **kw):
        logits = self.score(self.hidden(input_ids, attention_mask))
        at = before_pad(input_ids, self.config.pad_token_id)
        return SequenceClassifierOutputWithPast(logits=logits[torch.arange(input_ids.shape[0]), at])
"""),
    "armorm": Remote("modeling_custom", "LlamaForRewardModelWithGating", "AutoModelForSequenceClassification", "Llama",
                     f"""
from dataclasses import dataclass
from typing import Optional
from transformers.utils import ModelOutput
PATTERN = {LLAMA3_HEADER}
@dataclass
class Out(ModelOutput):
    rewards: Optional[torch.FloatTensor] = None
    score: Optional[torch.FloatTensor] = None
    logits: Optional[torch.FloatTensor] = None
class LlamaForRewardModelWithGating(Base):  # ArmoRM: objectives mixed by a gating network read at the header
    def heads(self, c):
        k, h = c.num_objectives, c.gating_hidden_dim
        self.regression_layer = nn.Linear(c.hidden_size, k, bias=False)
        self.reward_transform_matrix = nn.Parameter(torch.eye(k), requires_grad=False)
        self.gating = nn.Module()
        self.gating.layers = nn.ModuleList([nn.Linear(c.hidden_size, h), nn.Linear(h, h), nn.Linear(h, h), nn.Linear(h, k)])
        self.gating.logit_scale = nn.Parameter(torch.ones(1))
    def forward(self, input_ids=None, attention_mask=None, **kw):
        h, b = self.hidden(input_ids, attention_mask), torch.arange(input_ids.shape[0])
        x = h[b, [max(j for j in range(len(r) - 4) if r[j:j + 5] == PATTERN) for r in input_ids.tolist()]]
        for i, layer in enumerate(self.gating.layers):
            x = layer(x) if i == 3 else torch.relu(layer(x))
        gate = torch.softmax(x / 10, dim=1) * self.gating.logit_scale[0]
        rewards = self.regression_layer(h[b, before_pad(input_ids, self.config.pad_token_id)]) @ self.reward_transform_matrix
        score = (gate * rewards).sum(1)
        return Out(rewards=rewards, score=score, logits=score)
"""),
}


def code(family: str) -> str:
    """The text of `family`'s modeling file."""
    r = REMOTE[family]
    return HEADER.format(decoder=r.decoder) + r.source


def write_code(dest, family: str) -> dict:
    """Write `family`'s modeling file into the model folder `dest`; return the config.json fields
    that name it (architectures, auto_map), which the caller adds to the config it saves."""
    r = REMOTE[family]
    (Path(dest) / f"{r.module}.py").write_text(code(family))
    return {"architectures": [r.cls], "auto_map": {r.auto: f"{r.module}.{r.cls}"}}


def load_class(dest, family: str):
    """`family`'s class, imported from the modeling file written into `dest` (to build a model)."""
    import importlib.util

    r = REMOTE[family]
    spec = importlib.util.spec_from_file_location(r.module, Path(dest) / f"{r.module}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, r.cls)

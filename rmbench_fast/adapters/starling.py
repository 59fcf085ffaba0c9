"""Starling reward models: a Llama decoder (`transformer.*`) and a linear `v_head`, read just
before the first token with a given id.

- Nexusflow/Starling-RM-34B: rewardbench's class reads before the first token with id 0 (its
  PAD_ID). Its config.json still says LlamaForSequenceClassification, so it is recognised by its
  weight names (`transformer.*`, `v_head.weight`), never by architecture.
- berkeley-nest/Starling-RM-7B-alpha: the model card's GPTRewardModel (Llama-2-7b-chat with a
  v_head) reads before the first `tokenizer(unk_token)["input_ids"][0]`, which for Llama's
  tokenizer is the BOS (1) it prepends, not unk (0). Its checkpoint may also hold the same decoder a
  second time as `model.model.*` plus an unused `model.lm_head`: those names are ignored.

The official pipelines read that position in the padded batch, so the score depends on the batch
whenever the pipeline pads with another id (the 7B always: BOS sits at position 0, so every row
shorter than its batch's longest reads a padding position). rmbench-fast reads each sequence as if
it were alone (no padding): the last token before its own first such id, else its last token. That
is the official score wherever the official one does not depend on the batch.
"""

from __future__ import annotations

import functools
from functools import partial

import torch
import torch.nn as nn

from ..scorers.rm import official_pad_ids
from .base import Adapter
from .pooling import rows
from .scoring import QUANTIZED, AdapterScorer, load_own, scorer_for


@functools.cache
def model_class():
    """StarlingRewardModel, built on first use: its transformers base class imports the model code (seconds),
    which a run whose passes all come from the store never needs."""
    from transformers import LlamaModel, LlamaPreTrainedModel

    class StarlingRewardModel(LlamaPreTrainedModel):
        base_model_prefix = "transformer"
        _keys_to_ignore_on_load_unexpected = [r"^model\."]  # the 7B's second copy of its decoder, and its LM head

        def __init__(self, config):
            super().__init__(config)
            self.transformer = LlamaModel(config)
            self.v_head = nn.Linear(config.hidden_size, 1, bias=False)
            self.read_id = 0  # the scorer sets it: read before the first token with this id
            self.post_init()

        def get_input_embeddings(self):
            return self.transformer.embed_tokens

        def forward(self, input_ids, attention_mask):
            h = self.transformer(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            n = attention_mask.sum(1)  # each row alone: its own length, no padding
            hit = (input_ids == self.read_id) & attention_mask.bool()
            first = torch.where(hit.any(1), hit.int().argmax(1), n)
            return self.v_head(rows(h, (first - 1) % n)).squeeze(-1)  # [B]

    return StarlingRewardModel


class StarlingScorer(AdapterScorer):
    read_id = 0

    def extra_key(self):
        return (self.read_id,)


def load(scorer, *args):
    model = load_own(model_class(), scorer, *args)
    model.read_id = scorer.read_id
    return model


def make_scorer(o, config, tokenizer, device, tokenizer_path, seven_b=False):
    adapter = SEVEN_B if seven_b else ADAPTER
    if seven_b:  # GPTRewardModel's PAD_ID, from the tokenizer it is run with
        read_id = tokenizer(tokenizer.unk_token)["input_ids"][0] if tokenizer.unk_token is not None else 0
    else:
        read_id = 0
    tok_pad = official_pad_ids(tokenizer, config)[0]
    warn = ()
    if tok_pad != read_id:
        warn = (f"the official pipeline pads with id {tok_pad} but reads before the first id {read_id}, so its score "
                "depends on the batch (a shorter row can read a padding position); rmbench-fast scores each sequence "
                "as if it were alone",)
    s = scorer_for(adapter, o, config, tokenizer, load, StarlingScorer, quantized=not seven_b, warnings=warn)
    s.read_id = int(read_id)
    return s


BATCH = ("the official pipeline reads in the padded batch, which depends on the batch unless it pads with the read "
         "id; rmbench-fast reads each sequence as if alone")
ADAPTER = Adapter(
    name="starling",
    summary="Starling-RM-34B: Llama decoder (transformer.*) + v_head, read before the first token id 0",
    official_names=("Nexusflow/Starling-RM-34B",),
    weights=("transformer.", "v_head.weight"),
    make_scorer=make_scorer,
    notes=(BATCH, QUANTIZED),
)
SEVEN_B = Adapter(
    name="starling-7b",
    summary="Starling-RM-7B-alpha: Llama-2 decoder + v_head, read before the first token id tokenizer(unk)[0] (BOS)",
    official_names=("berkeley-nest/Starling-RM-7B-alpha",),
    make_scorer=partial(make_scorer, seven_b=True),
    notes=(BATCH + "; the 7B's read id is the BOS, so officially every row shorter than its batch's longest reads a "
           "padding position",
           "the official builder only accepts the exact hub name and downloads Llama-2-7b-chat; here the folder "
           "needs the Llama config and the checkpoint as safetensors (or pytorch_model.bin with "
           "--allow-pickle-weights)"),
)
ADAPTERS = [ADAPTER, SEVEN_B]

"""INF-ORM (infly/INF-ORM-Llama3.1-70B): a Llama decoder (`model.*`) with a two-layer head
`score` = Linear(h, h) + ReLU + Linear(h, 1), read just before the first pad id (the config's,
which run_rm.py sets to the tokenizer's pad, else EOS: a pad id that occurs in the text moves the
read-out there, officially and here). Scored through RewardBenchPipeline (a doubled BOS gets
attention 0). The official entry pins bfloat16.
"""

from __future__ import annotations

import functools
import torch
import torch.nn as nn

from .base import Adapter
from .pooling import before_first, rows
from .scoring import load_own, scorer_for


@functools.cache
def model_class():
    """INFORMForSequenceClassification, built on first use: its transformers base class imports the model code (seconds),
    which a run whose passes all come from the store never needs."""
    from transformers import LlamaModel, LlamaPreTrainedModel

    class INFORMForSequenceClassification(LlamaPreTrainedModel):
        def __init__(self, config):
            super().__init__(config)
            self.model = LlamaModel(config)
            h = config.hidden_size
            self.score = nn.Sequential(nn.Linear(h, h), nn.ReLU(), nn.Linear(h, 1))
            self.post_init()

        def get_input_embeddings(self):
            return self.model.embed_tokens

        def forward(self, input_ids, attention_mask):
            h = self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            return self.score(rows(h, before_first(input_ids, self.config.pad_token_id))).squeeze(-1)  # [B]

    return INFORMForSequenceClassification


def load(scorer, *args):
    return load_own(model_class(), scorer, *args)


def make_scorer(o, config, tokenizer, device, tokenizer_path):
    return scorer_for(ADAPTER, o, config, tokenizer, load, bos="mask", quantized=False, dtype=torch.bfloat16)


ADAPTER = Adapter(
    name="inf-orm",
    summary="INF-ORM (Llama + two-layer score head), read before the first pad id, as RewardBenchPipeline runs it",
    official_names=("infly/INF-ORM-Llama3.1-70B",),
    architectures=("INFORMForSequenceClassification",),
    weights=("score.0.weight", "score.2.weight"),
    make_scorer=make_scorer,
    notes=("the official entry pins bfloat16", "read before the first pad id (a pad id inside the text moves it)",
           "a doubled BOS gets attention 0 (RewardBenchPipeline)"),
)
ADAPTERS = [ADAPTER]

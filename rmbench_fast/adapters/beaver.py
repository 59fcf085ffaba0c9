"""beaver (PKU-Alignment/beaver-7b-v*-reward / -cost): safe-rlhf's LlamaForScore.

A Llama decoder (`model.*`) and a linear `score_head` (score_dim outputs, bias per config), read at
the last attended token, in float32. With `do_normalize` the score is normalised by the stored
statistics (`normalizer.mean` / `normalizer.var` buffers, else config.mean / config.var): affine
(x - mean) / (std + 1e-8) for score_type reward, x / (std + 1e-8) for cost, none for critic.
The cost models' official pipeline (BeaverCostPipeline) negates the score, so that a safer
response scores higher: the `beaver-cost` adapter does too. Doubled BOS kept.
"""

from __future__ import annotations

import functools
from functools import partial

import torch
import torch.nn as nn

from ..errors import UsageError
from .base import Adapter, weight_names
from .pooling import last_attended, rows
from .scoring import QUANTIZED, load_own, scorer_for

EPS = 1e-8


class Normalizer(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("var", torch.ones(dim))
        self.register_buffer("count", torch.zeros(1, dtype=torch.long))


@functools.cache
def model_class():
    """LlamaForScore, built on first use: its transformers base class imports the model code (seconds),
    which a run whose passes all come from the store never needs."""
    from transformers import LlamaModel, LlamaPreTrainedModel

    class LlamaForScore(LlamaPreTrainedModel):
        # checkpoints saved without the statistics fall back to config.mean / config.var (see load)
        _keys_to_ignore_on_load_missing = [r"^normalizer\."]

        def __init__(self, config):
            super().__init__(config)
            self.model = LlamaModel(config)
            dim = getattr(config, "score_dim", 1)
            self.score_head = nn.Linear(config.hidden_size, dim, bias=getattr(config, "bias", False))
            self.normalizer = Normalizer(dim)
            self.post_init()

        def get_input_embeddings(self):
            return self.model.embed_tokens

        def normalize(self, x):
            kind = getattr(self.config, "score_type", "reward")
            std = self.normalizer.var.float().sqrt()
            if kind == "reward":
                return (x - self.normalizer.mean.float()) / (std + EPS)
            return x / (std + EPS) if kind == "cost" else x

        def forward(self, input_ids, attention_mask):
            h = self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            scores = self.score_head(rows(h, last_attended(attention_mask))).float()  # [B, score_dim]
            return self.normalize(scores) if getattr(self.config, "do_normalize", False) else scores

    return LlamaForScore


def load(scorer, path, *args):
    model = load_own(model_class(), scorer, path, *args)
    if not any(n.startswith("normalizer.") for n in weight_names(path)):  # statistics from the config
        dim = model.normalizer.mean.shape
        mean, var = getattr(model.config, "mean", None), getattr(model.config, "var", None)
        with torch.no_grad():
            model.normalizer.mean.copy_(torch.zeros(dim) if mean is None else torch.as_tensor(mean).reshape(dim))
            model.normalizer.var.copy_(torch.ones(dim) if var is None else torch.as_tensor(var).reshape(dim))
    return model


def make_scorer(o, config, tokenizer, device, tokenizer_path, cost=False):
    if getattr(config, "score_dim", 1) != 1:
        raise UsageError(f"model {o.model}: its score head has score_dim {config.score_dim}; RM-Bench needs one "
                         "score per response")
    return scorer_for(COST if cost else REWARD, o, config, tokenizer, load, sign=-1.0 if cost else 1.0, quantized=True)


def is_cost(config) -> bool:
    return getattr(config, "score_type", "reward") == "cost"



REWARD = Adapter(
    name="beaver",
    summary="beaver reward models (safe-rlhf LlamaForScore): score_head at the last attended token",
    official_names=("PKU-Alignment/beaver-7b-v1.0-reward", "PKU-Alignment/beaver-7b-v2.0-reward"),
    architectures=("LlamaForScore",), accepts=lambda c: not is_cost(c), weights=("score_head.weight",),
    make_scorer=make_scorer, notes=(QUANTIZED,),
)
COST = Adapter(
    name="beaver-cost",
    summary="beaver cost models (safe-rlhf LlamaForScore, score_type cost): the score negated, as the official "
            "BeaverCostPipeline does",
    official_names=("PKU-Alignment/beaver-7b-v1.0-cost", "PKU-Alignment/beaver-7b-v2.0-cost"),
    architectures=("LlamaForScore",), accepts=is_cost, weights=("score_head.weight",),
    make_scorer=partial(make_scorer, cost=True),
    notes=("scores are the negated cost (higher = safer), as BeaverCostPipeline returns them", QUANTIZED),
)
ADAPTERS = [REWARD, COST]

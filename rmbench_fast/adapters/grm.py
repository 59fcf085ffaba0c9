"""GRM (Ray2333/GRM-*-sftreg): a decoder with an MLP value head, read at the last token.

The published checkpoints hold `model.*` (the base decoder of any causal-LM config: Llama, Gemma,
Gemma-2) and `v_head.summary.*`. The head is `vhead_num_layers` x (Linear(h, vhead_num_neurons) +
ReLU) then Linear(., 1), or a single Linear(h, 1) when `vhead_layer_type` is "linear" (config
fields, defaults mlp / 1024 / 1). The official class (rewardbench's GRewardModel) reads the last
token: `mask.sum(-1) - 1` with right padding, the last column with left padding - the same token.
It subclasses a bare PreTrainedModel, so transformers gives it eager attention, which (unlike
transformers 4.51's SDPA) applies Gemma-2's attention-logit softcapping; ours is built the same
way. The pipeline (GRMPipeline) keeps a doubled BOS.
"""

from __future__ import annotations

import functools
import torch.nn as nn

from .base import Adapter
from .pooling import last_attended, rows
from .scoring import load_own, scorer_for


class ValueHead(nn.Module):
    def __init__(self, config):
        super().__init__()
        h = config.hidden_size
        if getattr(config, "vhead_layer_type", "mlp") == "linear":
            self.summary = nn.Linear(h, 1)
            return
        width, layers = getattr(config, "vhead_num_neurons", 1024), getattr(config, "vhead_num_layers", 1)
        mods = []
        for _ in range(layers):
            mods += [nn.Linear(h, width), nn.ReLU()]
            h = width
        self.summary = nn.Sequential(*mods, nn.Linear(h, 1))

    def forward(self, x):
        return self.summary(x)


@functools.cache
def model_class():
    """GRewardModel, built on first use: its transformers base class imports the model code (seconds),
    which a run whose passes all come from the store never needs."""
    from transformers import AutoConfig, AutoModel, PreTrainedModel

    class GRewardModel(PreTrainedModel):
        config_class = AutoConfig  # any decoder whose config AutoModel knows
        base_model_prefix = "model"

        def __init__(self, config):
            super().__init__(config)
            self.model = AutoModel.from_config(config)
            self.v_head = ValueHead(config)
            self.post_init()

        def get_input_embeddings(self):
            return self.model.get_input_embeddings()

        def forward(self, input_ids, attention_mask):
            h = self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            last = rows(h, last_attended(attention_mask))
            return self.v_head(last.to(next(self.v_head.parameters()).dtype)).squeeze(-1)  # [B]

    return GRewardModel


def load(scorer, *args):
    return load_own(model_class(), scorer, *args)


def make_scorer(o, config, tokenizer, device, tokenizer_path):
    return scorer_for(ADAPTER, o, config, tokenizer, load, quantized=False)


ADAPTER = Adapter(
    name="grm",
    summary="GRM reward models: a decoder with an MLP value head (v_head.summary), read at the last token",
    official_names=("Ray2333/GRM-Gemma-2B-sftreg", "Ray2333/GRM-llama3-8B-sftreg", "Ray2333/GRM-Gemma2-2B-sftreg",
                    "Ray2333/GRM-llama3.2-3B-sftreg"),
    architectures=("GRewardModel",),
    weights=("v_head.summary.",),
    make_scorer=make_scorer,
    notes=("a doubled BOS is kept, as GRMPipeline keeps it",
           "eager attention, as the official class gets (Gemma-2 softcapping applies)"),
)
ADAPTERS = [ADAPTER]

"""OpenBMB reward models: UltraRM-13b and Eurus-RM-7b, both a decoder with a linear
`regression_head`, read at the last attended token (OpenBMBPipeline keeps a doubled BOS).

UltraRM's class is rewardbench's (Llama): ours re-implements it. It subclasses a bare
PreTrainedModel, so transformers gives it eager attention; ours too. Eurus (Mistral) ships its own
class (EurusRewardModel, config.json auto_map AutoModel), which runs under --trust-remote-code.
"""

from __future__ import annotations

import functools
from functools import partial

import torch.nn as nn

from .base import Adapter
from .pooling import last_attended, rows
from .scoring import QUANTIZED, load_own, load_remote, require_remote_code, scorer_for


@functools.cache
def model_class():
    """LlamaRewardModel, built on first use: its transformers base class imports the model code (seconds),
    which a run whose passes all come from the store never needs."""
    from transformers import LlamaConfig, LlamaModel, PreTrainedModel

    class LlamaRewardModel(PreTrainedModel):
        config_class = LlamaConfig
        base_model_prefix = "model"

        def __init__(self, config):
            super().__init__(config)
            self.model = LlamaModel(config)
            self.regression_head = nn.Linear(config.hidden_size, 1, bias=False)
            self.post_init()

        def get_input_embeddings(self):
            return self.model.embed_tokens

        def forward(self, input_ids, attention_mask):
            h = self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            return self.regression_head(rows(h, last_attended(attention_mask))).squeeze(-1)  # [B]

    return LlamaRewardModel


def load(scorer, *args):
    return load_own(model_class(), scorer, *args)


def make_ultrarm(o, config, tokenizer, device, tokenizer_path):
    return scorer_for(ULTRARM, o, config, tokenizer, load, quantized=True)


def make_eurus(o, config, tokenizer, device, tokenizer_path):
    require_remote_code(o, config, EURUS.name, "AutoModel")
    return scorer_for(EURUS, o, config, tokenizer, partial(load_remote, "AutoModel"), quantized=True)


ULTRARM = Adapter(
    name="ultrarm",
    summary="UltraRM (Llama + regression_head), read at the last attended token",
    official_names=("openbmb/UltraRM-13b",),
    architectures=("LlamaRewardModel",),
    accepts=lambda c: not getattr(c, "auto_map", None) and getattr(c, "model_type", None) == "llama",
    weights=("regression_head.weight",),
    make_scorer=make_ultrarm,
    notes=("eager attention, as the official class gets", QUANTIZED),
)
EURUS = Adapter(
    name="eurus",
    summary="Eurus-RM (Mistral + regression_head; the model's own code, --trust-remote-code), last attended token",
    official_names=("openbmb/Eurus-RM-7b",),
    architectures=("EurusRewardModel",),
    auto_map=("EurusRewardModel",),
    make_scorer=make_eurus, remote_code=True,
    notes=("runs the model's own code (auto_map AutoModel) under --trust-remote-code", QUANTIZED),
)
ADAPTERS = [ULTRARM, EURUS]

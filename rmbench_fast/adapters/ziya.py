"""Ziya-LLaMA-7B-Reward: the model's own class (a Llama with a `value_head`, config.json auto_map
AutoModelForSequenceClassification -> ...LlamaRewardModel), run under --trust-remote-code. Its
forward returns the reward of each sequence (one per row, at the last attended token); the official
ZiyaPipeline passes the tokenizer's batch (doubled BOS kept) and returns that tensor as it is.

The official pipeline always runs the model in float16 (`model.eval().half().cuda()`), whatever
--torch_dtype says: --compat official on CUDA loads it in float16 here too.
"""

from __future__ import annotations

from functools import partial

import torch

from .base import Adapter
from .scoring import load_remote, require_remote_code, scorer_for

AUTO = "AutoModelForSequenceClassification"


def make_scorer(o, config, tokenizer, device, tokenizer_path):
    require_remote_code(o, config, ADAPTER.name, AUTO)
    return scorer_for(ADAPTER, o, config, tokenizer, partial(load_remote, AUTO), quantized=False,
                      dtype=torch.float16)


ADAPTER = Adapter(
    name="ziya",
    summary="Ziya-LLaMA reward model (the model's own LlamaRewardModel, --trust-remote-code): its returned reward",
    official_names=("IDEA-CCNL/Ziya-LLaMA-7B-Reward",),
    auto_map=("LlamaRewardModel",),
    make_scorer=make_scorer, remote_code=True,
    notes=("runs the model's own code (auto_map AutoModelForSequenceClassification) under --trust-remote-code",
           "the official pipeline casts the model to float16 whatever the requested dtype"),
)
ADAPTERS = [ADAPTER]

"""WorldPM (Qwen/WorldPM-72B): the model's own class (Qwen2ForRewardModel, config.json auto_map
AutoModel), run under --trust-remote-code; it reads the score just before the first pad id.

The official WorldPMPipeline encodes without special tokens (the chat template carries them),
truncates to 2048 tokens (from the left, as run_rm.py sets it; --compat official here), pads on the
tokenizer's side and passes input ids only, no attention mask, then takes the output's first
value. Right padding (Qwen's) with the pad id never reaches a real token of a causal decoder, so
the score does not depend on the batch; a tokenizer that pads on the left would shift every
shorter row officially. Here rows are always right-padded and passed without a mask, as officially.
The Qwen template's default system prompt is kept, as rewardbench 0.1.4 keeps it.
"""

from __future__ import annotations

from functools import partial

import torch

from .base import Adapter
from .scoring import PlainTextScorer, load_remote, require_remote_code, scorer_for


def make_scorer(o, config, tokenizer, device, tokenizer_path):
    require_remote_code(o, config, ADAPTER.name, "AutoModel")
    warn = ()
    if getattr(tokenizer, "padding_side", "right") == "left":
        warn = ("the tokenizer pads on the left and WorldPMPipeline passes no attention mask, so officially shorter "
                "rows are shifted (batch-dependent); rmbench-fast right-pads, the sequence's official score alone",)
    return scorer_for(ADAPTER, o, config, tokenizer, partial(load_remote, "AutoModel"), PlainTextScorer, mask=False,
                      quantized=False, dtype=torch.bfloat16, warnings=warn)


ADAPTER = Adapter(
    name="worldpm",
    summary="WorldPM (the model's own Qwen2ForRewardModel, --trust-remote-code): no special tokens added, no mask",
    official_names=("Qwen/WorldPM-72B",),
    architectures=("Qwen2ForRewardModel",),
    auto_map=("Qwen2ForRewardModel",),
    make_scorer=make_scorer, remote_code=True,
    notes=("runs the model's own code (auto_map AutoModel) under --trust-remote-code",
           "texts encoded without special tokens; input ids only, no attention mask (as WorldPMPipeline)",
           "the official entry pins bfloat16"),
)
ADAPTERS = [ADAPTER]

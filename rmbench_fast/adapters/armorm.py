"""ArmoRM (RLHFlow/ArmoRM-Llama3-8B-v0.1): the model's own class (LlamaForRewardModelWithGating,
config.json auto_map AutoModelForSequenceClassification), run under --trust-remote-code.

rewardbench 0.1.4 marks it "Custom Classifier", so RM-Bench's run_rm.py raises NotImplementedError:
the official script has no number for it. It is scored as its model card documents: the chat
template tokenized as apply_chat_template(messages, return_tensors="pt") does (no special tokens
added, so a single BOS), never truncated, bfloat16, and `output.score`. (The reward-bench commit
RM-Bench pins ran it through ArmoRMPipeline instead, which adds a second BOS.) Its gating network
needs Llama-3's token ids for '<|eot_id|><|start_header_id|>assistant<|end_header_id|>\\n\\n'.
"""

from __future__ import annotations

from functools import partial

import torch

from ..errors import UsageError
from .base import Adapter
from .qrm import last_pattern
from .scoring import PlainTextScorer, load_remote, require_remote_code, scorer_for

AUTO = "AutoModelForSequenceClassification"


class ArmoRMScorer(PlainTextScorer):
    truncate = False

    def encode(self, samples, tokenizer, fmt, compat, tokenizer_path=None):
        seqs = super().encode(samples, tokenizer, fmt, compat, tokenizer_path)
        if any(last_pattern(torch.tensor([e.ids]))[0] < 0 for e in seqs):
            raise UsageError("armorm: sequences lack Llama-3's '<|eot_id|><|start_header_id|>assistant<|end_header_id|>"
                             "\\n\\n' token ids, where its gating network reads (it needs a Llama-3 tokenizer and chat "
                             "template)")
        return seqs


def make_scorer(o, config, tokenizer, device, tokenizer_path):
    require_remote_code(o, config, ADAPTER.name, AUTO)
    return scorer_for(ADAPTER, o, config, tokenizer, partial(load_remote, AUTO), ArmoRMScorer, field="score",
                      quantized=False, dtype=torch.bfloat16)


ADAPTER = Adapter(
    name="armorm",
    summary="ArmoRM (the model's own code, --trust-remote-code), scored as its model card documents (output.score)",
    official_names=("RLHFlow/ArmoRM-Llama3-8B-v0.1",),
    architectures=("LlamaForRewardModelWithGating",),
    accepts=lambda c: getattr(c, "num_quantiles", None) is None,
    make_scorer=make_scorer, remote_code=True,
    notes=("rewardbench 0.1.4 marks it a Custom Classifier: RM-Bench's run_rm.py raises NotImplementedError, so the "
           "official script has no number; scored as the model card documents",
           "runs the model's own code (auto_map AutoModelForSequenceClassification) under --trust-remote-code"),
)
ADAPTERS = [ADAPTER]

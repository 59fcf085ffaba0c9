"""Sequence-classifier reward models: the head's logit at the pooled position.

The model pools at the rightmost token that is not the pad id (transformers' rule, also in 4.51),
so padding amount never changes a score: batches may be cut however the batcher likes.
"""

from __future__ import annotations

import numpy as np
import torch

from ..batching import batch_inputs
from ..errors import UsageError
from ..layout import responses
from ..models import is_causal_decoder, load_model
from ..tokenize import OFFICIAL_MAX_LENGTH, encode_rm, rm_appends_eos
from .base import Scorer


def pick_label(num_labels: int, label_index: int | None, compat: bool) -> int | None:
    """The logit column to score: the only one, `label_index`, or None for the official pipeline's
    top-label score (the max logit) in compat mode."""
    if label_index is not None:
        if not 0 <= label_index < num_labels:
            raise UsageError(f"--label-index {label_index}: the model's head has {num_labels} labels")
        return label_index
    if num_labels == 1:
        return 0
    if compat:
        return None
    raise UsageError(f"the reward model's head has {num_labels} labels: choose one with --label-index K "
                     "(or --compat official for the official pipeline's top-label score)")


class RewardModelScorer(Scorer):
    family = "rm"
    outputs = ("scores",)

    def __init__(self, pad_id: int, label: int | None):
        super().__init__(pad_id)
        self.label = label

    def encode(self, samples, tokenizer, fmt, compat, tokenizer_path=None):
        texts = [fmt.text(s.prompt, r) for s in samples for r in responses(s)]
        append_eos = rm_appends_eos(tokenizer, fmt.tokenizer_has_template, tokenizer_path)
        return encode_rm(tokenizer, texts, append_eos, OFFICIAL_MAX_LENGTH if compat else None)

    def pass_key(self):
        return ("rm", self.label)

    def load(self, path, dtype, device, trust_remote_code, allow_pickle_weights=False):
        model = load_model(path, "rm", dtype, device, trust_remote_code, allow_pickle_weights)
        if model.config.pad_token_id is None:  # as the official script: pool at the last non-pad token
            model.config.pad_token_id = self.pad_id
        return model

    def batch_fn(self, model, device):
        causal = is_causal_decoder(model.config)

        @torch.inference_mode()
        def run(seqs, batch, prefix=None):
            inputs, _ = batch_inputs(seqs, batch, self.pad_id, device, causal, prefix)
            logits = model(**inputs).logits.float()
            picked = logits.max(dim=-1).values if self.label is None else logits[:, self.label]
            return {"scores": picked.double().cpu().numpy()}

        return run

    def rewards(self, passes):
        return passes["model"]["scores"]

    def readout_limit(self, e):
        return max((t for t in range(len(e.ids) - 1, -1, -1) if e.ids[t] != self.pad_id), default=0)

    def describe(self):
        return {"scorer": self.family, "mode": "rm", "ref_free": None, "logprob_impl": None}

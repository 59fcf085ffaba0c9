"""Sequence-classifier reward models: the head's logit at the pooled position.

The model pools at the rightmost token that is not the pad id (transformers' rule, also in 4.51),
so padding amount never changes a score: batches may be cut however the batcher likes.
"""

from __future__ import annotations

import numpy as np
import torch

from ..batching import Batch, batch_inputs
from ..errors import UsageError
from ..models import is_causal_decoder


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


@torch.inference_mode()
def score_rm(model, seqs: list[list[int]], batches: list[Batch], pad_id: int, device, label: int | None,
             scores: np.ndarray, on_batch=None, prefix=None) -> np.ndarray:
    """Write one float64 score per sequence of `batches` into `scores` (original order); after each
    batch, on_batch(batch). prefix: a PrefixKV, when the batches are of suffixes after shared
    prompt prefixes (the pooled last token is always in the suffix)."""
    causal = is_causal_decoder(model.config)
    for batch in batches:
        inputs, _ = batch_inputs(seqs, batch, pad_id, device, causal, prefix)
        logits = model(**inputs).logits.float()
        picked = logits.max(dim=-1).values if label is None else logits[:, label]
        scores[batch.indices] = picked.double().cpu().numpy()
        if on_batch is not None:
            on_batch(batch)
    return scores

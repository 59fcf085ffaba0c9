"""DPO implicit rewards: per-sequence sums of response-token log-probs.

The base model runs once per batch for hidden states; the LM head is applied only to the
positions that predict response tokens, through the log-prob seam (`rmbench_fast.logprobs`).
"""

from __future__ import annotations

import logging

import numpy as np
import torch

from ..batching import Batch, batch_inputs
from ..kernels import logits_logprobs
from ..logprobs import LMHead, segment_stats, token_logprobs
from ..models import is_causal_decoder

log = logging.getLogger("rmbench_fast")
LOGPROB_IMPLS = ("auto", "triton", "torch", "plain")


def lm_head_of(model) -> LMHead | None:
    """The model's LM head as an LMHead, or None when it is not one the seam can express (then
    the plain path runs the whole model for logits)."""
    head = model.get_output_embeddings()
    if not isinstance(head, torch.nn.Linear):
        return None
    cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    scale = getattr(cfg, "logit_scale", None)
    softcap = getattr(cfg, "final_logit_softcapping", None)
    if getattr(model, "base_model", None) is None or model.base_model is model:
        return None
    return LMHead(head.weight, head.bias, float(scale) if scale is not None else None,
                  float(softcap) if softcap is not None else None)


def _label_positions(seqs, starts, batch: Batch, device, offsets=None):
    """(rows, positions, segment) of every scored token of the batch: position t predicts
    ids[t + 1], for the tokens ids[start:]; a row whose first `offsets[row]` tokens come from a
    cached prefix has its positions shifted by that much."""
    rows, pos, seg = [], [], []
    for row, i in enumerate(batch.indices):
        n, s = len(seqs[i]), starts[i]
        if n - s <= 0:
            continue
        off = 0 if offsets is None else int(offsets[row])
        rows.append(np.full(n - s, row))
        pos.append(np.arange(s - 1 - off, n - 1 - off))
        seg.append(np.full(n - s, row))
    rows = torch.as_tensor(np.concatenate(rows), device=device)
    pos = torch.as_tensor(np.concatenate(pos), device=device)
    return rows, pos, torch.as_tensor(np.concatenate(seg), device=device)


@torch.inference_mode()
def sequence_logprob_stats(model, seqs, starts, batches: list[Batch], pad_id: int, device, out, on_batch=None,
                           impl: str = "auto", prefix=None):
    """Per sequence of `batches`: sum, count and sum of squares of its scored tokens' log-probs,
    written into out = (total, count, sumsq) float64 arrays (original order); after each batch,
    on_batch(batch).

    impl: "auto" / "triton" / "torch" pick the fused op's implementation (rmbench_fast.kernels);
    "plain" runs the whole model for logits and reduces them at the label positions (also the
    fallback for heads the fused op cannot express). prefix: a PrefixKV, when the batches are of
    suffixes after shared prompt prefixes (every scored position is in the suffix)."""
    total, count, sumsq = out
    head = lm_head_of(model) if impl != "plain" else None
    if head is None and impl != "plain":
        log.warning("the LM head of %s is not a plain linear layer the fused log-prob op can express: "
                    "using the model's own logits", type(model).__name__)
    causal = is_causal_decoder(model.config)
    for batch in batches:
        inputs, offsets = batch_inputs(seqs, batch, pad_id, device, causal, prefix, base=head is not None)
        ids = inputs["input_ids"]
        rows, pos, seg = _label_positions(seqs, starts, batch, device, offsets)
        targets = ids[rows, pos + 1]
        if head is not None:
            hidden = model.base_model(**inputs)[0]
            logps = token_logprobs(hidden[rows, pos], head, targets, impl)
        else:  # the model's own logits, reduced at the label positions only
            logits = model(**inputs).logits
            logps = logits_logprobs(logits[rows, pos], targets, "torch" if impl == "plain" else impl)
        s, c, q = segment_stats(logps, seg, len(batch.indices))
        total[batch.indices], count[batch.indices], sumsq[batch.indices] = (
            s.cpu().numpy(), c.cpu().numpy(), q.cpu().numpy())
        if on_batch is not None:
            on_batch(batch)
    return total, count, sumsq


def dpo_rewards(policy_stats, ref_stats=None, ref_free: str = "avg") -> np.ndarray:
    """With a reference: sum log p_policy - sum log p_ref. Without: sum, avg (per token) or norm
    (minus the L2 norm of the token log-probs), as rewardbench's DPOInference."""
    total, count, sumsq = policy_stats
    if ref_stats is not None:
        return total - ref_stats[0]
    if ref_free == "sum":
        return total.copy()
    if ref_free == "avg":
        with np.errstate(invalid="ignore", divide="ignore"):
            return total / count
    if ref_free == "norm":
        return -np.sqrt(sumsq)
    raise ValueError(f"unknown reference-free reward {ref_free!r}")

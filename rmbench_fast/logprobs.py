"""The log-prob seam: per-token log p(target) from hidden states and the LM head.

Only the positions that predict response tokens reach this function, and no [tokens, vocab]
tensor of a whole batch exists at once: rows are processed in chunks whose logits stay within
`chunk_elems` elements, with an fp32 log-sum-exp. The fused Triton kernel plugs in here.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class LMHead:
    """What turns a hidden state into logits: (h @ W^T + b) * scale, then optional soft-capping
    cap * tanh(logits / cap)."""

    weight: torch.Tensor  # [V, d]
    bias: torch.Tensor | None = None
    scale: float | None = None
    softcap: float | None = None


def head_logits(h: torch.Tensor, head: LMHead) -> torch.Tensor:
    """fp32 logits of the rows `h` (the head's matmul runs in its own dtype)."""
    logits = torch.nn.functional.linear(h, head.weight, head.bias).float()
    if head.scale is not None:
        logits = logits * head.scale
    if head.softcap is not None:
        logits = head.softcap * torch.tanh(logits / head.softcap)
    return logits


def token_logprobs(hidden: torch.Tensor, head: LMHead, targets: torch.Tensor, chunk_elems: int = 1 << 24
                   ) -> torch.Tensor:
    """log softmax(head(hidden))[target] for each row, in fp32: [N, d], [N] -> [N]."""
    n, vocab = hidden.shape[0], head.weight.shape[0]
    out = torch.empty(n, dtype=torch.float32, device=hidden.device)
    rows = max(1, chunk_elems // vocab)
    for s in range(0, n, rows):
        logits = head_logits(hidden[s:s + rows], head)
        picked = logits.gather(1, targets[s:s + rows, None]).squeeze(1)
        out[s:s + rows] = picked - torch.logsumexp(logits, dim=-1)
    return out


def segment_stats(logps: torch.Tensor, segments: torch.Tensor, n_segments: int):
    """Per-sequence sum, count and sum of squares of token log-probs (float64)."""
    lp = logps.double()
    total = torch.zeros(n_segments, dtype=torch.float64, device=lp.device).index_add_(0, segments, lp)
    count = torch.zeros(n_segments, dtype=torch.float64, device=lp.device).index_add_(
        0, segments, torch.ones_like(lp))
    sumsq = torch.zeros(n_segments, dtype=torch.float64, device=lp.device).index_add_(0, segments, lp * lp)
    return total, count, sumsq

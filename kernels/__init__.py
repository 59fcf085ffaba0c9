"""Fused response-token log-probs (imported as `rmbench_fast.kernels`, never as `kernels`).

The op: hidden states H [N, d] of the positions that predict response tokens, the LM head W [V, d]
(with bias, logit scale or final soft-capping when the model has them), targets [N] and a segment
id per row (its sequence). Output: per-token log-prob [N] in fp32, and per-sequence sum, count and
sum of squares (which give the sum / avg / norm rewards). No [N, V] tensor is ever allocated.

Implementations, chosen by `impl`:
- "triton": the fused Triton kernel (GPU; on CPU only under TRITON_INTERPRET=1, for tests);
- "torch": rows and vocabulary in chunks with an online fp32 log-sum-exp (CPU, and GPU fallback);
- "auto": triton on CUDA when Triton is importable, torch otherwise.
Plain references live in `logprob_reference.py`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .logprob_torch import chunked_linear_logprobs, chunked_logits_logprobs

IMPLS = ("auto", "triton", "torch")


def _triton_ok(device: torch.device) -> bool:
    import os

    if device.type != "cuda" and os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
        return False
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def resolve_impl(impl: str, device: torch.device) -> str:
    if impl not in IMPLS:
        raise ValueError(f"unknown log-prob implementation {impl!r} (expected {', '.join(IMPLS)})")
    if impl == "auto":
        return "triton" if device.type == "cuda" and _triton_ok(device) else "torch"
    if impl == "triton" and not _triton_ok(device):
        raise RuntimeError("the Triton log-prob kernel needs a CUDA device (or TRITON_INTERPRET=1 on CPU) "
                           "and the triton package")
    return impl


def linear_logprobs(h, weight, targets, bias=None, scale=None, softcap=None, impl: str = "auto") -> torch.Tensor:
    """log_softmax(head(h))[target] per row, fp32 [N]."""
    impl = resolve_impl(impl, h.device)
    if impl == "triton":
        from .logprob_triton import fused_linear_logprobs

        return fused_linear_logprobs(h, weight, targets, bias, scale, softcap)
    return chunked_linear_logprobs(h, weight, targets, bias, scale, softcap)


def logits_logprobs(logits, targets, impl: str = "auto") -> torch.Tensor:
    """log_softmax(logits)[target] per row, fp32 [N], reading logits in their own dtype."""
    impl = resolve_impl(impl, logits.device)
    if impl == "triton":
        from .logprob_triton import logits_logprobs as triton_logits_logprobs

        return triton_logits_logprobs(logits, targets)
    return chunked_logits_logprobs(logits, targets)


def segment_stats(logps: torch.Tensor, segments: torch.Tensor, n_segments: int):
    """Per segment: sum, count, sum of squares (float64), deterministic: when the segment ids are
    sorted (as the engine passes them) the sums come from a float64 cumulative sum, with no
    atomics; otherwise from index_add."""
    lp = logps.double()
    seg = segments.long()
    count = torch.bincount(seg, minlength=n_segments).double()
    if seg.numel() == 0 or bool((seg[1:] >= seg[:-1]).all()):
        ends = torch.cumsum(count, 0).long()
        starts = ends - count.long()

        def sums(x):
            c = torch.cat([x.new_zeros(1), torch.cumsum(x, 0)])
            return c[ends] - c[starts]

        return sums(lp), count, sums(lp * lp)
    total = torch.zeros(n_segments, dtype=torch.float64, device=lp.device).index_add_(0, seg, lp)
    sumsq = torch.zeros(n_segments, dtype=torch.float64, device=lp.device).index_add_(0, seg, lp * lp)
    return total, count, sumsq


@dataclass
class LogprobStats:
    logps: torch.Tensor  # [N] fp32
    total: torch.Tensor  # [S] float64
    count: torch.Tensor
    sumsq: torch.Tensor


def fused_logprob_stats(h, weight, targets, segments, n_segments, bias=None, scale=None, softcap=None,
                        impl: str = "auto") -> LogprobStats:
    """The whole op: per-token log-probs and per-sequence reductions."""
    logps = linear_logprobs(h, weight, targets, bias, scale, softcap, impl)
    return LogprobStats(logps, *segment_stats(logps, segments, n_segments))

"""The log-prob seam: per-token log p(target) from hidden states and the LM head.

Only the positions that predict response tokens reach this function. It hands them to the fused
op in `rmbench_fast.kernels` (Triton on GPU, chunked online log-sum-exp in torch on CPU): no
[tokens, vocab] tensor is allocated, and every reduction is fp32.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, replace

import torch

from ..kernels import linear_logprobs, segment_stats, sharded_logprobs  # noqa: F401  (segment_stats: part of the seam)


@dataclass
class LMHead:
    """What turns a hidden state into logits: (h @ W^T + b) * scale / divisor, then optional
    soft-capping cap * tanh(logits / cap)."""

    weight: torch.Tensor  # [V, d]
    bias: torch.Tensor | None = None
    scale: float | None = None
    softcap: float | None = None
    divisor: float | None = None  # Granite's logits_scaling
    module: torch.nn.Module | None = None  # the Linear it was read from, when accelerate may offload it
    # a tensor-parallel head (--tp): `weight` and `bias` are this rank's rows [vocab_start, vocab_start +
    # rows) of a head of `vocab` rows, sharded over `group` (kernels.logprob_sharded); None: a whole head
    vocab_start: int | None = None
    vocab: int | None = None
    group: object = None


@contextmanager
def ready(head: LMHead):
    """The head with its weights where it computes. A model placed by accelerate (--device-map) may
    have offloaded the head to the CPU or disk (its parameters are then on the meta device, and its
    hook brings them on for a forward): the hook brings them onto its execution device for the block
    and offloads them again after, as for the model's own forward. Any other head is yielded as it is."""
    hook = getattr(head.module, "_hf_hook", None)
    if hook is None or not getattr(hook, "offload", False):
        yield head
        return
    from accelerate.utils import align_module_device

    with align_module_device(head.module):
        yield replace(head, weight=head.module.weight, bias=head.module.bias)


def token_logprobs(hidden: torch.Tensor, head: LMHead, targets: torch.Tensor, impl: str = "auto") -> torch.Tensor:
    """log softmax(head(hidden))[target] for each row, in fp32: [N, d], [N] -> [N]."""
    if hidden.dtype != head.weight.dtype:
        hidden = hidden.to(head.weight.dtype)
    if head.vocab_start is not None:  # each rank reduces its rows; the partials are merged over the group
        return sharded_logprobs(hidden.contiguous(), head.weight, head.vocab_start, targets, head.group, head.bias,
                                head.scale, head.softcap, head.divisor, vocab=head.vocab,
                                impl="triton" if impl == "triton" else "torch")
    return linear_logprobs(hidden.contiguous(), head.weight, targets, head.bias, head.scale, head.softcap, impl,
                           divisor=head.divisor)


def head_logits(hidden: torch.Tensor, head: LMHead) -> torch.Tensor:
    """The head's logits in fp32 ([N, d] -> [N, V]), as plainly as the seam defines them: the fused
    op's reference for the DPO scorer's once-per-pass self-check (a few rows only)."""
    z = hidden.float() @ head.weight.float().T
    if head.bias is not None:  # (with --tp: this rank's entries, as its columns)
        z = z + head.bias.float()
    if head.vocab_start is not None:  # this rank's columns: gathered in rank order (a few rows only)
        import torch.distributed as dist

        parts = [torch.empty(0)] * dist.get_world_size(head.group)
        dist.all_gather_object(parts, z.cpu(), group=head.group)
        z = torch.cat(parts, dim=1).to(z.device)
    mult = (1.0 if head.scale is None else head.scale) / (1.0 if head.divisor is None else head.divisor)
    if mult != 1.0:
        z = z * mult
    if head.softcap is not None:
        z = head.softcap * torch.tanh(z / head.softcap)
    return z

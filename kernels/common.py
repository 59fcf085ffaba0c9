"""What every log-prob implementation shares: target validation (a target outside the vocabulary
is an error, never a silent -logsumexp), the coarse N bucket that keys tuning, and the head's
constants folded for exp2 / log2."""

from __future__ import annotations

import os

import torch

LOG2E = 1.4426950408889634  # log2(e): exp(x) = exp2(x * LOG2E)
LN2 = 0.6931471805599453  # ln(2): ln(x) = log2(x) * LN2


class TargetOutOfVocabError(ValueError):
    """A target token id outside [0, vocab). `row` is the first offending row of the batch, so the
    caller can map it back to its sample."""

    def __init__(self, row: int, target: int, vocab: int):
        super().__init__(f"target {target} of row {row} is outside the vocabulary [0, {vocab})")
        self.row, self.target, self.vocab = row, target, vocab


def check_targets(targets: torch.Tensor, n: int, vocab: int) -> None:
    """Raise TargetOutOfVocabError for the first row whose target is not in [0, vocab), and
    ValueError when there is not exactly one target per row. One device sync on CUDA."""
    if targets.dim() != 1 or targets.shape[0] != n:
        raise ValueError(f"expected {n} targets (one per row), got a tensor of shape {tuple(targets.shape)}")
    if n == 0:
        return
    bad = (targets < 0) | (targets >= vocab)
    if bool(bad.any()):
        row = int(bad.nonzero()[0, 0])
        raise TargetOutOfVocabError(row, int(targets[row]), vocab)


def n_bucket(n: int) -> int:
    """Coarse size class of N for tuning keys: the next power of two, at least 1024."""
    return max(1024, 1 << max(n - 1, 0).bit_length())


def tuning_enabled() -> bool:
    """RMBENCH_LOGPROB_TUNING=0 turns off all timing: `auto` takes Triton on CUDA without timing it
    against torch, and the Triton kernels use one fixed tile configuration per dtype instead of
    autotuning (results are then bit-identical whatever the batch and from run to run)."""
    return os.environ.get("RMBENCH_LOGPROB_TUNING", "1") not in ("0", "false", "no", "off")


def head_multipliers(scale=None, softcap=None, divisor=None) -> tuple[float, float]:
    """(pre, post) such that the head's logits times log2(e) are `acc * pre` without soft-capping
    and `post * tanh(acc * pre)` with it, where acc = h @ W^T + b. The model computes
    logits = acc * scale / divisor, then softcap * tanh(logits / softcap)."""
    mult = (1.0 if scale is None else float(scale)) / (1.0 if divisor is None else float(divisor))
    if softcap is None:
        return mult * LOG2E, 1.0
    return mult / float(softcap), float(softcap) * LOG2E

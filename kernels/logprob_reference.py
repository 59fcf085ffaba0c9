"""Plain torch references for the log-prob kernels: the whole [N, V] logits, then
log_softmax + gather. Simple and memory-hungry on purpose: the kernels must agree with these
(tests compute them in float64 for ground truth)."""

from __future__ import annotations

import torch

from .common import check_targets


def reference_head_logits(h, weight, bias=None, scale=None, softcap=None, dtype=torch.float32, divisor=None):
    """The LM head as the model computes it, in `dtype`: (h @ W^T + b) * scale / divisor, then
    softcap * tanh(logits / softcap). (Granite divides by config.logits_scaling: divisor.)"""
    logits = torch.nn.functional.linear(h.to(dtype), weight.to(dtype), None if bias is None else bias.to(dtype))
    if scale is not None:
        logits = logits * scale
    if divisor is not None:
        logits = logits / divisor
    if softcap is not None:
        logits = softcap * torch.tanh(logits / softcap)
    return logits


def reference_linear_logprobs(h, weight, targets, bias=None, scale=None, softcap=None, dtype=torch.float32,
                              divisor=None):
    """log_softmax(head(h))[target] per row, computed in `dtype` (torch.float64 for ground truth)."""
    check_targets(targets, h.shape[0], weight.shape[0])
    logits = reference_head_logits(h, weight, bias, scale, softcap, dtype, divisor)
    return logits.log_softmax(-1).gather(1, targets[:, None].long()).squeeze(1)


def reference_logits_logprobs(logits, targets, dtype=torch.float32):
    """log_softmax(logits)[target] per row, in `dtype`."""
    check_targets(targets, logits.shape[0], logits.shape[1])
    return logits.to(dtype).log_softmax(-1).gather(1, targets[:, None].long()).squeeze(1)


def reference_segment_stats(logps, segments, n_segments):
    """Per segment: sum, count and sum of squares, by a plain loop (float64)."""
    total = torch.zeros(n_segments, dtype=torch.float64)
    count = torch.zeros(n_segments, dtype=torch.float64)
    sumsq = torch.zeros(n_segments, dtype=torch.float64)
    for lp, s in zip(logps.double().cpu().tolist(), segments.cpu().tolist()):
        total[s] += lp
        count[s] += 1
        sumsq[s] += lp * lp
    return total, count, sumsq


def reference_sharded_logprobs(h, weight_shards, targets, bias_shards=None, scale=None, softcap=None,
                               dtype=torch.float32, divisor=None):
    """log_softmax(head(h))[target] per row for a head given as its vocabulary shards (in order):
    the shards (and bias shards) concatenated into the whole head, then whole logits, in `dtype`."""
    weight = torch.cat(list(weight_shards))
    bias = None if bias_shards is None else torch.cat(list(bias_shards))
    return reference_linear_logprobs(h, weight, targets, bias, scale, softcap, dtype, divisor)

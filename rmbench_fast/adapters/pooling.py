"""Where the families read a sequence's score: three rules, each as the official class computes it.

All take right-padded rows (the adapters' batches); each returns one position per row.
"""

from __future__ import annotations

import torch


def last_attended(mask: torch.Tensor) -> torch.Tensor:
    """The last position whose attention mask is 1 (UltraRM's `mask.cumsum(1).argmax(1)`; beaver's
    last nonzero; GRM's `mask.sum(-1) - 1`, which is the same token for right-padded rows)."""
    return mask.long().cumsum(1).argmax(1)


def before_first(ids: torch.Tensor, token: int) -> torch.Tensor:
    """The position just before the first `token` (the config's pad id), modulo the width: the
    last column when the row holds none (transformers' old sequence-classifier rule, kept by
    INF-ORM, QRM, ArmoRM, LDL, WorldPM). Right padding with `token` itself makes it the last real
    token unless the text holds `token` earlier, which the official read-out shares."""
    return (torch.eq(ids, token).int().argmax(-1) - 1) % ids.shape[-1]


def rows(t: torch.Tensor, index) -> torch.Tensor:
    """t[i, index[i]] for every row i."""
    return t[torch.arange(t.shape[0], device=t.device), torch.as_tensor(index, device=t.device)]

"""Length-bucketed dynamic batching.

All sequences of a run (every prompt, style, chosen and rejected, every domain) are sorted by
length, longest first, and cut into batches whose padded size (rows x longest row) stays within
a token budget. Longest batches come first, so an out-of-memory shows up at once. Scores go back
to the original order through each batch's indices.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..models.kinds import forward_keywords
from . import prefix_attention


@dataclass(frozen=True)
class Batch:
    indices: np.ndarray  # positions in the run's sequence list
    max_len: int

    @property
    def padded_tokens(self) -> int:
        return len(self.indices) * self.max_len


def make_batches(lengths, max_tokens_per_batch: int, max_batch_size: int | None = None,
                 max_padding: float = 0.03) -> list[Batch]:
    """Greedy cut of the length-sorted sequences. A batch takes rows while rows x longest row stays
    within `max_tokens_per_batch` (a single longer sequence forms a batch of its own), rows stay
    within `max_batch_size`, and every row is at least (1 - max_padding) x the longest, so padded
    tokens never exceed real tokens by more than 1 / (1 - max_padding)."""
    if max_tokens_per_batch < 1:
        raise ValueError("max_tokens_per_batch must be positive")
    lengths = np.asarray(lengths, dtype=np.int64)
    order = np.argsort(-lengths, kind="stable")  # longest first; ties keep input order
    sorted_len = lengths[order]
    batches, start = [], 0
    n = len(order)
    while start < n:
        longest = int(sorted_len[start])
        rows = max(1, max_tokens_per_batch // max(longest, 1))
        if max_batch_size is not None:
            rows = min(rows, max_batch_size)
        stop = min(n, start + rows)
        # rows must not fall below (1 - max_padding) x longest: sorted_len is non-increasing
        floor = longest * (1.0 - max_padding)
        stop = start + max(1, int(np.searchsorted(-sorted_len[start:stop], -floor, side="right")))
        batches.append(Batch(order[start:stop], longest))
        start = stop
    return batches


def halves(batch: Batch, lengths) -> list[Batch]:
    """`batch`'s rows re-cut at half its padded tokens (what an out-of-memory error retries);
    lengths: per sequence of the run, the tokens its row holds."""
    return [Batch(batch.indices[b.indices], b.max_len)
            for b in make_batches(np.asarray(lengths)[batch.indices], max(1, batch.padded_tokens // 2))]


def pad_rows(rows: list[list[int]], width: int, pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded input ids [len(rows), width] and attention mask for token id lists."""
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for r, s in enumerate(rows):
        ids[r, :len(s)] = torch.as_tensor(s, dtype=torch.long)
        mask[r, :len(s)] = 1
    return ids.to(device), mask.to(device)


def mask_first_tokens(mask: torch.Tensor, rows) -> bool:
    """Attention 0 on the first token of each row flagged in `rows` (one bool per row, or None): how
    the official pipeline treats a doubled BOS (the template's and the tokenizer's). True when a row
    was masked."""
    if rows is None or not np.any(rows):
        return False
    mask[torch.as_tensor(np.asarray(rows, dtype=bool), device=mask.device), 0] = 0
    return True


def batch_inputs(seqs, batch: Batch, pad_id: int, device, causal: bool, prefix=None, base: bool = False,
                 mask_first=None) -> tuple[dict, np.ndarray | None]:
    """Model keyword arguments for one batch of `seqs` (tokenize.Encoded), and per row where its
    position 0 sits in its sequence: whole right-padded sequences, or with `prefix` (a
    rmbench_fast.prefix.PrefixKV) the suffixes after cached shared prefixes (`base`: for the base
    model rather than the head model). mask_first: per row, whether its first token gets attention
    mask 0 (the official pipeline's treatment of a doubled BOS; such rows share no prefix)."""
    if prefix is not None:
        return prefix.inputs(batch, base, mask_first), prefix.offsets(batch)
    ids, mask = pad_rows([seqs[i].ids for i in batch.indices], batch.max_len, pad_id, device)
    if not mask_first_tokens(mask, mask_first) and causal:
        mask = None  # right padding never reaches a real token of a causal decoder: no mask, the fast path
    return {"input_ids": ids, "attention_mask": mask, "use_cache": False}, None


def forward(module, inputs: dict):
    """module(**inputs), leaving out the optional keys (use_cache, a None mask) its forward does not
    take: some architectures (OpenAI GPT in transformers 4.51) have no use_cache. A batch of suffixes
    on shared prefixes given their split attention (inputs.prefix_attention) runs with it switched on."""
    names = forward_keywords(type(module))
    if names is not None:
        inputs = {k: v for k, v in inputs.items() if k in names or (v is not None and k != "use_cache")}
    if inputs.get(prefix_attention.KEY) is None:
        return module(**inputs)
    with prefix_attention.switched(module):
        return module(**inputs)


def token_counts(lengths, batches: list[Batch]) -> dict:
    real = int(np.sum(lengths))
    padded = int(sum(b.padded_tokens for b in batches))
    return {"real_tokens": real, "padded_tokens": padded, "padding_ratio": padded / real if real else 1.0,
            "n_batches": len(batches)}

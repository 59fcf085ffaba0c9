"""The sequence layout of a run, in one place.

Every prompt contributes six sequences, consecutive: for each style (concise, detailed plain,
detailed markdown) the chosen response, then the rejected one. Sequence i belongs to prompt
i // 6, style (i % 6) // 2, and is rejected when i is odd. Tokenization, batching, prefix sharing,
the scorers' outputs and the results all use this order.
"""

from __future__ import annotations

import numpy as np

from .data import STYLES

PER_PROMPT = 2 * len(STYLES)


def responses(sample) -> list[str]:
    """A sample's six responses in layout order."""
    return [resp for k in range(len(STYLES)) for resp in (sample.chosen[k], sample.rejected[k])]


def full_texts(samples, fmt) -> list[str]:
    """Every sequence's text (its prompt and response through the chat format `fmt`), in layout order."""
    return [fmt.text(s.prompt, r) for s in samples for r in responses(s)]


def sequence_name(samples, i: int) -> str:
    """How errors name sequence i of a run: sample, side and style."""
    return f"sample {samples[i // PER_PROMPT].name}, {'rejected' if i % 2 else 'chosen'} {STYLES[(i % PER_PROMPT) // 2]}"


def split_scores(scores: np.ndarray, n_prompts: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-sequence scores [6n, ...] -> (chosen [n, 3, ...], rejected [n, 3, ...])."""
    per = scores.reshape(n_prompts, len(STYLES), 2, *scores.shape[1:])
    return per[:, :, 0].copy(), per[:, :, 1].copy()

"""The sequence layout of a run, in one place.

Every RM-Bench prompt contributes six sequences, consecutive: for each style (concise, detailed
plain, detailed markdown) the chosen response, then the rejected one. Sequence i belongs to prompt
i // 6, style (i % 6) // 2, and is rejected when i is odd. Tokenization, batching, prefix sharing,
the scorers' outputs and the results all use this order. A row of another benchmark
(engine.benchmarks) lists its own `responses` (its chosen, then its rejected): its sequences are
those, consecutive, in that order.

A sample's prompt, or a response, may be a conversation (a list of {role, content} messages): its
text is then the whole conversation through the chat format (templates.ChatFormat.text), and what a
scorer scores as the response is what follows the prompt's turns (DPO: the tokens after the
prompt's own rendering, as encode_dpo cuts them; RM: the full text, as for strings).
"""

from __future__ import annotations

import numpy as np

from .data import STYLES

PER_PROMPT = 2 * len(STYLES)


def responses(sample) -> list[str]:
    """A sample's responses in layout order: RM-Bench's six, or another benchmark's row's own."""
    own = getattr(sample, "responses", None)
    if own is not None:
        return list(own)
    return [resp for k in range(len(STYLES)) for resp in (sample.chosen[k], sample.rejected[k])]


def full_texts(samples, fmt) -> list[str]:
    """Every sequence's text (its prompt and response through the chat format `fmt`), in layout order."""
    return [text(fmt, s, r) for s in samples for r in responses(s)]


def prompt_texts(samples, fmt) -> list[str]:
    """Every sample's prompt alone through the chat format (no generation prompt, as the official
    DPO flow renders it): what encode_dpo removes from each full text."""
    return [text(fmt, s) for s in samples]


def text(fmt, sample, response=None) -> str:
    """fmt.text of the sample's prompt (and response); a conversation that the format cannot
    render names its sample."""
    if isinstance(sample.prompt, str) and (response is None or isinstance(response, str)):
        return fmt.text(sample.prompt) if response is None else fmt.text(sample.prompt, response)
    from ..errors import UsageError

    try:
        return fmt.text(sample.prompt, response)
    except UsageError as e:
        raise UsageError(f"{sample.name}: {e}") from None


def sequence_name(samples, i: int) -> str:
    """How errors name sequence i of a run: sample, side and style (another benchmark's: row, side, index)."""
    if samples and getattr(samples[0], "responses", None) is not None:
        for s in samples:
            if i < len(s.responses):
                side, k = ("chosen", i) if i < len(s.chosen) else ("rejected", i - len(s.chosen))
                return f"row {s.name}, {side} response {k}"
            i -= len(s.responses)
    return f"sample {samples[i // PER_PROMPT].name}, {'rejected' if i % 2 else 'chosen'} {STYLES[(i % PER_PROMPT) // 2]}"


def split_scores(scores: np.ndarray, n_prompts: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-sequence scores [6n, ...] -> (chosen [n, 3, ...], rejected [n, 3, ...])."""
    per = scores.reshape(n_prompts, len(STYLES), 2, *scores.shape[1:])
    return per[:, :, 0].copy(), per[:, :, 1].copy()

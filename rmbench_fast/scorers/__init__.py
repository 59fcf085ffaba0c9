"""The scorer registry: which scorer a run's options and model call for.

This is the one place that looks at the mode; everything downstream talks to the Scorer interface
(`scorers.base`).
"""

from __future__ import annotations

from ..checks import check_kind
from ..errors import UsageError
from ..models import detect_mode
from ..options import DEFAULT_REF_FREE
from .base import Scorer
from .dpo import DPOScorer
from .rm import RewardModelScorer, official_bos, official_pad_ids, pick_label

__all__ = ["Scorer", "DPOScorer", "RewardModelScorer", "make_scorer", "resolve_logprob_impl"]


def resolve_logprob_impl(impl: str, device) -> str:
    """--logprob-impl as it will run on `device`: plain, triton or torch."""
    from ..kernels import resolve_impl

    if impl == "plain":
        return impl
    try:
        return resolve_impl(impl, device)
    except (RuntimeError, ValueError) as e:
        raise UsageError(f"--logprob-impl {impl}: {e}") from None


def make_scorer(o, config, tokenizer, device, tokenizer_path: str) -> Scorer:
    from ..adapters import select

    adapter = select(o.model, config, o.adapter) if o.mode in ("auto", "rm") else None
    if adapter is not None:
        if o.ref_model is not None or o.ref_free is not None:
            raise UsageError(f"--ref-model / --ref-free are for DPO models; {o.model} is a reward model "
                             f"(adapter {adapter.name})")
        return adapter.make_scorer(o, config, tokenizer, device, tokenizer_path)
    if o.adapter:
        raise UsageError(f"--adapter {o.adapter} scores reward models, not --mode {o.mode}")
    mode = detect_mode(config) if o.mode == "auto" else o.mode
    check_kind(o.model, config, mode, "model")
    if mode == "rm":
        if o.ref_model is not None:
            raise UsageError("--ref-model is for DPO models; the model is a sequence classifier (rm mode)")
        if o.ref_free is not None:
            raise UsageError("--ref-free is for DPO models; the model is a sequence classifier (rm mode)")
        tok_pad, cfg_pad = official_pad_ids(tokenizer, config)
        label = pick_label(config.num_labels, o.label_index, o.compat == "official")
        return RewardModelScorer(cfg_pad, label, config.num_labels, official_bos(tokenizer), tok_pad)
    resolved = resolve_logprob_impl(o.logprob_impl, device)
    if tokenizer.eos_token_id is None:
        raise UsageError(f"tokenizer {tokenizer_path}: has no EOS token, which DPO scoring appends to every response")
    # the official DPO flow pads with EOS
    return DPOScorer(tokenizer.eos_token_id, o.logprob_impl, None if o.ref_model else (o.ref_free or DEFAULT_REF_FREE),
                     resolved)

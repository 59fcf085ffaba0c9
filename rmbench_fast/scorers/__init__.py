"""Scorers: the Scorer interface (base), rm, dpo, the log-prob seam; the registry here alone reads the mode.
May import: errors, models, inputs, kernels; never adapters (an adapter builds its own scorer) or a later stage."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from ..errors import UsageError
from .names import DEFAULT_REF_FREE

if TYPE_CHECKING:
    from .base import Scorer

__all__ = ["Scorer", "DPOScorer", "RewardModelScorer", "make_scorer", "resolve_logprob_impl"]
# imported on first use, so that `scorers.names` (what the command line offers) costs no torch import
_LAZY = {"Scorer": "base", "DPOScorer": "dpo", "RewardModelScorer": "rm"}


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def resolve_logprob_impl(impl: str, device) -> str:
    """--logprob-impl as it will run on `device`: plain, triton or torch."""
    from ..kernels import resolve_impl

    if impl == "plain":
        return impl
    try:
        return resolve_impl(impl, device)
    except (RuntimeError, ValueError) as e:
        raise UsageError(f"--logprob-impl {impl}: {e}") from None


def make_scorer(o, mode: str, adapter, config, tokenizer, device, tokenizer_path: str,
                logprob_impl: str | None = None, benchmark: str | None = None) -> Scorer:
    """The scorer of a run whose model is known and checked (engine.checks.check_run): an adapter's,
    else by mode (rm or dpo). device: where it computes; logprob_impl: --logprob-impl as resolved
    where the passes run, when that is not this process (Ray workers); None: resolve it here.
    benchmark: the run's (engine.benchmarks.benchmark_of; None: o.benchmark, else RM-Bench), whose
    official truncation --compat official applies; o.score_span: what is scored of each response."""
    from ..inputs.spans import parse
    from .dpo import DPOScorer
    from .rm import RewardModelScorer, official_bos, official_pad_ids, pick_label

    span = parse(getattr(o, "score_span", None))
    if adapter is not None:
        scorer = adapter.make_scorer(o, config, tokenizer, device, tokenizer_path)
    elif mode == "rm":
        tok_pad, cfg_pad = official_pad_ids(tokenizer, config)
        label = pick_label(config.num_labels, o.label_index, o.compat == "official")
        scorer = RewardModelScorer(cfg_pad, label, config.num_labels, official_bos(tokenizer), tok_pad,
                                   # a placed model (--device-map) runs its whole forward: keyed apart
                                   readout=o.compat != "official" and not getattr(o, "device_map", None))
    else:
        resolved = logprob_impl or resolve_logprob_impl(o.logprob_impl, device)
        # the official DPO flow pads with EOS
        scorer = DPOScorer(tokenizer.eos_token_id, o.logprob_impl,
                           None if o.ref_model else (o.ref_free or DEFAULT_REF_FREE), resolved)
    scorer.benchmark = benchmark or getattr(o, "benchmark", None) or "rm-bench"
    scorer.span = span
    return scorer

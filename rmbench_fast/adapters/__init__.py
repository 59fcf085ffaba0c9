"""Reward-model adapters: the leaderboard's reward models that are not one-logit sequence classifiers.
May import: errors, models, inputs, scorers (the scorer every adapter builds on).

An adapter is a family of models (GRM, beaver, Starling, ...) with its own scorer (a
scorers.base.Scorer: loader, input preparation, score function). `select` picks one for a run:
--adapter NAME first; else the official REWARD_MODEL_CONFIG name (exact match after stripping a
`RewardModels/` prefix, as run_rm.py does); else the architecture or auto_map in config.json; else,
for checkpoints whose config does not say what they are (Starling-34B calls itself a
LlamaForSequenceClassification), the weight names in the safetensors files and the files next to
them. None means the plain sequence-classifier scorer (scorers.rm). Families are listed in ADAPTERS.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import UsageError
from ..models.kinds import is_language_model
from . import (armorm, beaver, grm, inform, internlm, ldl, nemotron, openbmb, qrm, starling, unsupported, worldpm,
               ziya)
from .base import Adapter, OutOfScope, weight_names

# one entry per family, in the order `rmbench-fast adapters` lists them (and architecture matching tries them)
ADAPTERS: list[Adapter] = [
    *grm.ADAPTERS, *beaver.ADAPTERS, *starling.ADAPTERS, *ziya.ADAPTERS, *openbmb.ADAPTERS, *internlm.ADAPTERS,
    *qrm.ADAPTERS, *armorm.ADAPTERS, *inform.ADAPTERS, *ldl.ADAPTERS, *worldpm.ADAPTERS, *nemotron.ADAPTERS,
    *unsupported.ADAPTERS,
]


def by_name(name: str) -> Adapter:
    for a in ADAPTERS:
        if a.name == name:
            return a
    raise UsageError(f"--adapter {name}: no such adapter (rmbench-fast adapters lists {', '.join(a.name for a in ADAPTERS)})")


def select(model_path: str, config, explicit: str | None = None) -> Adapter | None:
    """The adapter for a model, or None for the plain sequence-classifier scorer."""
    if explicit:
        return by_name(explicit)
    name = model_path.replace("RewardModels/", "")
    for a in ADAPTERS:
        if name in a.official_names:
            return a
    for a in ADAPTERS:
        if a.matches(config):
            return a
    if is_language_model(config):
        return None  # a language model whose extra weights (a TRL value head, say) make it no reward model
    folder = Path(model_path)
    files = frozenset(p.name for p in folder.iterdir()) if folder.is_dir() else frozenset()
    weights = weight_names(model_path)
    for a in ADAPTERS:
        if a.matches(config, weights, files):
            return a
    return None


__all__ = ["ADAPTERS", "Adapter", "OutOfScope", "by_name", "select", "weight_names"]

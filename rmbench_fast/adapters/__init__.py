"""Reward-model adapters: the leaderboard's reward models that are not a plain
*ForSequenceClassification with one logit, each scored as the official flow scores it.

An adapter is a family of models (GRM, beaver, Starling, ...) with its own scorer (a
scorers.base.Scorer: loader, input preparation, score function). `select` picks one for a run:
--adapter NAME first; else the official REWARD_MODEL_CONFIG name (exact match after stripping a
`RewardModels/` prefix, as run_rm.py does); else the architecture or auto_map in config.json.
None means the plain sequence-classifier scorer (scorers.rm). Families are listed in ADAPTERS.
"""

from __future__ import annotations

from .base import Adapter, OutOfScope

ADAPTERS: list[Adapter] = []  # one entry per family module, in the order `rmbench-fast adapters` lists them


def by_name(name: str) -> Adapter:
    from ..errors import UsageError

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
    return None


__all__ = ["ADAPTERS", "Adapter", "OutOfScope", "by_name", "select"]

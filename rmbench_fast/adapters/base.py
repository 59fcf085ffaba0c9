"""What an adapter is: a named family of reward models, how to recognise one, and its scorer."""

from __future__ import annotations

from dataclasses import dataclass, field


class OutOfScope(Exception):
    """Raised by adapters of official entries rmbench-fast does not score (pairwise, generative)."""


@dataclass(frozen=True)
class Adapter:
    name: str  # --adapter NAME
    summary: str  # one line for `rmbench-fast adapters`
    official_names: tuple[str, ...] = ()  # REWARD_MODEL_CONFIG keys (rewardbench 0.1.4)
    architectures: tuple[str, ...] = ()  # config.json `architectures` entries that mean this family
    auto_map: tuple[str, ...] = ()  # class names in config.json `auto_map` values that mean this family
    make_scorer: object = None  # (o, config, tokenizer, device, tokenizer_path) -> scorers.base.Scorer
    notes: tuple[str, ...] = field(default=())  # where the official flow is odd for this family (README, run.json)

    def matches(self, config) -> bool:
        archs = set(getattr(config, "architectures", None) or [])
        if archs & set(self.architectures):
            return True
        auto = getattr(config, "auto_map", None) or {}
        classes = {str(v).split(".")[-1] for v in (auto.values() if isinstance(auto, dict) else [])}
        return bool(classes & set(self.auto_map))

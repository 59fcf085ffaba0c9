"""What an adapter is: a named family of reward models, how to recognise one, and its scorer."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UsageError, one_line
from ..models.weight_files import read_header, safetensors_files


class OutOfScope(UsageError):
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
    # Checkpoints whose config does not say what they are: weight names that all must be present
    # (a name ending in "." is a prefix), and files next to config.json that all must be present.
    weights: tuple[str, ...] = ()
    files: tuple[str, ...] = ()
    accepts: object = None  # optional (config) -> bool, narrowing an architecture / auto_map match
    remote_code: bool = False  # runs the model's own code (config.json auto_map): no tensor-parallel plan here

    @property
    def module(self) -> str:
        """The family's module (where its make_scorer is defined, through any functools.partial)."""
        fn = self.make_scorer
        while isinstance(fn, functools.partial):
            fn = fn.func
        return fn.__module__

    def matches(self, config, weights=frozenset(), files=frozenset()) -> bool:
        """By architecture or auto_map (then `accepts`); else by weight names and files."""
        if self.accepts is not None and not self.accepts(config):
            return False
        archs = set(getattr(config, "architectures", None) or [])
        auto = getattr(config, "auto_map", None) or {}
        classes = {str(v).split(".")[-1] for v in (auto.values() if isinstance(auto, dict) else [])}
        if archs & set(self.architectures) or classes & set(self.auto_map):
            return True
        if not (self.weights or self.files):
            return False
        has = all(any(w.startswith(s) for w in weights) if s.endswith(".") else s in weights for s in self.weights)
        return has and all(f in files for f in self.files)


def weight_names(path) -> frozenset[str]:
    """The weight names of a local checkpoint folder, from its safetensors index or file headers
    (nothing is loaded); empty for a hub id or a folder without safetensors."""
    folder = Path(path)
    if not folder.is_dir():
        return frozenset()
    index = folder / "model.safetensors.index.json"
    try:
        if index.is_file():
            return frozenset(json.loads(index.read_text()).get("weight_map", {}))
        return frozenset(n for f in safetensors_files(folder) for n in read_header(f))
    except (ValueError, OSError) as e:  # JSONDecodeError is a ValueError
        raise UsageError(f"model {path}: cannot read its weight names ({one_line(e, 200)})") from None

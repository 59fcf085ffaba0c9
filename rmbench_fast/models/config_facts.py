"""A model config's attributes kept in the result store, so that runs after the first read them
without building the config class.

Under transformers 5 any model config class imports torch.distributed.tensor and torch._dynamo
(configuration_* -> utils.type_validators -> activations -> integrations.hub_kernels), about 1 s
of every run here, although a run whose passes come from the store never loads a model. The
first run with a config.json loads it through AutoConfig as always and stores what the class
made of it: every attribute `to_dict` gives (the class's defaults included), every other public
value it answers (properties such as Falcon's head_dim, class settings), its attribute aliases,
`num_labels` and the text config of a composite model. Later runs with byte-identical
config.json, the same transformers and this module unchanged get a StoredConfig that answers
the same attribute reads (tests/test_config_facts.py compares every public attribute of real
configs across architectures). Configs built by a model's own code (auto_map AutoConfig) are
never stored: their class could change with files this key does not cover.
"""

from __future__ import annotations

import json


def facts(config) -> dict | None:
    """What StoredConfig needs to answer as `config` does; None when its attributes are not plain
    JSON (then the config is loaded each run)."""
    attrs = config.to_dict()
    out = {"class": type(config).__name__, "attrs": attrs,
           "attribute_map": dict(getattr(config, "attribute_map", {}) or {}), "num_labels": config.num_labels,
           "more": _more(config, attrs)}
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    if text is not config:
        out["text"] = facts(text)
        if out["text"] is None:
            return None
    try:
        json.dumps(out, allow_nan=False)
    except (TypeError, ValueError):
        return None
    return out


def _more(config, attrs: dict) -> dict:
    """The public values the config answers beyond to_dict: properties computed from other fields
    (Falcon's head_dim) and class-level settings, where they are plain JSON."""
    import logging
    import warnings

    out = {}
    hf = logging.getLogger("transformers")  # reading a deprecated property (torch_dtype, use_return_dict) warns
    level = hf.level
    hf.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for name in dir(config):
                if name.startswith("_") or name in attrs:
                    continue
                try:
                    value = getattr(config, name)
                    if callable(value) or hasattr(value, "to_dict"):
                        continue
                    json.dumps(value, allow_nan=False)
                except Exception:  # a property that raises here, or a value that is not JSON: not answered
                    continue
                out[name] = value
    finally:
        hf.setLevel(level)
    return out


class StoredConfig:
    """A config's attributes as its class set them (facts): `getattr(c, name[, default])` as on
    the real config, `get_text_config()`, and `stored` to tell it apart. Not a model's config:
    models load their own from their files."""

    stored = True

    def __init__(self, facts: dict):
        self.__dict__["_facts"] = facts

    def __getattr__(self, name: str):
        if "_facts" not in self.__dict__:  # while unpickling or copying: nothing set yet
            raise AttributeError(name)
        f = self.__dict__["_facts"]
        if name == "num_labels":
            return f["num_labels"]
        attrs = f["attrs"]
        name = f["attribute_map"].get(name, name)
        if name in attrs:
            return attrs[name]
        if name in f["more"]:
            return f["more"][name]
        raise AttributeError(f"{f['class']} (stored) has no attribute '{name}'")

    def __setattr__(self, name, value):
        raise AttributeError("a stored config is read-only")

    def get_text_config(self, *args, **kwargs):
        f = self.__dict__["_facts"]
        return StoredConfig(f["text"]) if "text" in f else self

    def to_dict(self) -> dict:
        return dict(self.__dict__["_facts"]["attrs"])

    def __repr__(self) -> str:
        return f"StoredConfig({self.__dict__['_facts']['class']})"


def storable(raw: dict) -> bool:
    """Whether a config.json (as parsed) may be stored: not one built by the model's own code."""
    auto = raw.get("auto_map") or {}
    return not (isinstance(auto, dict) and "AutoConfig" in auto)

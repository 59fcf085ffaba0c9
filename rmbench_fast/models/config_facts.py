"""A model config's attributes kept in the result store, so that runs after the first read them
without building the config class.

Under transformers 5 any model config class imports torch.distributed.tensor and torch._dynamo
(configuration_* -> utils.type_validators -> activations -> integrations.hub_kernels), about 1 s
of every run here, although a run whose passes come from the store never loads a model. The
first run with a config.json loads it through AutoConfig as always and stores what the object
answers: for every name dir() lists (public and private, properties and class settings), the
value getattr gives, where it is plain JSON (a torch dtype is kept by name). Names whose value
is the folder's path (name_or_path) answer the path the later run names. Everything else the
real config would answer (methods, sub-config objects, values that are not JSON, properties
that raise) is marked, and a read of it loads the real config and asks it, so a stored config
is never different from the real one, only sometimes as slow. A name dir() does not list is an
AttributeError on the real config too (PretrainedConfig has no __getattr__), and so here.
Later runs with byte-identical config.json, the same transformers and this module unchanged get
a StoredConfig (tests/test_config_facts.py compares every attribute of real configs across
architectures, and the reads a run makes, recorded). Configs built by a model's own code
(auto_map AutoConfig) are never stored: their class could change with files this key does not
cover.
"""

from __future__ import annotations

import json

from .kinds import text_config


DTYPE, TUPLE = "__torch_dtype__", "__tuple__"  # how a torch.dtype and a tuple are kept: {DTYPE: "float32"}


def facts(config, path: str | None = None) -> dict | None:
    """What StoredConfig needs to answer as `config` (loaded from `path`) does; None when its
    to_dict is not plain JSON (then the config is loaded each run)."""
    import logging
    import warnings

    hf = logging.getLogger("transformers")  # reading a deprecated property (torch_dtype, use_return_dict) warns
    level = hf.level
    hf.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = _facts(config, path)
    finally:
        hf.setLevel(level)
    try:
        json.dumps(out, allow_nan=False)
    except (TypeError, ValueError):
        return None
    return out


def _facts(config, path: str | None) -> dict:
    values, at_path, real = {}, [], []
    for name in dir(config):
        if name.startswith("__"):
            continue
        try:
            value = getattr(config, name)
        except Exception:  # a property that raises here: the real config answers (raises) it
            real.append(name)
            continue
        if path is not None and isinstance(value, str) and value == path:
            at_path.append(name)
            continue
        kept = _encode(value)
        if kept is _NOT_JSON:
            real.append(name)
        else:
            values[name] = kept
    out = {"class": type(config).__name__, "attrs": config.to_dict(), "values": values, "at_path": at_path,
           "real": real, "attribute_map": dict(getattr(config, "attribute_map", {}) or {})}
    text = text_config(config)
    if text is not config:
        out["text"] = _facts(text, path)
    return out


_NOT_JSON = object()


def _encode(value):
    if callable(value) or hasattr(value, "to_dict"):
        return _NOT_JSON
    try:
        kept = _plain(value)
        json.dumps(kept, allow_nan=False)
    except (TypeError, ValueError):
        return _NOT_JSON
    return kept


def _plain(value):
    """`value` as JSON that _decode turns back into an equal value of the same types."""
    import torch

    if isinstance(value, torch.dtype):
        return {DTYPE: str(value).removeprefix("torch.")}
    if isinstance(value, tuple):
        return {TUPLE: [_plain(v) for v in value]}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value) or {DTYPE, TUPLE} & set(value):
            raise TypeError("not kept: keys JSON would change")
        return {k: _plain(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"not kept: {type(value).__name__}")


def _decode(value):
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if isinstance(value, dict):
        if set(value) == {DTYPE}:
            import torch

            return getattr(torch, value[DTYPE])
        if set(value) == {TUPLE}:
            return tuple(_decode(v) for v in value[TUPLE])
        return {k: _decode(v) for k, v in value.items()}
    return value


class StoredConfig:
    """A config's answers as its class gave them (facts): `getattr(c, name[, default])` as on the
    real config, `get_text_config()`, `to_dict()`, and `stored` to tell it apart. A read the facts
    do not hold loads the real config (`load()`, once) and asks it. Not a model's config: models
    load their own from their files."""

    stored = True

    def __init__(self, facts: dict, path: str | None = None, load=None, real_of=None):
        self.__dict__.update(_facts=facts, _path=path, _load=load, _real=None, _real_of=real_of)

    @property
    def real(self):
        """The real config: loaded on the first read the facts do not answer."""
        if self.__dict__["_real"] is None:
            load, parent = self.__dict__["_load"], self.__dict__["_real_of"]
            if parent is not None:  # a text config: the real one's
                self.__dict__["_real"] = parent().get_text_config()
            elif load is None:
                raise AttributeError(f"{self.__dict__['_facts']['class']} (stored): no way to load the real config")
            else:
                self.__dict__["_real"] = load()
        return self.__dict__["_real"]

    def __getattr__(self, name: str):
        if "_facts" not in self.__dict__:  # while unpickling or copying: nothing set yet
            raise AttributeError(name)
        f = self.__dict__["_facts"]
        name = f["attribute_map"].get(name, name) if name != "attribute_map" else name
        if name in f["values"]:
            return _decode(f["values"][name])
        if name in f["at_path"]:
            return self.__dict__["_path"]
        if name in f["real"]:
            return getattr(self.real, name)
        if name in f.get("absent", ()) or not f.get("open"):  # open: facts that are not every name (native_config)
            raise AttributeError(f"{f['class']} (stored) has no attribute '{name}'")
        return getattr(self.real, name)

    def __setattr__(self, name, value):
        raise AttributeError("a stored config is read-only")

    def get_text_config(self, *args, **kwargs):
        f = self.__dict__["_facts"]
        if "text" not in f:
            return self
        return StoredConfig(f["text"], self.__dict__["_path"], real_of=lambda: self.real)

    def to_dict(self) -> dict:
        if self.__dict__["_facts"].get("open"):
            return self.real.to_dict()
        return dict(self.__dict__["_facts"]["attrs"])

    def __repr__(self) -> str:
        return f"StoredConfig({self.__dict__['_facts']['class']})"


def storable(raw: dict) -> bool:
    """Whether a config.json (as parsed) may be stored: not one built by the model's own code."""
    auto = raw.get("auto_map") or {}
    return not (isinstance(auto, dict) and "AutoConfig" in auto)

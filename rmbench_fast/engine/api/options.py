"""The Python API's options (engine.api): keyword options checked and converted as the command line's
click options convert theirs, with one-line errors that name the keyword argument (`limit='x'`, not
`--limit`: engine.option_names), and the device and dtype of models lent in memory, which are the run's.
"""

from __future__ import annotations

import difflib
import numbers
import os
from dataclasses import fields

import numpy as np

from ...errors import UsageError
from ...models.device import DTYPES
from ...scorers.names import REF_FREE
from ..option_names import api_name
from ..options import COMPAT, ENGINES, LOGPROB_IMPLS, MODES, ScoreOptions
from .lent import device_of, dtype_of

NAMED = ("model", "ref_model", "data", "tokenizer")  # score's own parameters
FLAGS = {"no_cache": "cache", "quiet": "progress"}  # the CLI's flags that turn an option off
# the options the CLI declares as click.Choice (cli.options), with the same choices in the same order
CHOICES = {"mode": MODES, "ref_free": REF_FREE, "dtype": DTYPES, "compat": COMPAT, "logprob_impl": LOGPROB_IMPLS,
           "engine": ENGINES}


def _choice(name: str, value: str) -> str:
    """`value` among the option's choices, else a one-line error naming the keyword argument."""
    if value in CHOICES[name]:
        return value
    raise UsageError(f"{api_name(name, value)}: expected one of {', '.join(map(repr, CHOICES[name]))}")


def _value(name: str, value, annotation: str):
    """`value` checked against the option's type, as click converts the CLI's (one-line errors that
    name the keyword argument: `limit='x': not a valid integer`)."""
    kinds = [k.strip() for k in str(annotation).split("|")]
    if value is None and "None" in kinds:
        return None
    kind, bad = kinds[0], f"{api_name(name, value)}: not a valid"
    if kind == "bool":
        if isinstance(value, (bool, np.bool_)):
            return bool(value)
        raise UsageError(f"{bad} boolean (True or False)")
    if kind == "int":
        if isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_)):
            return int(value)
        raise UsageError(f"{bad} integer")
    if kind == "float":
        if isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)):
            return float(value)
        raise UsageError(f"{bad} float")
    if kind == "tuple":  # domains: a name, names separated with commas, or a list of them
        items = (value,) if isinstance(value, str) else tuple(value) if isinstance(value, (list, tuple)) else None
        if items is None or not all(isinstance(x, str) for x in items):
            raise UsageError(f"{bad} list of names")
        return items
    if isinstance(value, (str, os.PathLike)):
        return _choice(name, os.fspath(value)) if name in CHOICES else os.fspath(value)
    raise UsageError(f"{bad} string")


def option_values(given: dict) -> dict:
    """The keyword options as ScoreOptions fields; an unknown one is an error naming the nearest."""
    known = {f.name: f.type for f in fields(ScoreOptions) if f.name not in NAMED}
    out = {}
    for name, value in given.items():
        if name in FLAGS:
            if FLAGS[name] in given:
                raise UsageError(f"{name} and {FLAGS[name]} set the same option: give one")
            out[FLAGS[name]] = not _value(name, value, "bool")
        elif name in known:
            out[name] = _value(name, value, known[name])
        else:
            near = difflib.get_close_matches(name, [*known, *FLAGS], n=1)
            raise UsageError(f"no such option: {name}=" + (f"; did you mean {near[0]}=?" if near else ""))
    return out


def _where(asked_device, asked_dtype, lent, what: str):
    """(device, dtype name) of a loaded model, which it is scored on and in: asking for others is an
    error (it is never moved or cast: the caller's training would see it changed)."""
    dev, dtype = device_of(lent), str(dtype_of(lent)).replace("torch.", "")
    if asked_device is not None:
        import torch

        try:
            want = torch.device(asked_device)
        except RuntimeError as e:
            raise UsageError(f"{api_name('device', asked_device)}: not a device ({e})") from None
        if want.type != dev.type or want.index not in (None, dev.index):
            raise UsageError(f"{api_name('device', asked_device)}: the loaded {what} is on {dev}, where it is scored "
                             "(it is never moved: move it first, or leave device out)")
    if asked_dtype not in (None, dtype):
        raise UsageError(f"{api_name('dtype', asked_dtype)}: the loaded {what} is {dtype}, in which it is scored (it "
                         "is never cast: cast it first, or leave dtype out)")
    if dtype not in DTYPES:
        raise UsageError(f"the loaded {what} is {dtype}: models are scored in {', '.join(DTYPES)}")
    return dev, dtype


def where(opts: dict, lent, lent_ref) -> None:
    """Pin --device and --dtype to the loaded models': a policy loaded in memory sets them (and a
    reference given by its path is loaded there, in that dtype), else a loaded reference does (the
    policy given by its path is loaded where the reference is, in its dtype). A loaded policy and
    reference of different dtypes, or on different kinds of device, are refused: a DPO reward is a
    difference of their log-probs, which must be computed alike."""
    found = {what: _where(opts.get("device"), opts.get("dtype"), m, what)
             for what, m in (("model", lent), ("ref_model", lent_ref)) if m is not None}
    if not found:
        return
    if len(found) == 2:
        (dev, dtype), (ref_dev, ref_dtype) = found["model"], found["ref_model"]
        if dtype != ref_dtype:
            raise UsageError(f"model is {dtype} and ref_model is {ref_dtype}: a policy and its reference are scored "
                             "in one dtype, and a loaded model is never cast: cast one of them first")
        if dev.type != ref_dev.type:
            raise UsageError(f"model is on {dev} and ref_model on {ref_dev}: a policy and its reference are scored on "
                             "one kind of device, and a loaded model is never moved: move one of them first")
    dev, dtype = found.get("model") or found["ref_model"]
    opts.update(device=str(dev), dtype=dtype)

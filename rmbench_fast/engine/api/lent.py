"""Models and a tokenizer lent by the caller (the Python API, the Trainer callback): already loaded,
scored as they are, never loaded again, cast or moved.

Why this is its own path: a loaded model has no files, so nothing names its weights for the result
store (a model being trained changes in place between two calls), so its passes are neither looked
up nor kept there; its run has no stamp, so a later run of the same path never reads its results
back (engine.finished). The caller keeps the model: it is put in evaluation mode and set up as the
scorer's `load` sets up the models it loads, and afterwards every module's training flag and that
setup are as they were; it runs without gradients on its own device and in its own dtype (not
through accelerate's mixed-precision forward wrapper, nor in a caller's autocast region).

The scorers' batch functions run under torch.inference_mode (their own decorators): a module that
writes a buffer during a forward (a dynamic RoPE's inv_freq, say) would leave an inference tensor in
the caller's model. lend's no_grad cannot override them: the scorers would have to take the mode.
"""

from __future__ import annotations

import copy
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field

import torch

from ...errors import UsageError


@dataclass
class Given:
    """What a run was handed in memory. models: role ("model", "ref_model") -> a loaded transformers
    model; tokenizer: a loaded tokenizer, or None (then loaded from o.tokenizer, a path). passes: role
    -> the pass result of an earlier run of the same inputs and options to use instead of computing it
    (the callback's reference, scored once per training run); a role present with None is computed
    and its result put there."""
    models: dict
    tokenizer: object = None
    passes: dict = field(default_factory=dict)

    def model(self, role: str):
        return self.models.get(role)


def device_of(model) -> torch.device:
    """Where a model's weights are (the first parameter's device)."""
    for p in model.parameters():
        return p.device
    raise UsageError(f"{type(model).__name__}: has no parameters to score with")


def dtype_of(model) -> torch.dtype:
    """A model's floating-point dtype (transformers' `model.dtype`, else its first floating parameter's)."""
    dtype = getattr(model, "dtype", None)
    if isinstance(dtype, torch.dtype):
        return dtype
    for p in model.parameters():
        if p.is_floating_point():
            return p.dtype
    raise UsageError(f"{type(model).__name__}: has no floating-point parameters")


def config_of(model):
    """The model's config as the run reads it: a copy whose `architectures` is the model's own class
    (a model built with from_config has none, and the object's class is what it is), so mode detection
    and the checks see what will run; the model's own config is not touched."""
    config = getattr(model, "config", None)
    if config is None:
        raise UsageError(f"{type(model).__name__}: not a transformers model (it has no config)")
    config = copy.copy(config)
    config.architectures = [type(model).__name__]
    return config


def name_of(obj) -> str | None:
    """Where a loaded model or tokenizer came from (its name_or_path), or None."""
    name = getattr(obj, "name_or_path", None) or getattr(getattr(obj, "config", None), "_name_or_path", None)
    return str(name) if name else None


def describe(model) -> dict:
    """What run.json records of a lent model in place of its files' fingerprint."""
    return {"path": None, "sha256": None, "files": [], "in_memory": type(model).__name__,
            "name_or_path": name_of(model), "device": str(device_of(model)),
            "dtype": str(dtype_of(model)).replace("torch.", "")}


def plain_forward(model):
    """Undo accelerate's mixed precision for a pass: under `bf16=True` / `fp16=True` its prepare_model
    replaces the instance's `forward` with an autocast wrapper (keeping the original as
    `_original_forward`), and unwrap_model keeps it, so the model would run in half precision while
    the run records its weights' dtype. The original forward is set for the pass; returns a function
    that puts the wrapper back (the trainer keeps training with it)."""
    own = model.__dict__
    if "forward" not in own or "_original_forward" not in own:
        return lambda: None
    wrapper = own["forward"]
    own["forward"] = own["_original_forward"]

    def undo():
        own["forward"] = wrapper

    return undo


@contextmanager
def lend(scorer, model):
    """`model` ready for a pass: evaluation mode, the scorer's setup (Scorer.adopt), its own forward
    rather than a mixed-precision wrapper (plain_forward), autocast off, no gradients; afterwards
    each module's training flag, the wrapper and the setup restored, whatever happened."""
    flags = [(m, m.training) for m in model.modules()]
    device = device_of(model).type
    undo_forward = plain_forward(model)
    try:
        undo = scorer.adopt(model)
        try:
            model.eval()
            with ExitStack() as stack:
                if torch.amp.is_autocast_available(device):  # a caller's autocast region: not in its dtype
                    stack.enter_context(torch.autocast(device, enabled=False))
                stack.enter_context(torch.no_grad())
                yield model
        finally:
            undo()
            for m, training in flags:
                m.training = training
    finally:
        undo_forward()

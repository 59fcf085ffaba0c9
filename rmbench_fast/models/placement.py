"""Where a model's modules go when it is not moved to one device whole: --device-map (accelerate's
placement over the devices, disk offload included) or, inside one rank of a --tp group,
transformers' tensor-parallel split. models.loading.load_model loads inside `placed(...)`; the
scorers ask here where a placed module computes."""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Placement:
    """--device-map: accelerate places the model's modules over the devices (transformers'
    from_pretrained(device_map=..., max_memory=..., offload_folder=...)), as the official run_rm.py
    loads; modules that fit nowhere go to the CPU or to `offload_folder` on disk, behind accelerate's
    hooks. max_memory: accelerate's form ({0: "70GiB", "cpu": "200GiB"}; None: what is free)."""
    device_map: str = "auto"
    max_memory: dict | None = None
    offload_folder: str | None = None


@dataclass(frozen=True)
class TensorParallel:
    """--tp N, inside one rank of the group (engine.scaleout.tensor_parallel): transformers' own tensor
    parallelism over the process group this rank has joined (`distributed_config` where the installed
    version has it, else 4.x's `tp_plan="auto"`, which spans the whole group). Modules the plan does
    not name (an adapter's head) are replicated on every rank."""
    n: int


def tp_kwargs(n: int) -> dict:
    import transformers

    if hasattr(transformers, "DistributedConfig"):
        return {"distributed_config": transformers.DistributedConfig(tp_size=n, tp_plan="auto")}
    return {"tp_plan": "auto"}


_PLACEMENT: ContextVar[Placement | TensorParallel | None] = ContextVar("rmbench_fast_placement", default=None)


@contextmanager
def placed(placement: Placement | TensorParallel | None):
    """Every load_model inside the block (the scorers' and the adapters' loaders alike) loads with
    `placement` (None: onto the run's one device, as always)."""
    token = _PLACEMENT.set(placement)
    try:
        yield
    finally:
        _PLACEMENT.reset(token)


def current() -> Placement | TensorParallel | None:
    """The placement of the enclosing `placed(...)` block (None outside one)."""
    return _PLACEMENT.get()


def splittable(cls):
    """`cls`, or for a class that declares no `_no_split_modules` (our GRM class, some remote code) a
    subclass declaring none of its own, so that transformers 4.x takes its submodels' (the decoder's
    layers) instead of refusing device_map="auto"; transformers 5 gathers them itself."""
    if getattr(cls, "_no_split_modules", ()) is not None or not hasattr(cls, "from_pretrained"):
        return cls
    return type(cls.__name__, (cls,), {"_no_split_modules": [], "__module__": cls.__module__,
                                       "__qualname__": cls.__qualname__})


def execution_device(module, default=None):
    """Where `module` computes: its accelerate hook's execution device, else its first real
    parameter's device, else `default`."""
    dev = getattr(getattr(module, "_hf_hook", None), "execution_device", None)
    if dev is not None:
        return torch.device("cuda", dev) if isinstance(dev, int) else torch.device(dev)
    for p in module.parameters():
        if p.device.type != "meta":
            return p.device
    return default


def input_device(model, default):
    """Where a model's inputs go: the device its input embedding computes on (a placed model's first
    module), else `default`."""
    if getattr(model, "hf_device_map", None) is None:
        return default
    try:
        emb = model.get_input_embeddings()
    except (AttributeError, NotImplementedError):
        return default
    return execution_device(emb, default) if emb is not None else default


def placement_of(model) -> dict | None:
    """What run.json records of a placed model: accelerate's device map (module -> device) and the
    modules per device; None for a model on one device."""
    dmap = getattr(model, "hf_device_map", None)
    if not dmap:
        return None
    counts: dict[str, int] = {}
    for dev in dmap.values():
        counts[str(dev)] = counts.get(str(dev), 0) + 1
    return {"hf_device_map": {k: str(v) for k, v in dmap.items()}, "modules_per_device": counts}

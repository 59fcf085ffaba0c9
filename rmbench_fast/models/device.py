"""The device and dtype a run computes on: --device and --dtype, else the machine's defaults, and
the Target that names it where its passes run (the driver of a Ray run asks a worker for it)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import UsageError

if TYPE_CHECKING:  # annotations only: torch is imported where a function needs it
    import torch

DTYPES = ("float32", "bfloat16", "float16")


def __getattr__(name):
    # OUT_OF_MEMORY: what a device raises when an allocation fails (torch.OutOfMemoryError; older
    # torch: the CUDA one). Looked up on first use, so that DTYPES (the command line's choices) costs
    # no torch import.
    if name == "OUT_OF_MEMORY":
        import torch

        return getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def resolve_device(device: str | None) -> torch.device:
    import torch

    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError as e:
        raise UsageError(f"--device {device}: not a device ({e})") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"--device {device}: CUDA is not available on this machine")
    return dev


# A stand-in GPU, for tests and drills on machines without one: in a process whose environment
# sets RMBENCH_STANDIN_GPU=NAME, "cuda" is a GPU named "stand-in NAME" that computes on the CPU.
# Keys and run.json name it as such, so its results never pass for a real GPU's.
STANDIN_ENV = "RMBENCH_STANDIN_GPU"
STANDIN_MEMORY = 8 << 30


@dataclass(frozen=True)
class Target:
    """Where a run's passes compute. `device` is what store keys and run.json name, `compute` where
    tensors go (the same device but for a stand-in GPU); `gpu` is the GPU's model and `memory` its
    bytes (None on the CPU)."""
    device: torch.device
    compute: torch.device
    gpu: str | None = None
    memory: int | None = None

    def describe(self) -> dict:
        return {"device": str(self.device), "compute": str(self.compute), "gpu": self.gpu, "memory": self.memory}


def local_target(device: str | None) -> Target:
    """--device in this process (None: its GPU when it has one, else the CPU)."""
    import torch

    standin = os.environ.get(STANDIN_ENV)
    if standin and (device is None or device.split(":")[0] == "cuda"):
        return Target(torch.device(device or "cuda"), torch.device("cpu"), f"stand-in {standin}", STANDIN_MEMORY)
    dev = resolve_device(device)
    if dev.type != "cuda":
        return Target(dev, dev)
    if dev.index is not None and dev.index >= torch.cuda.device_count():
        raise UsageError(f"--device {device}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    props = torch.cuda.get_device_properties(dev)
    return Target(dev, dev, props.name, props.total_memory)


def missing_gpu() -> str | None:
    """Why this process cannot compute on the GPU it was promised (None: it can)."""
    import torch

    if torch.cuda.is_available() or os.environ.get(STANDIN_ENV):
        return None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    build = f"torch {torch.__version__}" + ("" if torch.version.cuda else ", a build without CUDA")
    return f"no CUDA device visible (CUDA_VISIBLE_DEVICES={visible!r}, {build})"


def resolve_dtype(dtype: str | None, device: torch.device) -> torch.dtype:
    import torch

    if dtype is None:
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if dtype not in DTYPES:
        raise UsageError(f"--dtype {dtype}: expected one of {', '.join(DTYPES)}")
    return getattr(torch, dtype)

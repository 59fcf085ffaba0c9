"""The device and dtype a run computes on: --device and --dtype, else the machine's defaults."""

from __future__ import annotations

import torch

from ..errors import UsageError

DTYPES = ("float32", "bfloat16", "float16")
# what a device raises when an allocation fails (torch.OutOfMemoryError; older torch: the CUDA one)
OUT_OF_MEMORY = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)


def resolve_device(device: str | None) -> torch.device:
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError as e:
        raise UsageError(f"--device {device}: not a device ({e})") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"--device {device}: CUDA is not available on this machine")
    return dev


def resolve_dtype(dtype: str | None, device: torch.device) -> torch.dtype:
    if dtype is None:
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if dtype not in DTYPES:
        raise UsageError(f"--dtype {dtype}: expected one of {', '.join(DTYPES)}")
    return getattr(torch, dtype)

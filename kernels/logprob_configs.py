"""Tile configurations of the fused log-prob kernel (kernels/logprob_triton.py): the fixed ones
(RMBENCH_LOGPROB_TUNING=0, and the interpreter's), the autotuning lists per input dtype, and their
pruning by shared memory and registers. benchmarks/logprob_tune.py measures candidates to change
them from; tests/test_kernel_compile.py compiles every kept one for sm_90 and sm_80.

Registers (ptxas -v on the ahead-of-time compiles): on Hopper every configuration here fits (the
128x256 tiles at the 255-register ceiling, no spills: wgmma keeps the accumulator compact); before
Hopper (mma.sync) a thread holding more than 64 accumulator values (32 with fp32 inputs) spills
450-600 bytes, so those tiles are not used there."""

from __future__ import annotations

import torch
import triton

INTERPRETER = dict(BLOCK_N=16, BLOCK_V=32, BLOCK_D=16, GROUP_N=4, num_warps=4, num_stages=1)
FIXED = {  # RMBENCH_LOGPROB_TUNING=0: one configuration per input dtype, no timing (Hopper and later)
    "half": dict(BLOCK_N=128, BLOCK_V=256, BLOCK_D=64, GROUP_N=8, num_warps=8, num_stages=3),
    "fp32": dict(BLOCK_N=64, BLOCK_V=128, BLOCK_D=32, GROUP_N=8, num_warps=4, num_stages=3),
}
FIXED_PRE_HOPPER = {  # the same, within the accumulator registers of mma.sync GPUs (A100, ...)
    "half": dict(BLOCK_N=128, BLOCK_V=128, BLOCK_D=64, GROUP_N=8, num_warps=8, num_stages=4),
    "fp32": dict(BLOCK_N=64, BLOCK_V=64, BLOCK_D=32, GROUP_N=8, num_warps=4, num_stages=3),
}
MAX_ACC_PER_THREAD_PRE_HOPPER = {2: 64, 4: 32}  # by input element size


def fixed(kind: str, major: int) -> dict:
    """The fixed configuration for "half" or "fp32" inputs on a GPU of compute capability `major`."""
    return (FIXED if major >= 9 else FIXED_PRE_HOPPER)[kind]


def fits(tile: dict, num_warps: int, num_stages: int, elem: int, major: int, smem: int) -> bool:
    """Whether a configuration's pipelined tiles fit in shared memory and, before Hopper, its
    accumulator in registers without spilling."""
    if num_stages * (tile["BLOCK_N"] + tile["BLOCK_V"]) * tile["BLOCK_D"] * elem > smem:
        return False
    return major >= 9 or tile["BLOCK_N"] * tile["BLOCK_V"] // (32 * num_warps) <= MAX_ACC_PER_THREAD_PRE_HOPPER[elem]


def _config(bn, bv, bd, warps, stages, group=8):
    return triton.Config(dict(BLOCK_N=bn, BLOCK_V=bv, BLOCK_D=bd, GROUP_N=group), num_warps=warps, num_stages=stages)


HALF_CONFIGS = [  # bf16 / fp16: tensor-core tiles (on an H200, 128x256x64 won most shapes, 256x128x64 the rest)
    _config(128, 256, 64, 8, 3), _config(128, 256, 64, 8, 4), _config(256, 128, 64, 8, 3),
    _config(256, 128, 32, 8, 4), _config(128, 128, 64, 8, 4), _config(64, 128, 64, 4, 4)]  # the last for small N
FP32_CONFIGS = [_config(64, 64, 32, 4, 3), _config(64, 128, 32, 4, 3), _config(32, 128, 32, 4, 3)]  # FMA units


def max_shared_mem() -> int:
    try:
        from triton.runtime import driver

        return driver.active.utils.get_device_properties(torch.cuda.current_device())["max_shared_mem"]
    except Exception:  # interpreter, or a driver without the query: assume the smallest recent GPU
        return 99 * 1024


def major_capability() -> int:
    """The current CUDA device's compute capability major (9 where there is none: the interpreter)."""
    try:
        return torch.cuda.get_device_capability()[0] if torch.cuda.is_available() else 9
    except Exception:
        return 9


def prune(configs, named_args, **kwargs):
    """The configurations for the input dtype that fit this GPU (fits())."""
    elem = named_args["h_ptr"].element_size()
    smem, major = max_shared_mem(), major_capability()
    mine = [c for c in configs if (c in FP32_CONFIGS) == (elem == 4)]
    keep = [c for c in mine if fits(c.kwargs, c.num_warps, c.num_stages, elem, major, smem)]
    return keep or [min(mine, key=lambda c: c.num_stages * c.kwargs["BLOCK_N"] * c.kwargs["BLOCK_V"])]

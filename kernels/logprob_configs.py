"""Tile configurations of the fused log-prob kernel (kernels/logprob_triton.py): the fixed ones
(RMBENCH_LOGPROB_TUNING=0, and the interpreter's), the autotuning lists per input dtype, and their
pruning by shared memory. benchmarks/logprob_tune.py measures candidates to change them from."""

from __future__ import annotations

import torch
import triton

INTERPRETER = dict(BLOCK_N=16, BLOCK_V=32, BLOCK_D=16, GROUP_N=4, num_warps=4, num_stages=1)
FIXED = {  # RMBENCH_LOGPROB_TUNING=0: one configuration per input dtype, no timing
    "half": dict(BLOCK_N=128, BLOCK_V=256, BLOCK_D=64, GROUP_N=8, num_warps=8, num_stages=3),
    "fp32": dict(BLOCK_N=64, BLOCK_V=128, BLOCK_D=32, GROUP_N=8, num_warps=4, num_stages=3),
}


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


def prune(configs, named_args, **kwargs):
    """The configurations for the input dtype whose pipelined tiles fit in shared memory."""
    elem = named_args["h_ptr"].element_size()
    smem = max_shared_mem()
    mine = [c for c in configs if (c in FP32_CONFIGS) == (elem == 4)]
    keep = [c for c in mine
            if c.num_stages * (c.kwargs["BLOCK_N"] + c.kwargs["BLOCK_V"]) * c.kwargs["BLOCK_D"] * elem <= smem]
    return keep or [min(mine, key=lambda c: c.num_stages * c.kwargs["BLOCK_N"] * c.kwargs["BLOCK_V"])]

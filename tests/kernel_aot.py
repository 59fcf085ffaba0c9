"""Ahead-of-time compilation of the fused log-prob kernel for real GPUs, without one (used by
tests/test_kernel_compile.py, run as its own process: the test session runs Triton in interpreter
mode, where kernels cannot be compiled). Prints one JSON line per case: its id, and the compiled
kernel's shared memory and PTX facts, or the compile error.

    TRITON_INTERPRET=0 python tests/kernel_aot.py
"""

import json
import sys

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from rmbench_fast.kernels import logprob_triton as T
from rmbench_fast.kernels.logprob_configs import FP32_CONFIGS, HALF_CONFIGS

SHARED_LIMIT = {90: 232448, 80: 166912}  # bytes per block (opt-in maximum) on H100/H200 and A100
POINTERS = ("h_ptr", "w_ptr", "b_ptr", "t_ptr", "m_ptr", "s_ptr", "z_ptr")


def tile_bytes(tile: dict, elem: int) -> int:
    return (tile["BLOCK_N"] + tile["BLOCK_V"]) * tile["BLOCK_D"] * elem


def compile_kernel(cc: int, dtype: str, tile: dict, warps: int, stages: int, tma: bool, softcap: bool):
    """As the JIT compiles it on a device: pointers, d and the strides 16-byte aligned."""
    bn, bv, bd = tile["BLOCK_N"], tile["BLOCK_V"], tile["BLOCK_D"]
    sig = {**{p: f"*{dtype}" for p in POINTERS}, "t_ptr": "*i64", "m_ptr": "*fp32", "s_ptr": "*fp32",
           "z_ptr": "*fp32", "N": "i32", "V": "i32", "D": "i32", "N_BUCKET": "i32", "stride_hn": "i32",
           "stride_wv": "i32", "pre": "fp32", "post": "fp32"}
    consts = dict(CHUNK_V=1024, HAS_BIAS=False, HAS_SOFTCAP=softcap, CAPPED_MAX=softcap, EVEN_D=True,
                  IEEE=dtype == "fp32", UPCAST=False, TMA=tma, GROUP_N=tile["GROUP_N"], BLOCK_N=bn, BLOCK_V=bv,
                  BLOCK_D=bd)
    if tma:
        sig.update(h_desc=f"tensordesc<{dtype}[{bn}, {bd}]>", w_desc=f"tensordesc<{dtype}[{bv}, {bd}]>")
    else:
        consts.update(h_desc=None, w_desc=None)
    sig.update({k: "constexpr" for k in consts})
    names = T._linear_chunk_kernel.arg_names
    aligned = {(names.index(n),): [["tt.divisibility", 16]] for n in (*POINTERS, "D", "stride_hn", "stride_wv")}
    src = ASTSource(fn=T._linear_chunk_kernel, signature=sig, constexprs=consts, attrs=aligned)
    return triton.compile(src, target=GPUTarget("cuda", cc, 32), options={"num_warps": warps, "num_stages": stages})


def cases():
    """(id, cc, dtype, tile, warps, stages, tma): every autotune configuration that prune() keeps on
    sm_90 and sm_80, and the TMA variant of the first three half-precision ones on sm_90."""
    for cc in (90, 80):
        for dtype, configs, elem in (("bf16", HALF_CONFIGS, 2), ("fp32", FP32_CONFIGS, 4)):
            for c in configs:
                if c.num_stages * tile_bytes(c.kwargs, elem) <= SHARED_LIMIT[cc]:
                    k = c.kwargs
                    yield (f"sm{cc}-{dtype}-{k['BLOCK_N']}x{k['BLOCK_V']}x{k['BLOCK_D']}-w{c.num_warps}-s{c.num_stages}",
                           cc, dtype, k, c.num_warps, c.num_stages, False)
    for c in HALF_CONFIGS[:3]:
        k = c.kwargs
        yield (f"sm90-bf16-tma-{k['BLOCK_N']}x{k['BLOCK_V']}x{k['BLOCK_D']}-s{c.num_stages}", 90, "bf16", k,
               c.num_warps, c.num_stages, True)


def main():
    for case_id, cc, dtype, tile, warps, stages, tma in cases():
        row = {"id": case_id, "cc": cc, "tile_bytes": tile_bytes(tile, 2 if dtype == "bf16" else 4),
               "shared_limit": SHARED_LIMIT[cc], "tma": tma}
        try:
            k = compile_kernel(cc, dtype, tile, warps, stages, tma, softcap=tile["BLOCK_N"] == 128)
            ptx = k.asm["ptx"]
            row.update(shared=k.metadata.shared, wgmma="wgmma.mma_async" in ptx,
                       tma_loads="cp.async.bulk.tensor" in ptx, cp_async="cp.async" in ptx)
        except Exception as e:  # noqa: BLE001 - reported per case
            row["error"] = f"{type(e).__name__}: {str(e)[:500]}"
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

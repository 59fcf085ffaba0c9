"""Ahead-of-time compilation of the fused log-prob kernel for real GPUs, without one (used by
tests/test_kernel_compile.py, run as its own process: the test session runs Triton in interpreter
mode, where kernels cannot be compiled). Prints one JSON line per case: its id, and the compiled
kernel's shared memory, PTX facts and (from ptxas -v) registers and spills, or the compile error.

    TRITON_INTERPRET=0 python tests/kernel_aot.py
"""

import json
import os
import re
import subprocess
import sys
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from rmbench_fast.kernels import logprob_triton as T
from rmbench_fast.kernels.logprob_configs import FIXED, FIXED_PRE_HOPPER, FP32_CONFIGS, HALF_CONFIGS, fits

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


def resources(ptx: str, cc: int) -> dict:
    """Registers per thread and spilled bytes, from the ptxas that ships with Triton (-v); {} when
    none of its ptxas builds accepts the PTX."""
    bin_dir = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "k.ptx")
        with open(src, "w") as f:
            f.write(ptx)
        for name in ("ptxas-blackwell", "ptxas"):  # the newer one reads the newer PTX versions
            exe = os.path.join(bin_dir, name)
            if not os.path.exists(exe):
                continue
            out = subprocess.run([exe, f"-arch=sm_{cc}{'a' if cc == 90 else ''}", "-v", src, "-o",
                                  os.path.join(tmp, "k.cubin")], capture_output=True, text=True)
            regs = re.findall(r"Used (\d+) registers", out.stderr + out.stdout)
            spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", out.stderr + out.stdout)
            if out.returncode == 0 and regs and spills:
                return {"regs": int(regs[-1]), "spill_bytes": int(spills[-1][0]) + int(spills[-1][1])}
    return {}


def cases():
    """(id, cc, dtype, tile, warps, stages, tma): every autotune configuration that prune() keeps on
    sm_90 and sm_80 (logprob_configs.fits), the fixed ones, and the TMA variant of the first three
    half-precision ones on sm_90."""
    for cc in (90, 80):
        for dtype, configs, elem in (("bf16", HALF_CONFIGS, 2), ("fp32", FP32_CONFIGS, 4)):
            kind = "half" if elem == 2 else "fp32"
            pinned = (FIXED if cc >= 90 else FIXED_PRE_HOPPER)[kind]
            tiles = [(c.kwargs, c.num_warps, c.num_stages) for c in configs]
            tiles += [({k: v for k, v in pinned.items() if k.isupper()}, pinned["num_warps"], pinned["num_stages"])]
            seen = set()
            for k, warps, stages in tiles:
                case_id = f"sm{cc}-{dtype}-{k['BLOCK_N']}x{k['BLOCK_V']}x{k['BLOCK_D']}-w{warps}-s{stages}"
                if case_id not in seen and fits(k, warps, stages, elem, cc // 10, SHARED_LIMIT[cc]):
                    seen.add(case_id)
                    yield case_id, cc, dtype, k, warps, stages, False
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
                       tma_loads="cp.async.bulk.tensor" in ptx, cp_async="cp.async" in ptx, **resources(ptx, cc))
        except Exception as e:  # noqa: BLE001 - reported per case
            row["error"] = f"{type(e).__name__}: {str(e)[:500]}"
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

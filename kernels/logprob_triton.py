"""Triton kernel for response-token log-probs from hidden states: log_softmax(head(H))[target]
without an [N, V] tensor, shaped like a GEMM so that every SM has work at any N.

Grid: one program per (row tile of BLOCK_N rows) x (vocabulary chunk of CHUNK_V columns), in
the grouped order of Triton's matmul tutorial: GROUP_N neighbouring row tiles take the same chunk
one after the other, so that chunk's W tiles are read from L2, not HBM. A program walks its chunk
in BLOCK_V tiles (CHUNK_V / BLOCK_V of them), computes each [BLOCK_N, BLOCK_V] tile of H @ W^T on
chip (fp32 accumulation over BLOCK_D slices of d), applies bias / scale / soft-capping, and folds
the tile into a running max and sum of exp2 (log2(e) folded into the head's multipliers; with
soft-capping the max is the cap itself, so no running max). It then writes one partial (max, sum)
per row into fp32 [n_chunks, N] buffers, and the program whose chunk holds a row's target writes
that row's target logit. `_merge_kernel` combines the partials of each row in a fixed order. No
atomics, no locks: a row's result depends only on its own data and the tile configuration, never
on the other rows of the batch or on scheduling (checked bit for bit, on an H200 too).

CHUNK_V depends on V only (1024 up to V = 262144). Extra memory: 8 * n_chunks * rows + 4 * rows
bytes, rows = min(N, MAX_ROWS) (longer batches run in slices of MAX_ROWS rows), n_chunks =
ceil(V / CHUNK_V) <= 256: at most 32 MiB + 64 KiB (31 MiB at N = 16384, V = 256000).

Precision: bf16 / fp16 inputs use the tensor cores (tl.dot's default) with fp32 accumulation; the
products are exact in fp32. fp32 inputs default to exact IEEE fp32 products (input_precision
"ieee", FMA units, no tensor cores) so results match an fp32 reference at 1e-4; fp32_precision=
"tf32" trades that for tensor-core speed (about 5e-3 off). Tuning: triton.autotune keyed on (V,
d, dtypes, N bucket) over the lists of logprob_configs.py; RMBENCH_LOGPROB_TUNING=0 or config= pins
one configuration; config["TMA"] loads the tiles through host-side tensor descriptors (Hopper's
tensor memory accelerator; bit-identical to the pointer loads, not in the autotune lists until a
GPU shows it faster: benchmarks/logprob_tune.py); under
TRITON_INTERPRET=1 (CPU tests) one small fixed configuration, and bf16 tiles are upcast to fp32
before tl.dot (the interpreter's half-precision dot is wrong). Targets are validated after the
launch (they only select values, never addresses), so the check's device sync overlaps the kernel.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from .common import LN2, check_targets, head_multipliers, n_bucket, tuning_enabled
from .logprob_configs import FIXED, FP32_CONFIGS, HALF_CONFIGS, INTERPRETER, fixed, prune  # noqa: F401 (re-exported)

_LN2 = tl.constexpr(LN2)  # Triton kernels read globals only as constexpr
MAX_ROWS = 16384
@triton.jit
def _tanh(x):
    # tanh(x) = sign(x) * (1 - e^{-2|x|}) / (1 + e^{-2|x|}), stable for large |x|; e^y = 2^(y log2 e)
    e = tl.exp2(-2.8853900817779268 * tl.abs(x))
    t = tl.fdiv(1.0 - e, 1.0 + e)  # the fast (non-IEEE, ~2 ulp) division
    return tl.where(x < 0, -t, t)


@triton.jit
def _dot_step(acc, h_rows, w_cols, d0, D, EVEN_D: tl.constexpr, IEEE: tl.constexpr, UPCAST: tl.constexpr,
              BLOCK_D: tl.constexpr):
    """acc += H[rows, d0:d0 + BLOCK_D] @ W[cols, d0:d0 + BLOCK_D]^T."""
    ds = d0 + tl.arange(0, BLOCK_D)
    if EVEN_D:
        a = tl.load(h_rows + ds[None, :])
        b = tl.load(w_cols + ds[:, None])
    else:
        a = tl.load(h_rows + ds[None, :], mask=ds[None, :] < D, other=0.0)
        b = tl.load(w_cols + ds[:, None], mask=ds[:, None] < D, other=0.0)
    if UPCAST:  # interpreter: its half-precision dot is wrong; bf16 x bf16 is exact in fp32
        return tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    elif IEEE:
        return tl.dot(a, b, acc, input_precision="ieee")
    else:
        return tl.dot(a, b, acc)


@triton.jit
def _fold_tile(acc, cols, col_ok, b_ptr, tgt, m, s, z_tgt, pre, post,
               HAS_BIAS: tl.constexpr, HAS_SOFTCAP: tl.constexpr, CAPPED_MAX: tl.constexpr):
    """The head's epilogue on one [BLOCK_N, BLOCK_V] tile of h @ W^T, folded into each row's
    running max m and sum s of 2^z (z = logit * log2 e), and its target's z."""
    if HAS_BIAS:
        acc += tl.load(b_ptr + tl.where(col_ok, cols, 0)).to(tl.float32)[None, :]
    if HAS_SOFTCAP:
        z = post * _tanh(acc * pre)
    else:
        z = acc * pre
    z = tl.where(col_ok[None, :], z, float("-inf"))
    if CAPPED_MAX:  # soft-capped: z <= post = m, and 2^(z - post) >= 2^-120 stays normal: no running max
        s += tl.sum(tl.exp2(z - post), 1)
    else:
        m_new = tl.maximum(m, tl.max(z, 1))
        s = s * tl.exp2(m - m_new) + tl.sum(tl.exp2(z - m_new[:, None]), 1)
        m = m_new
    z_tgt += tl.sum(tl.where(cols[None, :] == tgt[:, None], z, 0.0), 1)
    return m, s, z_tgt


@triton.jit
def _linear_chunk_kernel(
    h_ptr, w_ptr, b_ptr, t_ptr, m_ptr, s_ptr, z_ptr, h_desc, w_desc,  # descriptors: TMA only
    N, V, D, N_BUCKET,  # N_BUCKET: only an autotuning key
    stride_hn, stride_wv,
    pre, post,  # z = acc * pre, or post * tanh(acc * pre) with soft-capping: the logit times log2(e)
    CHUNK_V: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_SOFTCAP: tl.constexpr, CAPPED_MAX: tl.constexpr,
    EVEN_D: tl.constexpr, IEEE: tl.constexpr, UPCAST: tl.constexpr, TMA: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_D: tl.constexpr, GROUP_N: tl.constexpr,
):
    # grouped order: GROUP_N row tiles x one chunk, then the next chunk, as the matmul tutorial
    pid = tl.program_id(0)
    n_tiles = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_N * tl.cdiv(V, CHUNK_V)
    first = (pid // per_group) * GROUP_N
    size = min(n_tiles - first, GROUP_N)
    tile = first + (pid % per_group) % size
    chunk = (pid % per_group) // size

    rows = tile * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < N
    rows = tl.where(row_ok, rows, 0)  # tail rows re-read row 0 and are never stored: no load masks
    tgt = tl.load(t_ptr + rows).to(tl.int32)
    h_rows = h_ptr + rows.to(tl.int64)[:, None] * stride_hn  # int64: N * d may exceed 2^31
    v_lo = chunk * CHUNK_V
    v_hi = min(v_lo + CHUNK_V, V)
    m = tl.full((BLOCK_N,), float("-inf"), tl.float32)
    if CAPPED_MAX:
        m = tl.full((BLOCK_N,), 1.0, tl.float32) * post
    s = tl.zeros((BLOCK_N,), tl.float32)
    z_tgt = tl.zeros((BLOCK_N,), tl.float32)
    for v0 in range(v_lo, v_hi, BLOCK_V):  # the chunk's tiles (a flattened (tile, d) loop was no faster)
        cols = v0 + tl.arange(0, BLOCK_V)
        col_ok = cols < v_hi  # the vocabulary's tail, or a chunk_v that no BLOCK_V divides
        w_cols = w_ptr + tl.where(col_ok, cols, 0).to(tl.int64)[None, :] * stride_wv  # V * d may exceed 2^31
        acc = tl.zeros((BLOCK_N, BLOCK_V), tl.float32)
        for d0 in range(0, D, BLOCK_D):
            if TMA:  # tensor-memory-accelerator loads (Hopper+), zero-filled past N, V and d: no masks
                a = h_desc.load([tile * BLOCK_N, d0])
                b = w_desc.load([v0, d0]).T
                if UPCAST:
                    acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
                elif IEEE:
                    acc = tl.dot(a, b, acc, input_precision="ieee")
                else:
                    acc = tl.dot(a, b, acc)
            else:
                acc = _dot_step(acc, h_rows, w_cols, d0, D, EVEN_D, IEEE, UPCAST, BLOCK_D)
        m, s, z_tgt = _fold_tile(acc, cols, col_ok, b_ptr, tgt, m, s, z_tgt, pre, post,
                                 HAS_BIAS, HAS_SOFTCAP, CAPPED_MAX)
    part = chunk.to(tl.int64) * N + rows
    tl.store(m_ptr + part, m, mask=row_ok)
    tl.store(s_ptr + part, s, mask=row_ok)
    tl.store(z_ptr + rows, z_tgt, mask=row_ok & (tgt >= v_lo) & (tgt < v_hi))


_heuristics = triton.heuristics({"EVEN_D": lambda a: a["D"] % a["BLOCK_D"] == 0})
_linear_fixed = _heuristics(_linear_chunk_kernel)
_linear_tuned = triton.autotune(HALF_CONFIGS + FP32_CONFIGS, key=["V", "D", "N_BUCKET"],
                                prune_configs_by={"early_config_prune": prune})(_heuristics(_linear_chunk_kernel))


@triton.jit
def _merge_kernel(m_ptr, s_ptr, z_ptr, out_ptr, N, N_CHUNKS, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """out[row] = ln 2 * (z[row] - log2 sum_c s[c, row] 2^(m[c, row])), over chunks c in a fixed
    order (BLOCK_C at a time, each block by the same reduction tree for every row)."""
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    row_ok = rows < N
    rows = tl.where(row_ok, rows, 0)
    big_m = tl.full((BLOCK_R,), float("-inf"), tl.float32)
    big_s = tl.zeros((BLOCK_R,), tl.float32)
    for c0 in range(0, N_CHUNKS, BLOCK_C):
        cs = c0 + tl.arange(0, BLOCK_C)
        c_ok = cs < N_CHUNKS
        offs = cs.to(tl.int64)[:, None] * N + rows[None, :]
        m = tl.load(m_ptr + offs, mask=c_ok[:, None], other=float("-inf"))
        s = tl.load(s_ptr + offs, mask=c_ok[:, None], other=0.0)
        m_new = tl.maximum(big_m, tl.max(m, 0))
        m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)  # all -inf so far (logits input): no NaN
        big_s = big_s * tl.exp2(big_m - m_ref) + tl.sum(s * tl.exp2(m - m_ref[None, :]), 0)
        big_m = m_new
    z = tl.load(z_ptr + rows)
    tl.store(out_ptr + rows, ((z - big_m) - tl.log2(big_s)) * _LN2, mask=row_ok)


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def merge_partials(m, s, z, out, n, n_chunks):
    """Launch the fixed-order merge of [n_chunks, n] partials into out [n]."""
    block_r, block_c = (16, 8) if interpreting() else (128, 16)
    _merge_kernel[(triton.cdiv(n, block_r),)](m, s, z, out, n, n_chunks, BLOCK_R=block_r, BLOCK_C=block_c)


def chunk_size(v: int) -> int:
    """Vocabulary columns per chunk: 1024 (a multiple of every BLOCK_V), or more for vocabularies
    above 262144 so that there are at most 256 chunks. Depends on V only: fixed rounding."""
    if interpreting():
        return 64
    return 1024 * triton.cdiv(v, 1024 * 256)


def partial_bytes(n: int, v: int, chunk_v: int | None = None) -> int:
    """Extra device memory of fused_linear_logprobs: the (max, sum) partials and target logits."""
    rows = min(n, MAX_ROWS)
    return 4 * rows * (2 * triton.cdiv(v, chunk_v or chunk_size(v)) + 1)


def fused_linear_logprobs(h, weight, targets, bias=None, scale=None, softcap=None, divisor=None, *,
                          config: dict | None = None, fp32_precision: str = "ieee",
                          chunk_v: int | None = None, max_rows: int = MAX_ROWS) -> torch.Tensor:
    """log_softmax(head(h))[target] per row, fp32 [N]; h [N, d] and weight [V, d] in one dtype.
    The head: (h @ W^T + b) * scale / divisor, then softcap * tanh(. / softcap).

    config: pin one tile configuration (dict of BLOCK_N, BLOCK_V, BLOCK_D, GROUP_N, num_warps,
    num_stages, and optionally TMA: True to load tiles through tensor descriptors, for GPUs with a
    tensor memory accelerator; measured by benchmarks/logprob_tune.py, not yet autotuned) instead of
    autotuning; fp32_precision: "ieee" (exact) or "tf32" for fp32 inputs."""
    n, d = h.shape
    v = weight.shape[0]
    if targets.shape != (n,):
        check_targets(targets, n, v)  # raises
    if h.dtype != weight.dtype or weight.shape[1] != d:
        raise ValueError(f"h {tuple(h.shape)} {h.dtype} and weight {tuple(weight.shape)} {weight.dtype} do not match")
    if fp32_precision not in ("ieee", "tf32"):
        raise ValueError(f"fp32_precision must be 'ieee' or 'tf32', not {fp32_precision!r}")
    out = torch.empty(n, dtype=torch.float32, device=h.device)
    if n == 0:
        return out
    h = h if h.stride(-1) == 1 else h.contiguous()
    weight = weight if weight.stride(-1) == 1 else weight.contiguous()
    targets = targets.contiguous()
    pre, post = head_multipliers(scale, softcap, divisor)
    chunk_v = chunk_v or chunk_size(v)
    n_chunks = triton.cdiv(v, chunk_v)
    rows = min(n, max_rows)
    m = torch.empty(n_chunks * rows, dtype=torch.float32, device=h.device)
    s = torch.empty_like(m)
    z = torch.empty(rows, dtype=torch.float32, device=h.device)
    fp32 = h.dtype == torch.float32
    flags = dict(CHUNK_V=chunk_v, HAS_BIAS=bias is not None, HAS_SOFTCAP=softcap is not None,
                 CAPPED_MAX=softcap is not None and 0 < 2 * post <= 120,  # |z| <= post; 2^(z - post) stays normal
                 IEEE=fp32 and fp32_precision == "ieee", UPCAST=interpreting() and not fp32)
    if config is None and (interpreting() or not tuning_enabled()):
        config = INTERPRETER if interpreting() else fixed("fp32" if fp32 else "half",
                                                          torch.cuda.get_device_capability(h.device)[0])
    config = dict(config) if config is not None else None
    flags["TMA"] = bool(config and config.pop("TMA", False))
    for r0 in range(0, n, rows):
        r = min(rows, n - r0)
        descs = _descriptors(h[r0:r0 + r], weight, config) if flags["TMA"] else (None, None)
        args = (h[r0:r0 + r], weight, bias if bias is not None else h, targets[r0:r0 + r], m, s, z, *descs,
                r, v, d, n_bucket(r), h.stride(0), weight.stride(0), pre, post)
        if config is not None:
            grid = (triton.cdiv(r, config["BLOCK_N"]) * n_chunks,)
            _linear_fixed[grid](*args, **flags, **config)
        else:
            _linear_tuned[lambda meta: (triton.cdiv(r, meta["BLOCK_N"]) * n_chunks,)](*args, **flags)
        merge_partials(m, s, z, out[r0:r0 + r], r, n_chunks)
    # targets only select values in the kernels, never addresses: validating after the launch
    # lets the check's device sync overlap the kernels
    check_targets(targets, n, v)
    return out


def _descriptors(h, weight, config):
    """Host-side tensor descriptors of h [N, d] and W [V, d] with the configuration's tile shapes."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    if h.is_cuda and torch.cuda.get_device_capability(h.device)[0] < 9:
        raise ValueError("TMA loads need a GPU with a tensor memory accelerator (compute capability 9.0+)")
    if any(t.data_ptr() % 16 or (t.stride(0) * t.element_size()) % 16 for t in (h, weight)):
        raise ValueError("TMA loads need 16-byte aligned rows (hidden size a multiple of 16 bytes)")
    return (TensorDescriptor.from_tensor(h, [config["BLOCK_N"], config["BLOCK_D"]]),
            TensorDescriptor.from_tensor(weight, [config["BLOCK_V"], config["BLOCK_D"]]))


def tuned_config() -> dict | None:
    """The configuration the autotuner chose at its last run (None before any, or when fixed)."""
    best = getattr(_linear_tuned, "best_config", None)
    if best is None:
        return None
    return dict(best.kwargs, num_warps=best.num_warps, num_stages=best.num_stages)

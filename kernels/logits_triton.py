"""Triton kernel for log_softmax(logits)[target] per row, for models that must return logits.

Memory-bound: it reads the N x V logits once, in their own dtype. Grid: (row tile of BLOCK_N rows)
x (vocabulary chunk of CHUNK_V columns), so that a small batch (N = 1024, V = 256000) still fills
every SM; each program folds its chunk, BLOCK_V columns at a time, into a running fp32 (max, sum
of exp2) per element of the tile (no reductions inside the loop, one exp2 per logit), reduces
them to one partial per row at the end, and the program holding a row's target reads and writes
its logit. The partials are
merged per row in a fixed order by the same `_merge_kernel` as the linear kernel: deterministic,
and a row's result does not depend on the other rows. Extra memory: 8 * N * ceil(V / CHUNK_V)
+ 4 * N bytes (4.1 MiB at N = 16384, V = 256000).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .common import LOG2E, check_targets
from .logprob_triton import interpreting, merge_partials

_LOG2E = tl.constexpr(LOG2E)  # Triton kernels read globals only as constexpr


@triton.jit
def _logits_chunk_kernel(x_ptr, t_ptr, m_ptr, s_ptr, z_ptr, N, V, stride_n,
                         CHUNK_V: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_V: tl.constexpr):
    chunk = tl.program_id(1)
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < N
    rows = tl.where(row_ok, rows, 0)
    tgt = tl.load(t_ptr + rows).to(tl.int32)
    x_rows = x_ptr + rows.to(tl.int64)[:, None] * stride_n
    v_lo = chunk * CHUNK_V
    v_hi = min(v_lo + CHUNK_V, V)
    # per element (row, lane) running max and sum of 2^z, no reductions in the loop and one exp2 per
    # logit: the smaller of the new value and the old max is scaled by 2^-|difference|. The max
    # starts at a finite -3e38, so -inf logits (masked tokens) add 2^-inf = 0 and never give NaN.
    m = tl.full((BLOCK_N, BLOCK_V), -3.0e38, tl.float32)
    s = tl.zeros((BLOCK_N, BLOCK_V), tl.float32)
    for v0 in range(v_lo, v_hi, BLOCK_V):
        cols = v0 + tl.arange(0, BLOCK_V)
        x = tl.load(x_rows + cols[None, :], mask=(cols < v_hi)[None, :], other=float("-inf"))
        z = x.to(tl.float32) * _LOG2E
        e = tl.exp2(-tl.abs(z - m))
        s = tl.where(z > m, s * e + 1.0, s + e)
        m = tl.maximum(m, z)
    row_m = tl.max(m, 1)
    part = chunk.to(tl.int64) * N + rows
    tl.store(m_ptr + part, row_m, mask=row_ok)
    tl.store(s_ptr + part, tl.sum(s * tl.exp2(m - row_m[:, None]), 1), mask=row_ok)
    # the target's logit, read once by the program whose chunk holds it (masked: never out of bounds)
    hit = row_ok & (tgt >= v_lo) & (tgt < v_hi)
    z_tgt = tl.load(x_ptr + rows.to(tl.int64) * stride_n + tgt, mask=hit, other=0.0).to(tl.float32) * _LOG2E
    tl.store(z_ptr + rows, z_tgt, mask=hit)


def logits_logprobs(logits, targets, *, chunk_v: int | None = None) -> torch.Tensor:
    """log_softmax(logits)[target] per row, fp32 [N], reading logits [N, V] in their own dtype."""
    n, v = logits.shape
    if targets.shape != (n,):
        check_targets(targets, n, v)  # raises
    out = torch.empty(n, dtype=torch.float32, device=logits.device)
    if n == 0:
        return out
    if logits.stride(1) != 1:
        logits = logits.contiguous()
    if interpreting():
        block_n, block_v, chunk_v, warps = 4, 32, chunk_v or 64, 4
    else:  # 4 x 1024 tiles, 8 tiles per chunk
        block_n, block_v, chunk_v, warps = 4, 1024, chunk_v or 8192, 4
    n_chunks = triton.cdiv(v, chunk_v)
    m = torch.empty(n_chunks * n, dtype=torch.float32, device=logits.device)
    s = torch.empty_like(m)
    z = torch.empty(n, dtype=torch.float32, device=logits.device)
    _logits_chunk_kernel[(triton.cdiv(n, block_n), n_chunks)](
        logits, targets.contiguous(), m, s, z, n, v, logits.stride(0),
        CHUNK_V=chunk_v, BLOCK_N=block_n, BLOCK_V=block_v, num_warps=warps)
    merge_partials(m, s, z, out, n, n_chunks)
    check_targets(targets, n, v)  # after the launch (targets select values, never addresses): no stall
    return out

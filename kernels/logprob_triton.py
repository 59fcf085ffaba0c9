"""Triton kernels for response-token log-probs.

`fused_linear_logprobs`: each program owns BLOCK_N rows of H; it walks the vocabulary in BLOCK_V
tiles, computes the tile of H @ W^T on chip (fp32 accumulation, over BLOCK_D slices of d), applies
bias / scale / soft-capping, and folds the tile into an online fp32 max / sum (log-sum-exp) while
picking the target logit on the way. Only the N log-probs are written: no [N, V] tensor exists.

`logits_logprobs`: for models that must return logits, one program per row reads the logits in
their own dtype, in BLOCK_V tiles, with the same online log-sum-exp.

On CPU these run under TRITON_INTERPRET=1 (tests, small shapes); their torch references are in
logprob_reference.py.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _tanh(x):
    # tanh(x) = sign(x) * (1 - e^{-2|x|}) / (1 + e^{-2|x|}), stable for large |x|
    e = tl.exp(-2.0 * tl.abs(x))
    t = (1.0 - e) / (1.0 + e)
    return tl.where(x < 0, -t, t)


@triton.jit
def _fused_linear_logprob_kernel(
    h_ptr, w_ptr, b_ptr, t_ptr, out_ptr,
    N, V, D,
    stride_hn, stride_hd, stride_wv, stride_wd,
    scale, softcap,
    HAS_BIAS: tl.constexpr, HAS_SCALE: tl.constexpr, HAS_SOFTCAP: tl.constexpr, IEEE: tl.constexpr,
    UPCAST: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_D: tl.constexpr,
):
    pid = tl.program_id(0)
    rows = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < N
    tgt = tl.load(t_ptr + rows, mask=row_ok, other=0).to(tl.int32)
    m = tl.full((BLOCK_N,), float("-inf"), tl.float32)
    s = tl.zeros((BLOCK_N,), tl.float32)
    picked = tl.zeros((BLOCK_N,), tl.float32)
    for v0 in range(0, V, BLOCK_V):
        cols = v0 + tl.arange(0, BLOCK_V)
        col_ok = cols < V
        acc = tl.zeros((BLOCK_N, BLOCK_V), tl.float32)
        for d0 in range(0, D, BLOCK_D):
            ds = d0 + tl.arange(0, BLOCK_D)
            d_ok = ds < D
            h = tl.load(h_ptr + rows[:, None].to(tl.int64) * stride_hn + ds[None, :] * stride_hd,
                        mask=row_ok[:, None] & d_ok[None, :], other=0.0)
            w = tl.load(w_ptr + cols[:, None].to(tl.int64) * stride_wv + ds[None, :] * stride_wd,
                        mask=col_ok[:, None] & d_ok[None, :], other=0.0)
            if UPCAST:  # the interpreter's half-precision dot is wrong; bf16 x bf16 is exact in fp32
                acc = tl.dot(h.to(tl.float32), tl.trans(w.to(tl.float32)), acc, input_precision="ieee")
            elif IEEE:
                acc = tl.dot(h, tl.trans(w), acc, input_precision="ieee")
            else:
                acc = tl.dot(h, tl.trans(w), acc)
        if HAS_BIAS:
            acc += tl.load(b_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
        if HAS_SCALE:
            acc = acc * scale
        if HAS_SOFTCAP:
            acc = softcap * _tanh(acc / softcap)
        acc = tl.where(col_ok[None, :], acc, float("-inf"))
        m_new = tl.maximum(m, tl.max(acc, 1))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(acc - m_new[:, None]), 1)
        m = m_new
        picked += tl.sum(tl.where(cols[None, :] == tgt[:, None], acc, 0.0), 1)
    tl.store(out_ptr + rows, picked - (m + tl.log(s)), mask=row_ok)


@triton.jit
def _logits_logprob_kernel(x_ptr, t_ptr, out_ptr, V, stride_n, BLOCK_V: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    tgt = tl.load(t_ptr + row).to(tl.int64)
    m = tl.full((BLOCK_V,), float("-inf"), tl.float32)
    s = tl.zeros((BLOCK_V,), tl.float32)
    for v0 in range(0, V, BLOCK_V):
        cols = v0 + tl.arange(0, BLOCK_V)
        x = tl.load(x_ptr + row * stride_n + cols, mask=cols < V, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        # lanes still at -inf (masked) contribute nothing; avoid exp(-inf - -inf)
        s = tl.where(m_new == float("-inf"), 0.0, s * tl.exp(m - m_new) + tl.exp(x - m_new))
        m = m_new
    m_all = tl.max(m, 0)
    total = tl.sum(tl.where(m == float("-inf"), 0.0, s * tl.exp(m - m_all)), 0)
    picked = tl.load(x_ptr + row * stride_n + tgt).to(tl.float32)
    tl.store(out_ptr + row, picked - (m_all + tl.log(total)))


def _interpreting() -> bool:
    import os

    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def default_blocks(h: torch.Tensor) -> tuple[int, int, int, int]:
    """(BLOCK_N, BLOCK_V, BLOCK_D, num_warps): small tiles for the interpreter, tensor-core sized
    tiles on the GPU."""
    if _interpreting() or h.device.type != "cuda":
        return 16, 32, 16, 4
    if h.dtype == torch.float32:  # no tensor cores for exact fp32: smaller tiles keep shared memory in bounds
        return 64, 64, 32, 4
    return 128, 128, 64, 8


def fused_linear_logprobs(h, weight, targets, bias=None, scale=None, softcap=None, blocks=None) -> torch.Tensor:
    """log_softmax(head(h))[target] per row, fp32, [N]. h [N, d] and weight [V, d] in one dtype."""
    n, d = h.shape
    v = weight.shape[0]
    out = torch.empty(n, dtype=torch.float32, device=h.device)
    if n == 0:
        return out
    block_n, block_v, block_d, warps = blocks or default_blocks(h)
    ieee = h.dtype == torch.float32  # no TF32: fp32 inputs keep fp32 products
    grid = (triton.cdiv(n, block_n),)
    _fused_linear_logprob_kernel[grid](
        h, weight, bias if bias is not None else h, targets.contiguous(), out,
        n, v, d, h.stride(0), h.stride(1), weight.stride(0), weight.stride(1),
        float(scale) if scale is not None else 1.0, float(softcap) if softcap is not None else 1.0,
        HAS_BIAS=bias is not None, HAS_SCALE=scale is not None, HAS_SOFTCAP=softcap is not None, IEEE=ieee,
        UPCAST=_interpreting() and not ieee,
        BLOCK_N=block_n, BLOCK_V=block_v, BLOCK_D=block_d, num_warps=warps,
    )
    return out


def logits_logprobs(logits, targets, block_v: int | None = None) -> torch.Tensor:
    """log_softmax(logits)[target] per row, fp32, reading logits [N, V] in their own dtype."""
    n, v = logits.shape
    out = torch.empty(n, dtype=torch.float32, device=logits.device)
    if n == 0:
        return out
    if logits.stride(1) != 1:
        logits = logits.contiguous()
    block_v = block_v or (64 if _interpreting() else 2048)
    _logits_logprob_kernel[(n,)](logits, targets.contiguous(), out, v, logits.stride(0), BLOCK_V=block_v)
    return out

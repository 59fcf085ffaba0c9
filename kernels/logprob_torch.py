"""The torch path of the fused log-prob op (CPU, and GPU fallback): rows and vocabulary in chunks,
log-sum-exp in fp32, Liger-Kernel style. Memory is bounded by the chunk sizes (row_chunk x
vocab_chunk fp32 logits), never by N x V; on CPU the chunks stay in cache, so it runs as fast as
the bare matmul. The target logit is read from the same fp32 logits that enter the log-sum-exp."""

from __future__ import annotations

import torch

from .common import check_targets

_MM_OUT_DTYPE: dict[str, bool] = {}  # per device type: does torch.mm(a, b, out_dtype=float32) work?


def _half_mm_ok(h: torch.Tensor) -> bool:
    """On CUDA, bf16/fp16 x bf16/fp16 -> fp32 matmuls keep the tensor cores and exact products
    (torch.mm's out_dtype, torch >= 2.8); elsewhere the inputs are upcast chunk by chunk."""
    if h.dtype == torch.float32 or h.device.type != "cuda":
        return False
    if h.device.type not in _MM_OUT_DTYPE:
        try:
            a = torch.ones(16, 16, dtype=h.dtype, device=h.device)
            _MM_OUT_DTYPE[h.device.type] = torch.mm(a, a, out_dtype=torch.float32).dtype == torch.float32
        except (TypeError, RuntimeError, NotImplementedError):
            _MM_OUT_DTYPE[h.device.type] = False
    return _MM_OUT_DTYPE[h.device.type]


def _head_(logits, bias, mult, softcap):
    """In place: (logits + b) * mult, then softcap * tanh(logits / softcap)."""
    if bias is not None:
        logits += bias.float()
    if mult != 1.0:
        logits *= mult
    if softcap is not None:
        logits.div_(softcap).tanh_().mul_(softcap)
    return logits


def chunk_logits(hr, weight, bias, v0: int, vocab_chunk: int, mult, softcap, half_mm: bool, buf):
    """fp32 logits of rows `hr` against head rows [v0, v0 + vocab_chunk), the head's transforms
    applied: a half-precision matmul with fp32 output where it is exact enough (half_mm), else fp32
    into `buf`. One chunk of the chunked ops (here and kernels.logprob_sharded)."""
    w = weight[v0:v0 + vocab_chunk]
    if half_mm:
        logits = torch.mm(hr, w.T, out_dtype=torch.float32)
    else:
        logits = torch.mm(hr, w.float().T, out=buf[:hr.shape[0], :w.shape[0]])
    _head_(logits, None if bias is None else bias[v0:v0 + w.shape[0]], mult, softcap)
    return logits


def chunked_linear_logprobs(h, weight, targets, bias=None, scale=None, softcap=None, divisor=None,
                            row_chunk: int | None = None, vocab_chunk: int | None = None) -> torch.Tensor:
    """log_softmax(head(h))[target] per row, fp32, without materializing [N, V]; the head is
    (h @ W^T + b) * scale / divisor, then softcap * tanh(. / softcap).

    Each row chunk walks the vocabulary in chunks; every vocabulary chunk's log-sum-exp goes into a
    small [rows, n_chunks] table, reduced once at the end. Half-precision inputs give fp32 logits
    (exact products, fp32 sums): upcast one chunk at a time on CPU, an fp32-output matmul on CUDA.
    Extra memory: a few row_chunk x vocab_chunk fp32 buffers (4 MiB each on CPU, 32 MiB on CUDA)."""
    n, v = h.shape[0], weight.shape[0]
    check_targets(targets, n, v)
    out = torch.empty(n, dtype=torch.float32, device=h.device)
    if n == 0:
        return out
    cuda = h.device.type == "cuda"
    row_chunk = row_chunk or (4096 if cuda else 1024)
    vocab_chunk = vocab_chunk or (2048 if cuda else 1024)
    half_mm = _half_mm_ok(h)
    mult = (1.0 if scale is None else float(scale)) / (1.0 if divisor is None else float(divisor))
    n_chunks = -(-v // vocab_chunk)
    rows = min(row_chunk, n)
    buf = None if half_mm else torch.empty(rows, min(vocab_chunk, v), dtype=torch.float32, device=h.device)
    maxes = torch.empty(n_chunks, rows, 1, dtype=torch.float32, device=h.device)
    sums = torch.empty(n_chunks, rows, dtype=torch.float32, device=h.device)
    for r0 in range(0, n, row_chunk):
        hr = h[r0:r0 + row_chunk] if half_mm else h[r0:r0 + row_chunk].float()
        r = hr.shape[0]
        tr = targets[r0:r0 + r].long()
        # each row's target is read in its vocabulary chunk: the rows grouped by chunk, once
        chunk_of = torch.div(tr, vocab_chunk, rounding_mode="floor")
        order = torch.argsort(chunk_of, stable=True)
        local = (tr - chunk_of * vocab_chunk)[order]
        counts = torch.bincount(chunk_of, minlength=n_chunks).tolist()
        picked = torch.empty(r, dtype=torch.float32, device=h.device)
        at = 0
        for j, v0 in enumerate(range(0, v, vocab_chunk)):
            logits = chunk_logits(hr, weight, bias, v0, vocab_chunk, mult, softcap, half_mm, buf)
            if counts[j]:
                sel = order[at:at + counts[j]]
                picked[sel] = logits[sel, local[at:at + counts[j]]]
                at += counts[j]
            # torch.logsumexp's own steps, in place in the chunk's buffer (no [r, vc] temporary)
            m = torch.amax(logits, dim=1, keepdim=True, out=maxes[j, :r])
            m.masked_fill_(m.isinf(), 0.0)
            torch.sum(logits.sub_(m).exp_(), dim=1, out=sums[j, :r])
        lses = sums[:, :r].log_().add_(maxes[:, :r, 0]).T.contiguous()  # [r, n_chunks]
        out[r0:r0 + r] = picked - torch.logsumexp(lses, dim=1)
    return out


def chunked_logits_logprobs(logits, targets, row_chunk: int | None = None) -> torch.Tensor:
    """log_softmax(logits)[target] per row in fp32, reading the logits in their own dtype and
    upcasting one row chunk at a time (16 MiB of fp32 on CPU, 64 MiB on CUDA, by default)."""
    n, v = logits.shape
    check_targets(targets, n, v)
    out = torch.empty(n, dtype=torch.float32, device=logits.device)
    row_chunk = row_chunk or max(1, (1 << (24 if logits.device.type == "cuda" else 22)) // max(v, 1))
    for r0 in range(0, n, row_chunk):
        x = logits[r0:r0 + row_chunk].float()
        t = targets[r0:r0 + row_chunk].long()
        out[r0:r0 + x.shape[0]] = x.gather(1, t[:, None]).squeeze(1) - torch.logsumexp(x, dim=1)
    return out

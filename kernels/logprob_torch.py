"""The torch path of the fused log-prob op (CPU, and GPU fallback): rows and vocabulary in chunks,
online log-sum-exp in fp32. Memory is bounded by the chunk sizes (row_chunk x vocab_chunk logits),
never by N x V; the chunks stay in cache, so on CPU it runs as fast as the bare matmul."""

from __future__ import annotations

import torch


def _epilogue(logits, bias, scale, softcap):
    if bias is not None:
        logits += bias.float()
    if scale is not None:
        logits *= scale
    if softcap is not None:
        logits = softcap * torch.tanh(logits / softcap)
    return logits


def chunked_linear_logprobs(h, weight, targets, bias=None, scale=None, softcap=None,
                            row_chunk: int = 256, vocab_chunk: int = 2048) -> torch.Tensor:
    """log_softmax(head(h))[target] per row, fp32, without materializing [N, V].

    Half-precision inputs are upcast one chunk at a time (a bf16 x bf16 product is exact in fp32),
    so the logits and every reduction are fp32."""
    n, v = h.shape[0], weight.shape[0]
    out = torch.empty(n, dtype=torch.float32, device=h.device)
    buf = torch.empty(min(row_chunk, n), min(vocab_chunk, v), dtype=torch.float32, device=h.device)
    for r0 in range(0, n, row_chunk):
        hr = h[r0:r0 + row_chunk].float()
        r = hr.shape[0]
        tr = targets[r0:r0 + r].long()
        lse = torch.full((r,), float("-inf"), dtype=torch.float32, device=h.device)
        picked = torch.zeros(r, dtype=torch.float32, device=h.device)
        for v0 in range(0, v, vocab_chunk):
            w = weight[v0:v0 + vocab_chunk].float()
            logits = torch.mm(hr, w.T, out=buf[:r, :w.shape[0]])
            logits = _epilogue(logits, None if bias is None else bias[v0:v0 + w.shape[0]], scale, softcap)
            lse = torch.logaddexp(lse, torch.logsumexp(logits, dim=1))
            inside = (tr >= v0) & (tr < v0 + w.shape[0])
            if inside.any():
                local = (tr - v0).clamp(0, w.shape[0] - 1)
                picked += torch.where(inside, logits.gather(1, local[:, None]).squeeze(1), 0.0)
        out[r0:r0 + r] = picked - lse
    return out


def chunked_logits_logprobs(logits, targets, row_chunk: int = 1024) -> torch.Tensor:
    """log_softmax(logits)[target] per row in fp32, reading the logits in their own dtype and
    upcasting one row chunk at a time."""
    n = logits.shape[0]
    out = torch.empty(n, dtype=torch.float32, device=logits.device)
    for r0 in range(0, n, row_chunk):
        x = logits[r0:r0 + row_chunk].float()
        t = targets[r0:r0 + row_chunk].long()
        out[r0:r0 + x.shape[0]] = x.gather(1, t[:, None]).squeeze(1) - torch.logsumexp(x, dim=1)
    return out

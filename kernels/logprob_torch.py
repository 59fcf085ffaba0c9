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
                            row_chunk: int = 1024, vocab_chunk: int = 1024) -> torch.Tensor:
    """log_softmax(head(h))[target] per row, fp32, without materializing [N, V].

    Each row chunk walks the vocabulary in chunks; every vocabulary chunk's log-sum-exp goes into a
    small [rows, n_chunks] table, reduced once at the end. The target logit is the dot product of
    the row with its target's weight row. Half-precision inputs are upcast one chunk at a time
    (a bf16 x bf16 product is exact in fp32), so the logits and every reduction are fp32.
    Extra memory: about 2 x row_chunk x vocab_chunk fp32 values (8 MiB by default)."""
    n, v = h.shape[0], weight.shape[0]
    out = torch.empty(n, dtype=torch.float32, device=h.device)
    if n == 0:
        return out
    n_chunks = -(-v // vocab_chunk)
    buf = torch.empty(min(row_chunk, n), min(vocab_chunk, v), dtype=torch.float32, device=h.device)
    lses = torch.empty(min(row_chunk, n), n_chunks, dtype=torch.float32, device=h.device)
    for r0 in range(0, n, row_chunk):
        hr = h[r0:r0 + row_chunk].float()
        r = hr.shape[0]
        for j, v0 in enumerate(range(0, v, vocab_chunk)):
            w = weight[v0:v0 + vocab_chunk].float()
            logits = torch.mm(hr, w.T, out=buf[:r, :w.shape[0]])
            logits = _epilogue(logits, None if bias is None else bias[v0:v0 + w.shape[0]], scale, softcap)
            torch.logsumexp(logits, dim=1, out=lses[:r, j])
        tr = targets[r0:r0 + r].long()
        picked = (hr * weight[tr].float()).sum(1, keepdim=True)
        picked = _epilogue(picked, None if bias is None else bias[tr][:, None], scale, softcap)[:, 0]
        out[r0:r0 + r] = picked - torch.logsumexp(lses[:r], dim=1)
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

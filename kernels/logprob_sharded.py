"""Log-probs from a vocabulary-sharded LM head (tensor parallelism): each rank holds rows
[vocab_start, vocab_start + V_shard) of W [V, d] (and of the bias), and no rank ever holds the whole
head nor an [N, V_shard] tensor.

Per rank, `shard_partials` walks its shard in chunks (as logprob_torch does) and returns per row,
in fp32: m, the largest logit of the shard; s = sum exp(logit - m) over the shard; t, the target's
logit when the target falls in this shard, else -inf. Scale, divisor and soft-capping are
elementwise, so each shard applies them to its own logits. `combine_partials` then merges the
ranks: M = max over ranks of m, S = sum of s * exp(m - M), T = max of t (exactly one rank holds
each target), logprob = T - M - log S, by either
  collective="all_gather" (default): one all_gather of every rank's [m; s; t] (3 N floats), then
      the merge in rank order on every rank: one round trip, the same bits as in one process; or
  collective="all_reduce": all_reduce(MAX) of [m; t], then all_reduce(SUM) of
      [s * exp(m - M); hit]: two round trips of 2 N floats, whatever the number of ranks.
Every rank takes the same decisions from the same merged numbers: a row whose target fell in no
shard (outside [0, V), or a gap between shards) raises TargetOutOfVocabError naming the row on
every rank (the unsharded op's error), a row whose target fell in two shards raises ValueError
(overlapping shards); nothing is raised between collectives, so no rank is left waiting.

Without a process group (group None and torch.distributed not initialised) a rank is alone: its
shard is the whole head. `combine_local` merges a list of per-shard partials in one process, in
rank order (the tests' stand-in for the ranks). The plain reference (whole head, log_softmax) is
logprob_reference.reference_sharded_logprobs.

impl="triton" (GPU, or TRITON_INTERPRET=1 on CPU) runs the fused kernel of logprob_triton.py
unchanged on the shard, with the targets shifted by vocab_start: its per-chunk (max, sum) partials
are merged into (m, s) here instead of into a log-prob.
"""

from __future__ import annotations

import torch

from .common import LN2, TargetOutOfVocabError, check_targets, head_multipliers, n_bucket, tuning_enabled
from .logprob_torch import _half_mm_ok, chunk_logits

NEG_INF = float("-inf")


def shard_partials(hidden, weight_shard, vocab_start: int, targets, bias=None, scale=None, softcap=None,
                   divisor=None, *, impl: str = "torch", row_chunk: int | None = None,
                   vocab_chunk: int | None = None):
    """(m, s, t), fp32 [N] each, for the head rows [vocab_start, vocab_start + V_shard) this rank
    holds: the shard's max logit (impl="triton" with soft-capping: the cap), sum of exp(logit - m)
    over the shard, and the target's logit (-inf where the target is not in this shard).
    bias: this shard's slice of the head's bias. The head: (h @ W^T + b) * scale / divisor, then
    softcap * tanh(. / softcap), as linear_logprobs. Targets are not validated here (a rank does
    not know V): combine_partials does it, after the collectives."""
    n, vs = hidden.shape[0], weight_shard.shape[0]
    if targets.dim() != 1 or targets.shape[0] != n:
        check_targets(targets, n, vs)  # raises the unsharded op's shape error
    if weight_shard.dim() != 2 or weight_shard.shape[1] != hidden.shape[1]:
        raise ValueError(f"hidden {tuple(hidden.shape)} and head shard {tuple(weight_shard.shape)} do not match")
    if bias is not None and bias.shape != (vs,):
        raise ValueError(f"the bias of a shard of {vs} rows has shape {tuple(bias.shape)}")
    if vocab_start < 0:
        raise ValueError(f"vocab_start must be >= 0, not {vocab_start}")
    if impl not in ("torch", "triton"):
        raise ValueError(f"unknown shard_partials implementation {impl!r} (expected torch or triton)")
    dev = hidden.device
    m = torch.full((n,), NEG_INF, dtype=torch.float32, device=dev)
    s = torch.zeros(n, dtype=torch.float32, device=dev)
    t = torch.full((n,), NEG_INF, dtype=torch.float32, device=dev)
    if n == 0 or vs == 0:
        return m, s, t
    local = targets.long() - vocab_start  # the target's row in this shard (outside [0, vs): elsewhere)
    if impl == "triton":
        return _triton_partials(hidden, weight_shard, local, bias, scale, softcap, divisor, m, s, t)
    cuda = dev.type == "cuda"
    row_chunk = row_chunk or (4096 if cuda else 1024)
    vocab_chunk = vocab_chunk or (2048 if cuda else 1024)
    half_mm = _half_mm_ok(hidden)
    mult = (1.0 if scale is None else float(scale)) / (1.0 if divisor is None else float(divisor))
    n_chunks = -(-vs // vocab_chunk)
    rows = min(row_chunk, n)
    buf = None if half_mm else torch.empty(rows, min(vocab_chunk, vs), dtype=torch.float32, device=dev)
    cmax = torch.empty(n_chunks, rows, dtype=torch.float32, device=dev)  # per vocabulary chunk: max
    csum = torch.empty(n_chunks, rows, dtype=torch.float32, device=dev)  # and sum of exp(logit - max)
    for r0 in range(0, n, row_chunk):
        hr = hidden[r0:r0 + row_chunk] if half_mm else hidden[r0:r0 + row_chunk].float()
        r = hr.shape[0]
        tr = local[r0:r0 + r]
        picked = t[r0:r0 + r]
        for j, v0 in enumerate(range(0, vs, vocab_chunk)):
            logits = chunk_logits(hr, weight_shard, bias, v0, vocab_chunk, mult, softcap, half_mm, buf)
            vc = logits.shape[1]
            inside = (tr >= v0) & (tr < v0 + vc)
            picked.copy_(torch.where(inside, logits.gather(1, (tr - v0).clamp(0, vc - 1)[:, None])[:, 0], picked))
            torch.amax(logits, dim=1, out=cmax[j, :r])
            torch.sum(logits.sub_(cmax[j, :r, None]).exp_(), dim=1, out=csum[j, :r])
        mr = cmax[:, :r].amax(0)
        m[r0:r0 + r] = mr
        s[r0:r0 + r] = (csum[:, :r] * torch.exp(cmax[:, :r] - mr)).sum(0)
    return m, s, t


def _triton_partials(hidden, weight, local, bias, scale, softcap, divisor, m, s, t):
    """shard_partials through logprob_triton's chunk kernel (unchanged): its [n_chunks, rows]
    base-2 partials (z = logit * log2 e) are merged over the chunks here, in torch. With
    soft-capping the kernel's running max is the cap itself (CAPPED_MAX), so m is the cap: (m, s)
    still give the same sum s * exp(m), which is all combine_partials needs."""
    import triton

    from . import logprob_triton as LT
    from .logprob_configs import INTERPRETER, fixed

    if hidden.dtype != weight.dtype:
        raise ValueError(f"hidden {hidden.dtype} and head shard {weight.dtype} differ")
    n, d = hidden.shape
    vs = weight.shape[0]
    hidden = hidden if hidden.stride(-1) == 1 else hidden.contiguous()
    weight = weight if weight.stride(-1) == 1 else weight.contiguous()
    # targets only select values in the kernel: rows whose target is elsewhere match no column
    local = local.clamp(-1, vs).to(torch.int32).contiguous()
    pre, post = head_multipliers(scale, softcap, divisor)
    chunk_v = LT.chunk_size(vs)
    n_chunks = triton.cdiv(vs, chunk_v)
    rows = min(n, LT.MAX_ROWS)
    pm = torch.empty(n_chunks, rows, dtype=torch.float32, device=hidden.device)
    ps = torch.empty_like(pm)
    z = torch.empty(rows, dtype=torch.float32, device=hidden.device)
    fp32 = hidden.dtype == torch.float32
    flags = dict(CHUNK_V=chunk_v, HAS_BIAS=bias is not None, HAS_SOFTCAP=softcap is not None,
                 CAPPED_MAX=softcap is not None and 0 < 2 * post <= 120, IEEE=fp32,
                 UPCAST=LT.interpreting() and not fp32, TMA=False)
    config = None
    if LT.interpreting() or not tuning_enabled():
        config = INTERPRETER if LT.interpreting() else fixed(
            "fp32" if fp32 else "half", torch.cuda.get_device_capability(hidden.device)[0])
        config = {k: v for k, v in config.items() if k != "TMA"}
    for r0 in range(0, n, rows):
        r = min(rows, n - r0)
        z.fill_(NEG_INF)  # written only by the chunk holding the target
        args = (hidden[r0:r0 + r], weight, bias if bias is not None else hidden, local[r0:r0 + r], pm, ps, z,
                None, None, r, vs, d, n_bucket(r), hidden.stride(0), weight.stride(0), pre, post)
        if config is not None:
            LT._linear_fixed[(triton.cdiv(r, config["BLOCK_N"]) * n_chunks,)](*args, **flags, **config)
        else:
            LT._linear_tuned[lambda meta: (triton.cdiv(r, meta["BLOCK_N"]) * n_chunks,)](*args, **flags)
        cm = pm.view(-1)[:n_chunks * r].view(n_chunks, r)  # the kernel's layout: chunk * r + row
        cs = ps.view(-1)[:n_chunks * r].view(n_chunks, r)
        top = cm.amax(0)
        m[r0:r0 + r] = top * LN2
        s[r0:r0 + r] = (cs * torch.exp2(cm - top)).sum(0)
        t[r0:r0 + r] = z[:r] * LN2
    return m, s, t


def _finish(big_m, big_t, summed, n, targets, vocab):
    """logprob from the reduced [M; T] and [S; hits; (V)], and the checks every rank takes alike."""
    hits = summed[n:2 * n]
    if vocab is None and summed.shape[0] > 2 * n:
        vocab = int(round(float(summed[2 * n])))
    if n and bool((hits != 1).any()):
        row = int((hits != 1).nonzero()[0, 0])
        target = -1 if targets is None else int(targets[row])
        if float(hits[row]) > 1:
            raise ValueError(f"the target {target} of row {row} falls in {int(hits[row])} shards: "
                             "the head's shards overlap")
        err = TargetOutOfVocabError(row, target, -1 if vocab is None else vocab)
        if vocab is None:
            err.args = (f"target {target} of row {row} falls in no shard of the vocabulary",)
        raise err
    return big_t - big_m - torch.log(summed[:n])


def _max_ref(big_m):
    """M where finite; 0 where every shard's max is -inf (empty shards), so exp(m - M) is no NaN."""
    return torch.where(big_m == NEG_INF, torch.zeros_like(big_m), big_m)


def combine_partials(m, s, t, group=None, *, targets=None, vocab: int | None = None,
                     shard_size: int | None = None, collective: str = "all_gather") -> torch.Tensor:
    """logprob [N] (fp32) of every row from this rank's (m, s, t), merged across the ranks of
    `group` (torch.distributed's default group when None and initialised; this rank alone when
    not). Every rank gets the same result. targets and vocab (or each rank's shard_size, summed
    across ranks) only name the row's target and the vocabulary in TargetOutOfVocabError.

    collective "all_gather" (default): one all_gather of every rank's [m; s; t] (3 N floats per
    rank), then combine_local in rank order: one round trip, and the same bits as combine_local on
    the ranks' partials in one process, whatever the number of ranks. "all_reduce": all_reduce(MAX)
    of [m; t], then all_reduce(SUM) of [s * exp(m - M); hits]: two round trips of 2 N floats."""
    import torch.distributed as dist

    if collective not in ("all_gather", "all_reduce"):
        raise ValueError(f"collective must be 'all_gather' or 'all_reduce', not {collective!r}")
    n = m.shape[0]
    distributed = group is not None or (dist.is_available() and dist.is_initialized())
    if not distributed:
        return combine_local([(m, s, t)], targets=targets, vocab=vocab if vocab is not None else shard_size)
    size = torch.tensor([-1.0 if shard_size is None else float(shard_size)], device=m.device)
    if collective == "all_gather":
        mine = torch.cat([m.float(), s.float(), t.float(), size])
        parts = [torch.empty_like(mine) for _ in range(dist.get_world_size(group))]
        dist.all_gather(parts, mine, group=group)
        if vocab is None and shard_size is not None:
            vocab = int(sum(float(p[3 * n]) for p in parts))
        return combine_local([(p[:n], p[n:2 * n], p[2 * n:3 * n]) for p in parts], targets=targets, vocab=vocab)
    mt = torch.cat([m.float(), t.float()])
    dist.all_reduce(mt, op=dist.ReduceOp.MAX, group=group)
    big_m, big_t = mt[:n], mt[n:]
    extra = [] if shard_size is None else [size]
    summed = torch.cat([s.float() * torch.exp(m.float() - _max_ref(big_m)), (t != NEG_INF).float(), *extra])
    dist.all_reduce(summed, op=dist.ReduceOp.SUM, group=group)
    return _finish(big_m, big_t, summed, n, targets, vocab)


def combine_local(partials, *, targets=None, vocab: int | None = None) -> torch.Tensor:
    """combine_partials over a list of per-shard (m, s, t) held by one process, in list order:
    the same arithmetic as the collectives, summed shard by shard."""
    if not partials:
        raise ValueError("no partials to combine")
    n = partials[0][0].shape[0]
    big_m = torch.stack([p[0].float() for p in partials]).amax(0)
    big_t = torch.stack([p[2].float() for p in partials]).amax(0)
    ref = _max_ref(big_m)
    total = hits = None
    for m, s, t in partials:
        part = s.float() * torch.exp(m.float() - ref)
        hit = (t != NEG_INF).float()
        total, hits = (part, hit) if total is None else (total + part, hits + hit)
    return _finish(big_m, big_t, torch.cat([total, hits]), n, targets, vocab)


def sharded_logprobs(hidden, weight_shard, vocab_start: int, targets, group=None, bias=None, scale=None,
                     softcap=None, divisor=None, *, vocab: int | None = None, impl: str = "torch",
                     collective: str = "all_gather") -> torch.Tensor:
    """log_softmax(head(hidden))[target] per row, fp32 [N], with this rank holding head rows
    [vocab_start, vocab_start + V_shard) (and that slice of the bias): shard_partials, then
    combine_partials over `group`. Every rank of the group calls it with the same hidden and
    targets and gets the same result. vocab (the whole head's rows) is only for the error message;
    by default it is the sum of the shards' sizes."""
    m, s, t = shard_partials(hidden, weight_shard, vocab_start, targets, bias, scale, softcap, divisor, impl=impl)
    return combine_partials(m, s, t, group, targets=targets, vocab=vocab, shard_size=weight_shard.shape[0],
                            collective=collective)


def split_rows(v: int, parts: int) -> list[tuple[int, int]]:
    """(start, stop) of `parts` contiguous shards of v rows, the first ones one row longer when
    parts does not divide v (torch.chunk's rule is different: use the ranks' real bounds)."""
    base, extra = divmod(v, parts)
    bounds, start = [], 0
    for i in range(parts):
        stop = start + base + (1 if i < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds

"""Which implementation of the fused log-prob op runs (resolve_impl, and `auto`'s per-shape timing
memo), the op's entry points (linear_logprobs, logits_logprobs) and the per-sequence sums
(segment_stats). Re-exported by the package: the package's docstring describes the op."""


from __future__ import annotations

from typing import Callable

import torch

from .common import n_bucket, tuning_enabled
from .logprob_torch import chunked_linear_logprobs, chunked_logits_logprobs

IMPLS = ("auto", "triton", "torch")
_AUTO_CHOICES: dict[tuple, str] = {}  # per-process memo of `auto`: key -> "triton" | "torch"


def _triton_ok(device: torch.device) -> bool:
    import os

    if device.type != "cuda" and os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
        return False
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def resolve_impl(impl: str, device: torch.device) -> str:
    """The implementation `impl` runs on `device`: "auto" is "torch" on CPU and "triton" on CUDA
    (where, per shape, it may still fall back to torch when that timed faster: see pick_fastest)."""
    if impl not in IMPLS:
        raise ValueError(f"unknown log-prob implementation {impl!r} (expected {', '.join(IMPLS)})")
    if impl == "auto":
        return "triton" if device.type == "cuda" and _triton_ok(device) else "torch"
    if impl == "triton" and not _triton_ok(device):
        raise RuntimeError("the Triton log-prob kernel needs a CUDA device (or TRITON_INTERPRET=1 on CPU) "
                           "and the triton package")
    return impl


def auto_key(kind: str, n: int, v: int, d: int | None, dtype: torch.dtype) -> tuple:
    """The memo key of `auto`: the op, vocabulary, hidden size, dtype and N bucket."""
    return kind, v, d, str(dtype).replace("torch.", ""), n_bucket(n)


def auto_choices() -> dict[tuple, str]:
    """What `auto` picked so far in this process, by auto_key."""
    return dict(_AUTO_CHOICES)


def cuda_time(fn: Callable[[], object], reps: int = 3) -> float:
    """Seconds of fn() on the current CUDA stream: one warm-up call (compiles, autotunes), then the
    best of `reps` calls timed with CUDA events."""
    fn()
    best = float("inf")
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / 1e3)
    return best


def pick_fastest(key: tuple, candidates: dict[str, Callable[[], object]], timer=None) -> str:
    """The name of the fastest candidate for `key`, timed by timer(fn) -> seconds (cuda_time by
    default) on first use and remembered for the process. With tuning off, the first candidate."""
    if not tuning_enabled():
        return next(iter(candidates))
    if key not in _AUTO_CHOICES:
        timer = timer or cuda_time
        times = {name: timer(fn) for name, fn in candidates.items()}
        _AUTO_CHOICES[key] = min(times, key=times.get)
    return _AUTO_CHOICES[key]


def linear_logprobs(h, weight, targets, bias=None, scale=None, softcap=None, impl: str = "auto",
                    divisor=None) -> torch.Tensor:
    """log_softmax(head(h))[target] per row, fp32 [N]; the head is (h @ W^T + b) * scale / divisor,
    then softcap * tanh(. / softcap) (Granite: divisor = config.logits_scaling). Every
    implementation validates the targets (TargetOutOfVocabError)."""
    chosen = resolve_impl(impl, h.device)

    def torch_path():
        return chunked_linear_logprobs(h, weight, targets, bias, scale, softcap, divisor)

    if chosen == "triton":
        from .logprob_triton import fused_linear_logprobs

        def triton_path():
            return fused_linear_logprobs(h, weight, targets, bias, scale, softcap, divisor)

        if impl == "auto" and h.shape[0] > 0:
            key = auto_key("linear", h.shape[0], weight.shape[0], h.shape[1], h.dtype)
            chosen = pick_fastest(key, {"triton": triton_path, "torch": torch_path})
        if chosen == "triton":
            return triton_path()
    return torch_path()


def logits_logprobs(logits, targets, impl: str = "auto") -> torch.Tensor:
    """log_softmax(logits)[target] per row, fp32 [N], reading logits in their own dtype. Every
    implementation validates the targets (TargetOutOfVocabError)."""
    chosen = resolve_impl(impl, logits.device)

    def torch_path():
        return chunked_logits_logprobs(logits, targets)

    if chosen == "triton":
        from .logits_triton import logits_logprobs as triton_logits_logprobs

        def triton_path():
            return triton_logits_logprobs(logits, targets)

        if impl == "auto" and logits.shape[0] > 0:
            key = auto_key("logits", logits.shape[0], logits.shape[1], None, logits.dtype)
            chosen = pick_fastest(key, {"triton": triton_path, "torch": torch_path})
        if chosen == "triton":
            return triton_path()
    return torch_path()


def segment_stats(logps: torch.Tensor, segments: torch.Tensor, n_segments: int):
    """Per segment: sum, count, sum of squares (float64), deterministic: when the segment ids are
    sorted (as the engine passes them) the sums come from a float64 cumulative sum, with no
    atomics; otherwise from index_add."""
    lp = logps.double()
    seg = segments.long()
    count = torch.bincount(seg, minlength=n_segments).double()
    if seg.numel() == 0 or bool((seg[1:] >= seg[:-1]).all()):
        ends = torch.cumsum(count, 0).long()
        starts = ends - count.long()

        def sums(x):
            c = torch.cat([x.new_zeros(1), torch.cumsum(x, 0)])
            return c[ends] - c[starts]

        return sums(lp), count, sums(lp * lp)
    total = torch.zeros(n_segments, dtype=torch.float64, device=lp.device).index_add_(0, seg, lp)
    sumsq = torch.zeros(n_segments, dtype=torch.float64, device=lp.device).index_add_(0, seg, lp * lp)
    return total, count, sumsq

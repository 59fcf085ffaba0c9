"""The memory pre-flight: before a model is loaded, its weights in the run's dtype plus the
activations of its largest batch (models.memory) against what its device has free (a GPU's
torch.cuda.mem_get_info, the CPU's MemAvailable) or --max-memory. A model that will not fit is
refused in one line naming the flags that would make it fit, instead of an out-of-memory error
after minutes of loading; --no-preflight skips the refusal (the estimate is still recorded).

With --device-map the weights go where accelerate puts them (the GPUs in turn, then the CPU, then
disk), so what must fit is the main device's activations: its free memory less the weights it
keeps (its --max-memory, or its share of the weights) must hold the largest batch's activations
(and an offloaded block, brought on for its forward).

`pass_plan` is what one pass carries into engine.runner.model_for_pass: the placement, the estimate
and the budget; the runner checks it before loading and records it beside the measured peak.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass

from ..errors import UsageError
from ..models.loading import load_config
from ..models.placement import Placement
from ..models.memory import Shape, check_bytes, decoder_bytes, head_bytes, model_weights
from .options import ScoreOptions, max_memory_budgets

GIB = 2**30


def gib(n: int) -> str:
    return f"{n / GIB:.2f} GiB" if abs(n) >= GIB else f"{n / 2**20:.1f} MiB"


def available_ram() -> int:
    """The CPU's MemAvailable (/proc/meminfo), else free pages."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                                               "uordblks", "fordblks", "keepcost")]


def malloc_free_bytes() -> int:
    """Bytes glibc malloc holds freed in this process (kept for reuse: engine.runtime), which
    MemAvailable does not count but the next pass reuses; 0 without glibc's mallinfo2."""
    try:
        fn = ctypes.CDLL("libc.so.6").mallinfo2
    except (OSError, AttributeError):
        return 0
    fn.restype = _Mallinfo2
    return int(fn().fordblks)


def free_bytes(key) -> int:
    """What device `key` (a GPU index or "cpu") has free now for this process: the CPU's
    MemAvailable and what malloc keeps freed; a GPU's free memory and what torch's caching allocator
    holds unallocated (an earlier pass's, reused by the next)."""
    if key == "cpu":
        return available_ram() + malloc_free_bytes()
    import torch

    return torch.cuda.mem_get_info(key)[0] + torch.cuda.memory_reserved(key) - torch.cuda.memory_allocated(key)


def device_key(device):
    return "cpu" if device.type == "cpu" else (device.index or 0)


def placement_for(o: ScoreOptions, target) -> Placement | None:
    """--device-map as models.loading takes it; on the CPU (no GPU asked for) only the CPU and disk."""
    if not o.device_map:
        return None
    budgets = max_memory_budgets(o.max_memory) or None
    if target.compute.type == "cpu" and budgets is None:
        budgets = {"cpu": available_ram()}
    return Placement(o.device_map, budgets, o.offload_folder)


def placement_key(o: ScoreOptions, target) -> tuple:
    """What a placed run adds to its passes' store key: nothing on the CPU (where a module computes
    does not change fp32 CPU numbers) or over GPUs of the run's GPU model (every module computes on
    one of them, offloaded ones on the main GPU); the GPU models when others are visible, whose
    kernels could give other last bits."""
    if not o.device_map or target.compute.type != "cuda":
        return ()
    import torch

    budgets = max_memory_budgets(o.max_memory)
    names = sorted({torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())
                    if budgets.get(i, 1) > 0})
    return () if names == [target.gpu] else ("placed-over", *names)


@dataclass
class PassPlan:
    """One pass's placement and memory estimate (bytes), checked before its model loads."""
    path: str
    placement: Placement | None
    estimate: dict | None  # None: nothing to estimate from (no weights found): not checked
    enforce: bool  # --preflight

    def check(self) -> None:
        if self.enforce and self.estimate is not None and not self.estimate["fits"]:
            raise UsageError(self.estimate["refusal"])


def batch_activations(prep, shape: Shape, size: int, batches) -> tuple[int, dict]:
    """The largest activations over `batches` (bytes) and that batch's shape."""
    dpo = getattr(prep.scorer, "mode", "rm") == "dpo" and hasattr(prep.scorer, "resolved")
    impl = getattr(prep.scorer, "resolved", "torch")
    if impl not in ("plain", "torch"):
        impl = "triton"
    from ..models.kinds import is_causal_decoder

    causal = is_causal_decoder(prep.config)
    best, where = 0, {}
    for k, b in enumerate(batches):
        rows, width = len(b.indices), int(b.max_len)
        scored = sum(max(0, len(prep.seqs[i].ids) - prep.seqs[i].start) for i in b.indices) if dpo else 0
        # shared prefixes: the suffixes' masks span their prefixes too
        masked = prep.plan is not None or prep.scorer.masks_attention(prep.seqs, b.indices, causal)
        act = decoder_bytes(shape, rows, width, size, masked)
        if dpo:
            act = max(act, head_bytes(shape, rows, width, scored, size, impl))
            if k == 0 and impl != "plain":  # the once-per-pass head check runs on the first batch
                first = next((prep.seqs[i] for i in b.indices if len(prep.seqs[i].ids) > prep.seqs[i].start), None)
                if first is not None:
                    act = max(act, check_bytes(shape, min(len(first.ids), first.start + 64), size))
        if act > best:
            best, where = act, {"rows": rows, "width": width, "padded_tokens": rows * width, "scored_tokens": scored}
    return best, where


def estimate(prep, o: ScoreOptions, path: str, batches, placement: Placement | None, config=None) -> dict | None:
    """Weights + the largest batch's activations of the model at `path`, against the budget."""
    import torch

    if config is None:
        config = prep.config if path == o.model else load_config(path, o.trust_remote_code)
    size = torch.finfo(prep.dtype).bits // 8
    weights = model_weights(path, config, prep.scorer.mode, size, prep.precision.int8)
    if weights is None:
        return None
    shape = Shape.of(config)
    act, largest = batch_activations(prep, shape, size, batches)
    if prep.plan is not None:  # the largest wave's prefix store, and a suffix batch's prefixes gathered into a cache
        from ..inputs.prefix import kv_bytes_per_token

        per_token = kv_bytes_per_token(config, prep.dtype)
        gathered = max((len(b.indices) * int(prep.plan.prefix[b.indices].max()) for b in batches), default=0)
        act += (prep.plan.wave_tokens() + gathered) * per_token
    out = {"weights_bytes": weights.bytes, "weights_source": weights.source, "params": weights.params,
           "activation_bytes": act, "total_bytes": weights.bytes + act, "largest_batch": largest,
           "dtype": str(prep.dtype).replace("torch.", ""), "int8": prep.precision.int8,
           "attention": "eager" if shape.eager else "sdpa"}
    out.update(_budget(o, prep, path, placement, weights, act, shape, size))
    return out


def _budget(o, prep, path: str, placement, weights, act: int, shape, size: int) -> dict:
    given = max_memory_budgets(o.max_memory)
    compute = prep.target.compute
    key = device_key(compute)
    name = "cpu" if key == "cpu" else f"cuda:{key}"
    if placement is None:
        avail = given.get(key)
        source = "--max-memory" if avail is not None else "free"
        avail = free_bytes(key) if avail is None else avail
        fits = weights.bytes + act <= avail
        out = {"available": {name: avail}, "available_source": source, "fits": fits}
        if not fits:
            out["refusal"] = _refusal(prep, path, weights, act, shape, size, name, avail, source)
        return out
    # placed: the main device keeps what accelerate gives it and computes every offloaded block
    free = free_bytes(key)
    keeps = min(weights.bytes, given.get(key, free if key == "cpu" else int(free * 0.9)))
    held = keeps  # what the devices that compute hold; the rest is offloaded (CPU or disk) and brought on
    if key != "cpu":
        import torch

        gpus = [i for i in range(torch.cuda.device_count()) if given.get(i, 1) > 0]
        held = sum(given.get(i, int(free_bytes(i) * 0.9)) for i in gpus)
        if len(gpus) > 1 and o.device_map != "sequential":
            keeps = min(keeps, weights.bytes // len(gpus) + int(1.25 * weights.largest_block))
    room = free - keeps
    need = act + (weights.largest_block if weights.bytes > held else 0)
    fits = need <= room
    out = {"available": {name: free}, "available_source": "free", "main_device_weights_bytes": keeps,
           "main_device_room_bytes": room, "fits": fits}
    if not fits:
        k = _max_tokens_that_fit(prep, shape, size, room - (need - act))
        flags = [f"--max-memory {key}=... lower (leave {gib(need)} for activations)"]
        if k:
            flags.append(f"--max-tokens-per-batch {k}")
        if size > 2:
            flags.append("--dtype bfloat16")
        out["refusal"] = (f"model {path}: placed with --device-map {o.device_map}, {name} keeps "
                          f"~{gib(keeps)} of weights and has {gib(room)} left, but the largest batch needs {gib(need)} "
                          f"(activations, and an offloaded block): use {', or '.join(flags)}; or --no-preflight to "
                          "try anyway")
    return out


def _max_tokens_that_fit(prep, shape, size: int, room: int) -> int | None:
    """The largest --max-tokens-per-batch whose batches' activations fit `room` bytes (None: not
    even one sequence per batch)."""
    from ..inputs.batching import make_batches

    lo, hi, best = 1, int(prep.max_tokens), None
    while lo <= hi:
        mid = (lo + hi) // 2
        act, _ = batch_activations(prep, shape, size, make_batches(prep.batch_lengths, mid, None))
        if act <= room:
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return best if best is not None and best < prep.max_tokens else None


def _refusal(prep, path: str, weights, act, shape, size, name, avail, source) -> str:
    flags = []
    if size > 2 and (weights.bytes + act) // (size // 2) <= avail:
        flags.append("--dtype bfloat16")
    if weights.bytes < avail:
        k = _max_tokens_that_fit(prep, shape, size, avail - weights.bytes)
        if k:
            flags.append(f"--max-tokens-per-batch {k}")
    if name != "cpu":
        import torch

        n = torch.cuda.device_count()
        tp = next((t for t in range(2, n + 1) if weights.bytes // t + act <= avail), None)
        if tp:
            flags.append(f"--tp {tp}")
    flags.append(f"--device-map auto (offloads what does not fit to {'the CPU or disk' if name != 'cpu' else 'disk'})")
    where = f"{gib(avail)} {'is free' if source == 'free' else 'by --max-memory'} on {name}"
    return (f"model {path}: needs ~{gib(weights.bytes + act)} ({gib(weights.bytes)} of weights in "
            f"{str(prep.dtype).replace('torch.', '')} + {gib(act)} of activations for the largest batch) but {where}: "
            f"use {', or '.join(flags)}; or --no-preflight to try anyway")


def pass_plan(prep, o: ScoreOptions, path: str, batches, lent=None) -> PassPlan | None:
    """The plan of the pass over `batches` of the model at `path` (None on Ray, whose workers load,
    and for a model lent in memory, already loaded)."""
    if o.engine != "local" or lent is not None:
        return None
    placement = placement_for(o, prep.target)
    return PassPlan(path, placement, estimate(prep, o, path, batches, placement), o.preflight)


def preflight(prep, o: ScoreOptions) -> dict:
    """Every pass's estimate, before any model loads; a model that will not fit is a UsageError."""
    out = {}
    for role, path in prep.scorer.roles(o):
        if prep.given is not None and prep.given.model(role) is not None:
            continue  # lent in memory: already loaded
        plan = pass_plan(prep, o, path, prep.batches)
        if plan is None:
            continue
        plan.check()
        out[role] = plan.estimate
    return out

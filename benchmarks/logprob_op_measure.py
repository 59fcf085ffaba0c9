"""The measurements of benchmarks/logprob_op.py: the shapes and methods it times, and how.

child() runs one (method, shape) in a fresh process (the CPU mode: time and extra peak resident
memory); one_process() runs every (shape, method) in one process (the CUDA mode: CUDA-event times
and extra peak allocated memory, the fused kernel's tile configuration, what `auto` picked).
"""

from __future__ import annotations

import json
import os
import statistics
import time

METHODS = ("official", "trl", "matmul", "fused")  # CPU
GRID = [(n, v, d) for n in (1024, 8192) for v in (32000, 128256) for d in (256, 1024)]
CUDA_METHODS = ("matmul", "official", "torch", "fused", "auto")
HEADS = {(128256, 4096, None): "Llama-3 8B", (152064, 3584, None): "Qwen2.5 7B", (151936, 2048, None): "Qwen2.5 3B",
         (256000, 3584, 30.0): "Gemma-2 9B"}  # (V, d, final soft-capping)
CUDA_SHAPES = [(n, v, d, cap) for v, d, cap in HEADS for n in (1024, 4096, 8192, 16384)]


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak_rss_bytes() -> int:
    """VmHWM: the resident high-water mark since the last reset."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def _reset_peak_rss() -> None:
    with open("/proc/self/clear_refs", "w") as f:  # "5" resets VmHWM to the current RSS
        f.write("5")


def child(method: str, n: int, v: int, d: int, device: str, dtype_name: str, repeats: int) -> dict:
    """Runs in a fresh process: inputs, one method, its time and extra peak memory."""
    import torch

    from rmbench_fast.kernels import linear_logprobs

    dtype = getattr(torch, dtype_name)
    torch.manual_seed(0)
    h = torch.randn(n, d, device=device, dtype=dtype)
    w = torch.randn(v, d, device=device, dtype=dtype) * 0.05
    t = torch.randint(0, v, (n,), device=device)
    cuda = device.startswith("cuda")

    def run():
        if method == "official":
            return (h @ w.T).log_softmax(-1).gather(1, t[:, None]).squeeze(1)
        if method == "trl":
            out = []
            for s in range(0, n, 1024):
                logits = h[s:s + 1024] @ w.T
                picked = logits.gather(1, t[s:s + 1024, None]).squeeze(1).float()
                out.append(picked - torch.logsumexp(logits.float(), dim=-1))
            return torch.cat(out)
        if method == "matmul":
            return h @ w.T
        return linear_logprobs(h, w, t)

    def sync():
        if cuda:
            torch.cuda.synchronize()

    out = run()  # warm up: kernels compile, libraries load their workspaces
    sync()
    del out
    if cuda:
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        _reset_peak_rss()
        base = _rss_bytes()
    times = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        out = run()
        sync()
        times.append(time.perf_counter() - t0)
        del out
    peak = (torch.cuda.max_memory_allocated() if cuda else _peak_rss_bytes()) - base
    return {"method": method, "N": n, "V": v, "d": d, "time_s": statistics.median(times), "times_s": times,
            "extra_peak_mib": max(peak, 0) / 2**20, "tflops": 2 * n * v * d / statistics.median(times) / 1e12}


def parse_shape(text: str) -> tuple:
    n, v, d, *cap = text.split("x")
    return int(n), int(v), int(d), float(cap[0]) if cap else None


def _method(method: str, h, w, t, cap):
    """The call that one method makes (softcap: the model's final logit soft-capping)."""
    import torch

    from rmbench_fast.kernels import linear_logprobs

    if method == "matmul":
        return lambda: h @ w.T
    if method == "official":
        def official():
            logits = h @ w.T
            if cap is not None:
                logits = cap * torch.tanh(logits / cap)
            return logits.log_softmax(-1).gather(1, t[:, None]).squeeze(1)
        return official
    impl = {"torch": "torch", "fused": "triton", "auto": "auto"}[method]
    return lambda: linear_logprobs(h, w, t, softcap=cap, impl=impl)


def one_process(shapes, methods, device: str, dtype_name: str, repeats: int) -> list[dict]:
    """Every (shape, method) in this process: per method a warm-up call (compiles, autotunes, lets
    `auto` time its candidates) and one call for the extra peak memory (CUDA), then `repeats`
    rounds that time each method once."""
    import torch

    import rmbench_fast.kernels as K

    cuda = device.startswith("cuda")
    dtype = getattr(torch, dtype_name)

    def timed(fn):
        if not cuda:
            t0 = time.perf_counter()
            fn()
            return time.perf_counter() - t0
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3

    def extra_peak_mib(fn):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        out = fn()
        torch.cuda.synchronize()
        del out
        return max(torch.cuda.max_memory_allocated() - base, 0) / 2**20

    rows = []
    heads = {}
    for n, v, d, cap in shapes:
        heads.setdefault((v, d, cap), []).append(n)
    for (v, d, cap), ns in heads.items():
        g = torch.Generator(device=device).manual_seed(0)
        w = torch.randn(v, d, device=device, dtype=dtype, generator=g) * 0.05
        for n in ns:
            h = torch.randn(n, d, device=device, dtype=dtype, generator=g)
            t = torch.randint(0, v, (n,), device=device, generator=g)
            outs, fns, shape_rows = {}, {}, []
            for m in methods:  # warm-up call and extra peak memory, method by method
                fn = _method(m, h, w, t, cap)
                row = {"method": m, "N": n, "V": v, "d": d, "softcap": cap, "head": HEADS.get((v, d, cap))}
                try:
                    out = fn()
                    if m in ("torch", "fused"):
                        outs[m] = out
                    del out
                    row["extra_peak_mib"] = extra_peak_mib(fn) if cuda else None
                    fns[m] = fn
                except (torch.cuda.OutOfMemoryError, RuntimeError) as e:  # the official path at large N x V
                    row["error"] = str(e).splitlines()[0][:200]
                    if cuda:
                        torch.cuda.empty_cache()
                if m == "fused":
                    from rmbench_fast.kernels.logprob_triton import INTERPRETER, fixed, interpreting, tuned_config

                    tuned = tuned_config() if K.tuning_enabled() and not interpreting() else None
                    row["config"] = tuned or (INTERPRETER if interpreting() else fixed(
                        "half" if w.element_size() == 2 else "fp32", torch.cuda.get_device_capability(w.device)[0]))
                if m == "auto":
                    row["auto_pick"] = K.auto_choices().get(K.auto_key("linear", n, v, d, dtype), "torch")
                if m in ("torch", "fused") and "fused" in outs and "torch" in outs:
                    row["max_abs_diff_fused_vs_torch"] = (outs["fused"] - outs["torch"]).abs().max().item()
                shape_rows.append(row)
            times = {m: [] for m in fns}
            for _ in range(repeats):  # round robin: clock and power drift hit every method alike
                for m, fn in fns.items():
                    times[m].append(timed(fn))
            for row in shape_rows:
                if row["method"] in times:
                    ts = times[row["method"]]
                    med = statistics.median(ts)
                    row.update(time_s=med, times_s=ts, tflops=2 * n * v * d / med / 1e12)
                rows.append(row)
                print(json.dumps(row), flush=True)
            del h, t, outs
        del w
        if cuda:
            torch.cuda.empty_cache()
    return rows

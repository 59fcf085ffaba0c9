"""Where a run's time goes (issue 34): one RM run and one DPO run with a reference, on the issue's
model shape (Llama, hidden 512, 4 layers, MLP 1408, a 32k vocabulary, fp32 by default), --no-cache.

    python benchmarks/profile_breakdown.py --limit 20 --out benchmarks/results/profile-cpu.json
    python benchmarks/profile_breakdown.py --device cuda --dtype bfloat16 --out OUT/profile-cuda.json  (gpu_check.sh)

For each mode, three runs of the same command on the same files:
1. the whole process (`rmbench-fast score --no-cache` in a subprocess): its wall time and the run's
   own timing from run.json (startup, loading, tokenization, model loading, forwards, finish, and
   `fixed_s`, everything but model loading and forwards);
2. in this process under torch.profiler: every op's own (self) CPU time, in groups: matmuls,
   attention, norms and activations (elementwise), the log-prob op (whatever runs inside
   rmbench_fast's fused log-prob entry points), copies and padding, other ops; what the forwards
   spend outside any op is Python and dispatch (batch assembly, the runner's per-batch work);
3. in this process under cProfile: the Python functions of the package that cost the most (their
   own time), for the parts outside the forwards (tokenization, batching, results).
On --device cuda, run 2 groups the GPU's own kernel time by kernel name instead (KERNELS: GEMMs,
attention, the fused log-prob op's Triton kernels, the rest), and the matmul rate is a 8192^2 one.
Also the model-FLOP efficiency of run 1, by the issue's definition: 2 x parameters x real tokens
per model pass (the LM head over every token for a causal LM), over wall time and the fp32 (or
bf16) matmul rate measured in this process. Time nothing else on the machine meanwhile.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

GROUPS = {
    "matmul": ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear",
               "aten::_mkldnn_matmul", "mkldnn::matmul", "aten::mkldnn_linear"),
    "attention": ("aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash_attention_for_cpu",
                  "aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_efficient_attention",
                  "aten::_scaled_dot_product_cudnn_attention",
                  "aten::_scaled_dot_product_attention_math", "aten::_softmax", "aten::softmax"),
    "copies and padding": ("aten::copy_", "aten::cat", "aten::contiguous", "aten::clone", "aten::index",
                           "aten::index_select", "aten::embedding", "aten::pad", "aten::constant_pad_nd",
                           "aten::to", "aten::_to_copy", "aten::stack", "aten::zeros", "aten::empty",
                           "aten::fill_", "aten::full", "aten::masked_fill", "aten::masked_fill_", "aten::where"),
    "norms and activations": ("aten::pow", "aten::mean", "aten::rsqrt", "aten::mul", "aten::add", "aten::silu",
                              "aten::sub", "aten::neg", "aten::cos", "aten::sin", "aten::div", "aten::tanh",
                              "aten::sum", "aten::exp", "aten::max", "aten::logsumexp", "aten::gather"),
}
LOGPROB_RANGE = "rmbench::logprob_op"


def build(dest: Path, data: str, vocab: int, hidden: int, layers: int, intermediate: int, heads: int) -> dict:
    from rmbench_fast.inputs.data import load_dataset
    from rmbench_fast.tiny.models import build_trio, corpus, train_tokenizer

    if (dest / "COMPLETE").is_file():
        return build_trio(dest, None)
    tok = train_tokenizer(corpus(load_dataset(data)), vocab)
    return build_trio(dest, tok, vocab_size=vocab, hidden=hidden, layers=layers, heads=heads,
                      intermediate=intermediate, max_positions=8192)


def matmul_rate(dtype, seconds: float = 3.0, device: str = "cpu") -> float:
    """The best square-matmul rate (FLOP/s) seen in `seconds`: 2048^2 on the CPU, 8192^2 on a GPU."""
    import torch

    n = 8192 if device == "cuda" else 2048
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    a, b = (torch.randn(n, n, dtype=dtype, device=device) for _ in range(2))
    a @ b
    sync()
    best, end = 0.0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        a @ b
        sync()
        best = max(best, 2 * n**3 / (time.perf_counter() - t0))
    return best


def issue_flops(run: dict, folder: Path, mode: str) -> float:
    """2 x parameters x real tokens per pass; a causal LM's LM head over every token (the issue's count)."""
    cfg = json.loads((folder / "config.json").read_text())
    h, layers, inter, vocab = (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["intermediate_size"],
                               cfg["vocab_size"])
    kv = cfg.get("num_key_value_heads", cfg["num_attention_heads"]) * h // cfg["num_attention_heads"]
    body = layers * (2 * h * h + 2 * h * kv + 3 * h * inter)
    head = h * vocab if mode != "rm" else h * 1
    tokens = sum(run["sequences"]["lengths"])
    return 2 * (body + head) * tokens * (2 if mode == "dpo" else 1)


def options(mode: str, models: dict, data: str, limit: int, dtype: str, out: str | None, device: str = "cpu"):
    from rmbench_fast.engine.score import ScoreOptions

    extra = dict(model=str(models["rm"])) if mode == "rm" else dict(model=str(models["policy"]),
                                                                     ref_model=str(models["reference"]))
    return ScoreOptions(data=data, limit=limit, dtype=dtype, cache=False, progress=False, bootstrap=0, output=out,
                        device=device, **extra)


def whole_process(mode: str, models: dict, data: str, limit: int, dtype: str, device: str = "cpu") -> dict:
    with tempfile.TemporaryDirectory() as out:
        args = ["--model", str(models["rm"])] if mode == "rm" else [
            "--model", str(models["policy"]), "--ref-model", str(models["reference"])]
        cmd = [sys.executable, "-m", "rmbench_fast", "score", *args, "--data", data, "--limit", str(limit),
               "--dtype", dtype, "--device", device, "--no-cache", "--bootstrap", "0", "-q", "--output", out]
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True, cwd=tempfile.gettempdir())
        wall = time.perf_counter() - t0
        run = json.loads((Path(out) / "run.json").read_text())
    return {"wall_s": wall, "timing": run["timing"], "sequences": {"lengths": run["sequences"]["lengths"]}
            if "lengths" in run.get("sequences", {}) else run.get("sequences"), "run": run}


# --device cuda: the GPU's kernels by name (lower case), first match wins; everything else is "other kernels"
KERNELS = (
    ("log-prob op", ("_linear_chunk_kernel", "_merge_kernel", "_logits_chunk_kernel")),  # kernels/*_triton.py
    ("attention", ("flash", "fmha", "attention", "attn")),
    ("matmul", ("gemm", "cutlass", "cublas", "xmma", "nvjet", "sm90_", "sm80_", "ampere_", "hopper")),
    ("norms and activations", ("elementwise", "reduce", "norm", "silu", "softmax", "vectorized", "unrolled")),
    ("copies and padding", ("copy", "memcpy", "memset", "fill", "cat", "index")),
)


def kernel_group(name: str) -> str:
    low = name.lower()
    return next((g for g, keys in KERNELS if any(k in low for k in keys)), "other kernels")


def gpu_groups(events) -> tuple[dict, dict]:
    """({group: s}, {kernel: s}) over the GPU's kernel events (their own device time)."""
    from torch.autograd import DeviceType

    groups = {g: 0.0 for g, _ in KERNELS} | {"other kernels": 0.0}
    by_name: dict[str, float] = {}
    for e in events:
        if e.device_type != DeviceType.CUDA:
            continue
        t = e.self_device_time_total / 1e6
        by_name[e.name] = by_name.get(e.name, 0.0) + t
        groups[kernel_group(e.name)] += t
    return groups, by_name


def op_breakdown(mode: str, models: dict, data: str, limit: int, dtype: str, device: str = "cpu") -> dict:
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    import rmbench_fast.scorers.dpo as dpo_mod
    import rmbench_fast.scorers.logprobs as lp_mod
    from rmbench_fast.engine.score import score

    wrapped = {}

    def wrap(module, name):
        fn = getattr(module, name)

        def inner(*a, **kw):
            with record_function(LOGPROB_RANGE):
                return fn(*a, **kw)

        wrapped[(module, name)] = fn
        setattr(module, name, inner)

    wrap(lp_mod, "linear_logprobs")
    wrap(dpo_mod, "logits_logprobs")
    cuda = device == "cuda"
    try:
        score(options(mode, models, data, limit, dtype, None, device))  # warm: imports, numba, first allocations
        t0 = time.perf_counter()
        with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
            run = score(options(mode, models, data, limit, dtype, None, device)).run
        wall = time.perf_counter() - t0
    finally:
        for (module, name), fn in wrapped.items():
            setattr(module, name, fn)
    if cuda:
        groups, by_name = gpu_groups(prof.events())
        t = run["timing"]
        return {"wall_s": wall, "timing": t, "kernels_s": groups, "kernels_total_s": sum(groups.values()),
                "forward_gpu_idle_s": max(0.0, t["forward_s"] - sum(groups.values())),
                "top_kernels_s": dict(sorted(by_name.items(), key=lambda kv: -kv[1])[:15]),
                "note": "the GPU's own time per kernel under torch.profiler; forward_gpu_idle_s: the forwards' wall "
                        "time the GPU computed nothing (launches, Python, host work)"}
    groups = {g: 0.0 for g in ("matmul", "attention", "norms and activations", "log-prob op", "copies and padding",
                               "other ops")}
    by_name: dict[str, float] = {}

    def under_logprob(e):
        p = e.cpu_parent
        while p is not None:
            if p.name == LOGPROB_RANGE:
                return True
            p = p.cpu_parent
        return False

    for e in prof.events():
        if e.name == LOGPROB_RANGE or not e.name.startswith(("aten::", "mkldnn::")):
            continue
        s = e.self_cpu_time_total / 1e6
        by_name[e.name] = by_name.get(e.name, 0.0) + s
        if under_logprob(e):
            groups["log-prob op"] += s
            continue
        for g, names in GROUPS.items():
            if e.name in names:
                groups[g] += s
                break
        else:
            groups["other ops"] += s
    t = run["timing"]
    forward = t["forward_s"]
    return {"wall_s": wall, "timing": t, "ops_s": groups, "ops_total_s": sum(groups.values()),
            "forward_outside_ops_s": max(0.0, forward - sum(groups.values())),
            "top_ops_s": dict(sorted(by_name.items(), key=lambda kv: -kv[1])[:15]),
            "note": "self CPU time per op under torch.profiler (its overhead included); forward_s is the run's own"}


def python_breakdown(mode: str, models: dict, data: str, limit: int, dtype: str, device: str = "cpu") -> dict:
    from rmbench_fast.engine.score import score

    prof = cProfile.Profile()
    prof.enable()
    score(options(mode, models, data, limit, dtype, None, device))
    prof.disable()
    stats = pstats.Stats(prof)
    rows = []
    for (file, line, fn), (cc, nc, tt, ct, _) in stats.stats.items():
        if "rmbench_fast" in file or "kernels" in file:
            rows.append((tt, ct, nc, f"{Path(file).relative_to(ROOT) if str(ROOT) in file else file}:{line}({fn})"))
    rows.sort(reverse=True)
    return {"package_functions_by_own_time": [
        {"own_s": round(tt, 4), "cumulative_s": round(ct, 4), "calls": nc, "function": f} for tt, ct, nc, f in rows[:20]]}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=os.environ.get("RMBENCH_DATA", str(ROOT.parent / "shared" / "rm-bench")))
    ap.add_argument("--limit", type=int, default=20, help="prompts per domain (default 20)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--modes", nargs="+", default=["rm", "dpo"], choices=["rm", "dpo"])
    ap.add_argument("--model-dir", default=str(Path(tempfile.gettempdir()) / "rmbench-profile-models"))
    ap.add_argument("--out", default=None, help="write the JSON here (e.g. benchmarks/results/profile-cpu.json)")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    a = ap.parse_args(argv)
    import torch

    models = build(Path(a.model_dir), a.data, 32000, 512, 4, 1408, 8)
    rate = matmul_rate(torch.float32 if a.dtype == "float32" else torch.bfloat16, device=a.device)
    result = {"shape": {"hidden": 512, "layers": 4, "intermediate": 1408, "vocab": 32000, "heads": 8},
              "limit_per_domain": a.limit, "dtype": a.dtype, "device": a.device, "threads": torch.get_num_threads(),
              "gpu": torch.cuda.get_device_name() if a.device == "cuda" else None,
              "matmul_rate_gflops": rate / 1e9, "torch": torch.__version__, "modes": {}}
    for mode in a.modes:
        whole = whole_process(mode, models, a.data, a.limit, a.dtype, a.device)
        folder = Path(models["rm" if mode == "rm" else "policy"])
        flops = issue_flops(whole["run"], folder, mode)
        row = {"whole_process_s": whole["wall_s"], "timing": whole["timing"], "model_flops": flops,
               "mfu": flops / whole["wall_s"] / rate, "mfu_of_forwards": flops / whole["timing"]["forward_s"] / rate,
               "ops": op_breakdown(mode, models, a.data, a.limit, a.dtype, a.device),
               "python": python_breakdown(mode, models, a.data, a.limit, a.dtype, a.device)}
        result["modes"][mode] = row
        print(f"{mode}: {whole['wall_s']:.2f} s whole process, model-FLOP efficiency {row['mfu']:.2f} "
              f"(forwards alone {row['mfu_of_forwards']:.2f}); fixed {whole['timing']['fixed_s']:.2f} s", flush=True)
        ops = row["ops"]
        if "kernels_s" in ops:
            print("  kernels: " + ", ".join(f"{k} {v:.2f}" for k, v in ops["kernels_s"].items()) +
                  f"; GPU idle in the forwards {ops['forward_gpu_idle_s']:.2f}", flush=True)
        else:
            print("  ops: " + ", ".join(f"{k} {v:.2f}" for k, v in ops["ops_s"].items()) +
                  f"; forwards outside ops {ops['forward_outside_ops_s']:.2f}", flush=True)
    text = json.dumps(result, indent=1, default=str)
    if a.out:
        Path(a.out).write_text(text + "\n")
    return result


if __name__ == "__main__":
    main()

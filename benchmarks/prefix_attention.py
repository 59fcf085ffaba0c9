"""Shared prompt prefixes on the CPU: what they save, measured two ways; results as JSON.

    python benchmarks/prefix_attention.py --out F.json [--pairs 4] [--limit 20] [--rounds 2] [--dtype float32]

1. One layer's attention for suffix batches of RM-Bench-like shapes (8 heads of 64): the masked
   cache (the prefixes gathered before the suffixes, one [rows, 1, suffix, slots + suffix] mask),
   the split attention (inputs.prefix_attention: causal on the suffix, unmasked on each row's
   prefix, merged), and, for scale, what the unshared forward computes (causal over prefix + suffix).
   Median of 7, the three interleaved.
2. In one process, the DPO pass's forwards (run.json's forward_s) shared and unshared, alternating
   within each round (--pairs rounds at --pairs-limit prompts per domain): the pairs sit a minute
   apart, so the VM's drift touches both alike.
3. Whole processes of issue 34's DPO run (profile_breakdown's models, DPO with a reference,
   --no-cache): the default (shared, split attention) against --no-share-prefix, interleaved over
   rounds, each beside the fp32/bf16 matmul rate measured just before it (the VM's speed drifts by
   10% within minutes), and the model-FLOP efficiency of each (profile_breakdown.issue_flops).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import profile_breakdown  # noqa: E402

from rmbench_fast.inputs.prefix_attention import SplitPrefix, split_attention  # noqa: E402

SHAPES = [  # (prefix lengths of the batch's rows, suffix length)
    ([120], 800), ([80, 150], 600), ([60, 90, 200], 400), ([200], 1500), ([50, 70, 100, 40], 300)]


def attention_case(prefixes: list[int], length: int, heads: int = 8, dim: int = 64, reps: int = 7) -> dict:
    torch.manual_seed(0)
    rows = len(prefixes)
    q, k, v = (torch.randn(rows, heads, length, dim) for _ in range(3))
    flat_k, flat_v = torch.randn(sum(prefixes) + 1, heads, dim), torch.randn(sum(prefixes) + 1, heads, dim)
    starts = [sum(prefixes[:i]) for i in range(rows)]
    slots = max(prefixes)
    idx = torch.full((rows, slots), sum(prefixes), dtype=torch.long)  # holes: the zero row
    allowed = torch.zeros(rows, 1, length, slots + length, dtype=torch.bool)
    for r, p in enumerate(prefixes):
        idx[r, slots - p:] = torch.arange(starts[r], starts[r] + p)
        allowed[r, 0, :, slots - p:slots] = True
        allowed[r, 0, :, slots:] = torch.ones(length, length, dtype=torch.bool).tril()
    split = SplitPrefix([(flat_k, flat_v)], list(zip(starts, prefixes)))
    whole = [torch.randn(1, heads, p + length, dim) for p in prefixes]

    def masked():
        keys = torch.cat([flat_k[idx].transpose(1, 2), k], 2)
        values = torch.cat([flat_v[idx].transpose(1, 2), v], 2)
        return F.scaled_dot_product_attention(q, keys, values, attn_mask=allowed)

    def unshared():
        return [F.scaled_dot_product_attention(x, x, x, is_causal=True) for x in whole]

    fns = {"masked_cache": masked, "split": lambda: split_attention(q, k, v, split, 0), "unshared": unshared}
    err = float((masked() - split_attention(q, k, v, split, 0)).abs().max())
    times = {n: [] for n in fns}
    for _ in range(reps):
        for n, f in fns.items():
            t0 = time.perf_counter()
            f()
            times[n].append(time.perf_counter() - t0)
    return {"prefixes": prefixes, "suffix": length, **{f"{n}_ms": statistics.median(t) * 1e3 for n, t in times.items()},
            "split_vs_masked_max_abs_diff": err}


def whole_run(models: dict, data: str, limit: int, dtype: str, shared: bool) -> dict:
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "rmbench_fast", "score", "--model", str(models["policy"]), "--ref-model",
               str(models["reference"]), "--data", data, "--limit", str(limit), "--dtype", dtype, "--device", "cpu",
               "--no-cache", "--bootstrap", "0", "-q", "--output", out, *([] if shared else ["--no-share-prefix"])]
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True, cwd=tempfile.gettempdir())
        wall = time.perf_counter() - t0
        run = json.loads((Path(out) / "run.json").read_text())
    flops = profile_breakdown.issue_flops(run, Path(models["policy"]), "dpo")
    return {"wall_s": wall, "forward_s": run["timing"]["forward_s"], "fixed_s": run["timing"]["fixed_s"],
            "model_flops": flops, "shared_prefix": run["shared_prefix"],
            "prefix_attention": run["models"]["model"].get("prefix_attention")}


def forward_pairs(models: dict, data: str, limit: int, rounds: int, dtype: str) -> dict:
    from rmbench_fast.engine.score import ScoreOptions, score

    out = {"limit_per_domain": limit, "shared_forward_s": [], "unshared_forward_s": []}
    for r in range(rounds):
        for shared in ((True, False) if r % 2 == 0 else (False, True)):
            run = score(ScoreOptions(model=str(models["policy"]), ref_model=str(models["reference"]), data=data,
                                     limit=limit, dtype=dtype, device="cpu", cache=False, progress=False, bootstrap=0,
                                     share_prefix=shared))
            out["shared_forward_s" if shared else "unshared_forward_s"].append(run.run["timing"]["forward_s"])
            print(f"pair {r} {'shared' if shared else 'unshared'}: forwards {run.run['timing']['forward_s']:.1f} s",
                  flush=True)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(profile_breakdown.ROOT.parent / "shared" / "rm-bench"))
    ap.add_argument("--limit", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=2, help="whole-process pairs (0: the attention cases only)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--model-dir", default=str(Path(tempfile.gettempdir()) / "rmbench-profile-models"))
    ap.add_argument("--pairs", type=int, default=4, help="in-process rounds of shared / unshared (0: none)")
    ap.add_argument("--pairs-limit", type=int, default=8)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    result = {"threads": torch.get_num_threads(), "torch": torch.__version__, "dtype": a.dtype,
              "attention_fp32": [attention_case(p, n) for p, n in SHAPES]}
    for c in result["attention_fp32"]:
        print(f"attention {c['prefixes']} x {c['suffix']}: masked {c['masked_cache_ms']:.1f} ms, split "
              f"{c['split_ms']:.1f} ms, unshared {c['unshared_ms']:.1f} ms", flush=True)
    models = profile_breakdown.build(Path(a.model_dir), a.data, 32000, 512, 4, 1408, 8)
    if a.pairs:
        result["forward_pairs"] = forward_pairs(models, a.data, a.pairs_limit, a.pairs, a.dtype)
    if a.rounds:
        dt = torch.float32 if a.dtype == "float32" else torch.bfloat16
        runs = []
        for r in range(a.rounds):
            for shared in ((True, False) if r % 2 == 0 else (False, True)):
                rate = profile_breakdown.matmul_rate(dt)
                row = {"round": r, "shared": shared, "matmul_rate_gflops": rate / 1e9,
                       **whole_run(models, a.data, a.limit, a.dtype, shared)}
                row["mfu"] = row["model_flops"] / row["wall_s"] / rate
                runs.append(row)
                print(f"round {r} {'shared' if shared else 'unshared'}: {row['wall_s']:.1f} s, efficiency "
                      f"{row['mfu']:.3f} at {rate / 1e9:.0f} GFLOP/s", flush=True)
        result.update(limit_per_domain=a.limit, whole_process=runs)
    Path(a.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()

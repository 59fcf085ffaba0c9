"""Logit verdicts against RM mode: what scoring a judge without decoding costs next to a reward model.

    python benchmarks/judge_logits.py                       # 200 prompts of 300-1500 tokens, fp32 and bf16
    python benchmarks/judge_logits.py --prompts 40 --layers 4 --dtypes float32

One random-weight Llama backbone (hidden 512, 4 layers, vocabulary 32000 by default) under two
heads: LlamaForCausalLM scored by scorers.verdict.VerdictScorer (the base model's hidden state at
each prompt's last position times the two verdict rows of the LM head, with its once-per-pass
self-check against the model's own logits), and LlamaForSequenceClassification (the same backbone
weights) scored by scorers.rm.RewardModelScorer. Both run on the same sequences (random token ids,
lengths drawn uniformly), through the same batches (make_batches with the same token budget), each
in a plain loop over its scorer's batch_fn, as the engine's runner calls it; rounds alternate the
two, and medians are reported. A fresh batch_fn per round: the self-check is timed as in any pass.

Reported per dtype: wall seconds and real tokens/s of each, the ratio verdict / RM time (goal: at
most 1.25), and the largest difference between the verdict logits and the model's own full logits
at the last position of a few sequences (each alone). The load average is recorded before and
after (after counts this benchmark's own threads): numbers started at a load of 0.5 or more are
noisy on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the checkout's package, also when run as a plain script

GOAL_RATIO = 1.25  # verdict time / RM time
TOKEN_IDS = (319, 350)  # any two ids: random weights favour none


def build(vocab: int, hidden: int, layers: int, heads: int, seed: int = 0):
    """A causal LM and a sequence classifier on one random backbone (the same weights)."""
    import torch
    from transformers import LlamaForCausalLM, LlamaForSequenceClassification

    from rmbench_fast.tiny.models import llama_config

    torch.manual_seed(seed)
    lm = LlamaForCausalLM(llama_config(vocab, hidden=hidden, layers=layers, heads=heads, max_positions=4096)).eval()
    cfg = llama_config(vocab, hidden=hidden, layers=layers, heads=heads, max_positions=4096, pad_token_id=0)
    cfg.num_labels = 1
    rm = LlamaForSequenceClassification(cfg).eval()
    missing, unexpected = rm.model.load_state_dict(lm.model.state_dict(), strict=True)
    assert not missing and not unexpected
    return lm, rm


def sequences(n: int, lo: int, hi: int, vocab: int, seed: int = 0):
    """n random prompts of lengths uniform in [lo, hi]; ids avoid 0-2 (pad, BOS, EOS)."""
    import numpy as np

    from rmbench_fast.inputs.tokenize import Encoded

    rng = np.random.default_rng(seed)
    return [Encoded(rng.integers(3, vocab, int(k)).tolist()) for k in rng.integers(lo, hi + 1, n)]


def timed_pass(scorer, model, seqs, batches, device):
    """One pass: a fresh batch_fn, every batch in order; (seconds, outputs of the first name, info)."""
    import numpy as np

    name = next(iter(scorer.outputs))
    out = np.zeros((len(seqs), *scorer.outputs[name]))
    t0 = time.perf_counter()
    run = scorer.batch_fn(model, device)
    for b in batches:
        out[b.indices] = run(seqs, b)[name]
    return time.perf_counter() - t0, out, dict(getattr(run, "info", {}))


def own_logits_diff(lm, seqs, verdict, k: int = 3) -> float:
    """max |verdict logits - the model's own last-position logits| over the k shortest sequences alone."""
    import numpy as np
    import torch

    worst = 0.0
    with torch.inference_mode():
        for i in np.argsort([len(e.ids) for e in seqs])[:k]:
            own = lm(input_ids=torch.tensor([seqs[i].ids])).logits[0, -1, list(TOKEN_IDS)].double().numpy()
            worst = max(worst, float(np.abs(own - verdict[i]).max()))
    return worst


def run(prompts: int, lo: int, hi: int, vocab: int, hidden: int, layers: int, heads: int, max_tokens: int,
        dtypes, rounds: int, out: str | None, echo=print) -> dict:
    import torch
    import transformers

    from rmbench_fast.inputs.batching import make_batches, token_counts
    from rmbench_fast.scorers.rm import RewardModelScorer
    from rmbench_fast.scorers.verdict import VerdictScorer

    device = torch.device("cpu")
    load_before = os.getloadavg()
    echo(f"load average before: {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}")
    lm, rmm = build(vocab, hidden, layers, heads)
    seqs = sequences(prompts, lo, hi, vocab)
    lengths = [len(e.ids) for e in seqs]
    batches = make_batches(lengths, max_tokens)
    counts = token_counts(lengths, batches)
    verdict, rm = VerdictScorer(0, TOKEN_IDS), RewardModelScorer(0, 0)
    warm = make_batches(lengths[:4], max_tokens)
    rows = {}
    for dtype_name in dtypes:
        dtype = getattr(torch, dtype_name)
        lm, rmm = lm.to(dtype), rmm.to(dtype)  # fp32 first: bf16 is rounded from it
        timed_pass(verdict, lm, seqs[:4], warm, device)  # first-call costs (allocator, kernels) out of the rounds
        timed_pass(rm, rmm, seqs[:4], warm, device)
        detail = {"verdict": [], "rm": []}
        info, logits = None, None
        for r in range(rounds):
            t_v, logits, info = timed_pass(verdict, lm, seqs, batches, device)
            t_r, _, _ = timed_pass(rm, rmm, seqs, batches, device)
            detail["verdict"].append(t_v)
            detail["rm"].append(t_r)
            echo(f"{dtype_name} round {r + 1}/{rounds}: verdict {t_v:.1f}s, rm {t_r:.1f}s, ratio {t_v / t_r:.3f}")
        med = {k: statistics.median(v) for k, v in detail.items()}
        rows[dtype_name] = {
            "verdict": {"wall_s": med["verdict"], "tokens_per_s": counts["real_tokens"] / med["verdict"]},
            "rm": {"wall_s": med["rm"], "tokens_per_s": counts["real_tokens"] / med["rm"]},
            "time_ratio_verdict_over_rm": statistics.median(v / r for v, r in zip(detail["verdict"], detail["rm"])),
            "verdict_head": info.get("logprob_head"),
            "max_abs_diff_vs_own_logits": own_logits_diff(lm, seqs, logits),
            "rounds_wall_s": detail,
        }
    load_after = os.getloadavg()
    result = {
        "benchmark": "judge-logits",
        "machine": {"platform": platform.platform(), "processor": platform.processor(), "cpus": os.cpu_count(),
                    "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
                    "transformers": transformers.__version__, "python": platform.python_version(),
                    "load_average_before": list(load_before), "load_average_after": list(load_after),
                    "load_average_note": "after includes this benchmark's own threads (about torch_threads)",
                    "quiet": load_before[0] < 0.5},
        "model": {"vocab": vocab, "hidden": hidden, "layers": layers, "heads": heads, "intermediate": 4 * hidden,
                  "verdict_token_ids": list(TOKEN_IDS)},
        "sequences": {"prompts": prompts, "length_range": [lo, hi], **counts, "max_tokens_per_batch": max_tokens},
        "rounds": rounds,
        "goals": {"time_ratio_verdict_over_rm": GOAL_RATIO},
        "rows": rows,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    path = Path(out) if out else REPO / "benchmarks" / "results" / "judge-logits-cpu.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    echo(markdown_table(result))
    echo(f"wrote {path}")
    return result


def markdown_table(result: dict) -> str:
    lines = ["| dtype | verdict tokens/s | RM tokens/s | time verdict / RM (goal <= 1.25) | verdict head "
             "| max diff vs own logits |", "| --- | ---: | ---: | ---: | --- | ---: |"]
    for dtype, r in result["rows"].items():
        lines.append(f"| {dtype} | {r['verdict']['tokens_per_s']:,.0f} | {r['rm']['tokens_per_s']:,.0f} | "
                     f"{r['time_ratio_verdict_over_rm']:.3f} | {r['verdict_head']} | "
                     f"{r['max_abs_diff_vs_own_logits']:.1e} |")
    m = result["machine"]
    lines.append(f"load average {m['load_average_before'][0]:.2f} before, {m['load_average_after'][0]:.2f} after"
                 + ("" if m["quiet"] else " (noisy: 0.5 or more)"))
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=200)
    ap.add_argument("--min-len", type=int, default=300)
    ap.add_argument("--max-len", type=int, default=1500)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=16384, help="token budget per batch, the same for both")
    ap.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"], choices=["float32", "bfloat16"])
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds; medians are reported")
    ap.add_argument("--out", default=None, help="JSON file [default: benchmarks/results/judge-logits-cpu.json]")
    a = ap.parse_args(argv)
    run(a.prompts, a.min_len, a.max_len, a.vocab, a.hidden, a.layers, a.heads, a.max_tokens, a.dtypes, a.rounds,
        a.out)


if __name__ == "__main__":
    main()

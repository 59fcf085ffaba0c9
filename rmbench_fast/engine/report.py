"""run.json: how a run was scored (options, scorer, models, versions, machine), what it computed
(token counts, batches, truncation, shared prefixes, the sequence lengths benchmarks need) and how
long it took."""

from __future__ import annotations

import platform
import time
from dataclasses import asdict

import numpy as np
import torch

from ..inputs.batching import token_counts
from ..inputs.spans import count
from ..inputs.tokenize import OFFICIAL_MAX_LENGTH
from ..store.keys import library_versions


def versions() -> dict:
    import numba

    return {**library_versions(), "numba": numba.__version__, "numpy": np.__version__}


def run_info(prep, o, passes: dict, store, t_start: float) -> dict:
    seqs, lengths, plan = prep.seqs, prep.lengths, prep.plan
    counts = token_counts(prep.batch_lengths, prep.batches)
    shared = plan.shared_tokens() if plan is not None else 0
    # real_tokens: every sequence whole; padded_tokens: what the model computes (the batches with
    # their padding, each shared prefix once), so below real_tokens when prefixes are shared;
    # padding_ratio: computed tokens with padding over computed tokens without (padding alone)
    counts.update(real_tokens=int(lengths.sum()), padded_tokens=counts["padded_tokens"] + shared,
                  padding_ratio=(counts["padded_tokens"] + shared) / max(1, counts["real_tokens"] + shared),
                  shared_prefix={"prompts": plan.prompts() if plan is not None else 0,
                                 "tokens_saved": plan.saved_tokens() if plan is not None else 0})
    computed = [p for p in passes.values() if not p.info["cached"]]
    score_s = sum(p.info["seconds"] for p in computed)
    computed_tokens = counts["real_tokens"] * len(computed)
    return {
        "options": asdict(o),
        **prep.scorer.describe(),
        **prep.scorer.notes(seqs),
        "compat": o.compat,
        "chat_template": prep.fmt.name,
        "chat_template_departs_from_official": prep.fmt.departure,
        "device": str(prep.device),
        "compute_device": str(prep.target.compute),  # differs from device only for a stand-in GPU
        "dtype": str(prep.dtype).replace("torch.", ""),
        "precision": prep.precision.describe(),
        "models": {role: p.info for role, p in passes.items()},
        # per computed pass: the pre-flight's estimate (engine.preflight) beside the measured peak (engine.runner)
        "memory": memory_summary(passes),
        "versions": versions(),
        "machine": {"platform": platform.platform(), "python": platform.python_version(),
                    "cpu_threads": torch.get_num_threads(),
                    "gpu": prep.target.gpu,
                    "peak_gpu_gib": (torch.cuda.max_memory_allocated(prep.target.compute) / 2**30
                                     if prep.target.compute.type == "cuda" and o.engine != "ray" else None)},
        "n_prompts": len(prep.samples),
        "n_sequences": len(seqs),
        **counts,
        # what benchmarks need to count model FLOPs without preparing the run again
        "sequences": {"lengths": lengths.tolist(), "scored_tokens": int(sum(len(e.ids) - e.start for e in seqs))},
        "passes": len(passes),
        "passes_computed": len(computed),
        "max_sequence_tokens": int(lengths.max()) if len(lengths) else 0,
        "sequences_over_2048_tokens": int(sum(len(e.ids) + e.cut > OFFICIAL_MAX_LENGTH for e in seqs)),
        # --compat official's cuts (0 without it), whatever the benchmark (inputs.tokenize)
        "truncated": {"sequences": int(sum(e.cut > 0 for e in seqs)), "tokens": int(sum(e.cut for e in seqs))},
        "score_span": span_info(prep),
        "cache": {"dir": str(store.root) if store.enabled else None, "tokenized_from_cache": prep.tokenize_cached},
        "wall_s": time.perf_counter() - t_start,
        "load_s": prep.load_s,  # data, configs, tokenizers (before tokenizing and the passes)
        "tokenize_s": prep.tokenize_s,
        "score_s": score_s,
        "tokens_per_s": computed_tokens / score_s if score_s > 0 and computed_tokens else None,
        "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def span_info(prep) -> dict | None:
    """--score-span (inputs.spans): its TEXT, the responses, those without TEXT (scored whole) and, for
    DPO, the sequences left with no scored token (compat truncation cut their span off); None without."""
    text = getattr(prep.scorer, "span", None)
    out = count(prep.samples, text)
    if out is not None and prep.scorer.mode == "dpo":
        out["sequences_without_scored_tokens"] = int(sum(len(e.ids) <= e.start for e in prep.seqs))
    return out


def memory_summary(passes: dict) -> dict:
    """Per pass that recorded it: estimated bytes (weights, activations of the largest batch, total),
    what was available, and the measured peak."""
    out = {}
    for role, p in passes.items():
        m = p.info.get("memory")
        if not m:
            continue
        est, got = m.get("estimate") or {}, m.get("measured") or {}
        out[role] = {"weights_bytes": est.get("weights_bytes"), "activation_bytes": est.get("activation_bytes"),
                     "estimate_bytes": est.get("total_bytes"), "available_bytes": est.get("available"),
                     "fits": est.get("fits"), "measured_peak_bytes": got.get("peak_bytes"),
                     "placement": (p.info.get("placement") or {}).get("modules_per_device")}
    return out


def timing(run: dict, passes: dict, started: float | None, t_start: float, t_finish: float) -> dict:
    """Where a run's time went, from the process's start (`started`, a perf_counter value; None: from
    this run's start) to results written: `fixed_s` is all of it but loading models and their forward
    passes (what a run costs whatever the model)."""
    computed = [p.info for p in passes.values() if not p.info["cached"]]
    model_load = sum(i.get("load_s", 0.0) for i in computed)
    forward = sum(i.get("batches_s", 0.0) for i in computed)
    now = time.perf_counter()
    total = now - (t_start if started is None else started)
    return {"startup_s": None if started is None else t_start - started,  # interpreter, imports, finished-run check
            "load_s": run["load_s"], "tokenize_s": run["tokenize_s"],
            "fingerprint_s": sum(p.info.get("fingerprint_s", 0.0) for p in passes.values()),
            "model_load_s": model_load, "forward_s": forward,
            "passes_s": run["score_s"],  # the computed passes: model loading, forwards, their bookkeeping
            "finish_s": now - t_finish,  # rewards, metrics and results files
            "total_s": total, "fixed_s": total - model_load - forward}

"""`score`: data -> templates -> tokenize -> batch -> score -> metrics -> results."""

from __future__ import annotations

import gc
import os
import platform
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from . import __version__
from .batching import Batch, make_batches, token_counts
from .checks import (check_kind, check_options, check_output, check_reference, context_check, logprob_impl_used,
                     sequence_name)
from .data import Sample, load_dataset
from .errors import UsageError
from .fingerprints import (data_fingerprint, default_cache_root, model_fingerprint, sha256_text,
                           tokenizer_fingerprint)
from .metrics import summarize
from .models import (detect_mode, is_causal_decoder, load_config, load_model, load_tokenizer, resolve_device,
                     resolve_dtype)
from .options import DEFAULT_MAX_TOKENS, ScoreOptions
from .prefix import (PrefixKV, PrefixPlan, default_budget_bytes, kv_bytes_per_token, plan_batches, plan_prefixes,
                     readout_limits)
from .results import atomic_write_json, write_results
from .runtime import keep_freed_memory
from .scorers.dpo import dpo_rewards, sequence_logprob_stats
from .scorers.rm import pick_label, score_rm
from .store import Store
from .templates import ChatFormat
from .tokenize import OFFICIAL_MAX_LENGTH, Encoded, encode_dpo, encode_rm, official_tokenizer_class, rm_appends_eos


@dataclass
class ScoreRun:
    samples: list[Sample]
    chosen: np.ndarray  # [n_prompts, 3]
    rejected: np.ndarray
    summary: dict
    run: dict = field(default_factory=dict)


def sequence_index(p: int, style: int, rejected: bool) -> int:
    """Where (prompt p, style, chosen/rejected) sits in the run's sequence list."""
    return 6 * p + 2 * style + int(rejected)


def build_sequences(samples, tokenizer, fmt: ChatFormat, mode: str, compat: bool, tokenizer_path=None
                    ) -> list[Encoded]:
    """Every sequence of the run, at sequence_index(p, style, rejected)."""
    if mode == "rm":
        texts = [fmt.text(s.prompt, resp) for s in samples for k in range(3) for resp in (s.chosen[k], s.rejected[k])]
        append_eos = rm_appends_eos(tokenizer, fmt.tokenizer_has_template, tokenizer_path)
        return encode_rm(tokenizer, texts, append_eos, OFFICIAL_MAX_LENGTH if compat else None)
    prompts = [fmt.text(s.prompt) for s in samples]
    fulls = [[fmt.text(s.prompt, resp) for k in range(3) for resp in (s.chosen[k], s.rejected[k])] for s in samples]
    return [e for per_prompt in encode_dpo(tokenizer, prompts, fulls, compat) for e in per_prompt]


OUT_OF_MEMORY = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)


def _run_batches(run, batches, prep: Prepared) -> None:
    """run([batch]) for each batch; an out-of-memory error halves that batch's token budget and
    retries its sequences, down to a single sequence, which then fails naming itself."""
    for batch in batches:
        try:
            run([batch])
        except OUT_OF_MEMORY:
            if prep.device.type == "cuda":
                torch.cuda.empty_cache()
            if len(batch.indices) == 1:
                i = int(batch.indices[0])
                raise UsageError(f"out of memory scoring {sequence_name(prep.samples, i)} ({prep.lengths[i]} tokens) "
                                 "alone: use a smaller --dtype, a bigger device, or --compat official to truncate"
                                 ) from None
            sub = make_batches(prep.batch_lengths[batch.indices], max(1, batch.padded_tokens // 2))
            _run_batches(run, [Batch(batch.indices[b.indices], b.max_len) for b in sub], prep)


class _Progress:
    def __init__(self, total: int, enabled: bool, lengths, desc: str = "scoring"):
        self.lengths = lengths
        self.tokens = 0
        self.t0 = time.perf_counter()
        self.bar = None
        if enabled:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, unit="seq", desc=desc, dynamic_ncols=True, file=sys.stderr, mininterval=0.5)

    def skip(self, n: int):
        if self.bar is not None:
            self.bar.update(n)

    def __call__(self, batch):
        self.tokens += int(self.lengths[batch.indices].sum())
        if self.bar is not None:
            self.bar.update(len(batch.indices))
            self.bar.set_postfix_str(f"{self.tokens / max(time.perf_counter() - self.t0, 1e-9):,.0f} tok/s")

    def close(self):
        if self.bar is not None:
            self.bar.close()


@dataclass
class Prepared:
    """Everything a model pass needs, computed once per (tokenizer, template, data, options)."""

    samples: list[Sample]
    mode: str
    ref_free: str | None
    config: object
    tokenizer: object
    fmt: ChatFormat
    seqs: list[Encoded]
    lengths: np.ndarray
    batches: list
    max_tokens: int  # --max-tokens-per-batch, or the device's default
    plan: PrefixPlan | None  # shared prompt prefixes; then batches hold suffixes
    batch_lengths: np.ndarray  # what the batches were cut from: lengths, less shared prefixes
    device: torch.device
    dtype: torch.dtype
    pad_id: int
    tok_key: str | None
    tokenize_s: float
    tokenize_cached: bool


def open_store(o: ScoreOptions) -> Store:
    if not o.cache:
        return Store(None)
    return Store(Path(o.cache_dir) if o.cache_dir else default_cache_root() / "store")


def prepare(o: ScoreOptions, store: Store) -> Prepared:
    """data -> templates -> tokenize -> batch, with the tokenized inputs cached in the store."""
    check_options(o)
    compat = o.compat == "official"
    device = resolve_device(o.device)
    dtype = resolve_dtype(o.dtype, device)
    samples = load_dataset(o.data, domains=o.domains, limit=o.limit)
    config = load_config(o.model, o.trust_remote_code)
    mode = detect_mode(config) if o.mode == "auto" else o.mode
    check_kind(o.model, config, mode, "model")
    if mode == "rm" and o.ref_model is not None:
        raise UsageError("--ref-model is for DPO models; the model is a sequence classifier (rm mode)")
    if mode == "rm" and o.ref_free is not None:
        raise UsageError("--ref-free is for DPO models; the model is a sequence classifier (rm mode)")
    ref_free = None if (mode == "rm" or o.ref_model) else (o.ref_free or "avg")
    tok_path = o.tokenizer or o.model
    tokenizer = load_tokenizer(tok_path, o.trust_remote_code)
    if mode == "dpo":
        try:
            logprob_impl_used(o.logprob_impl, device)
        except (RuntimeError, ValueError) as e:
            raise UsageError(f"--logprob-impl {o.logprob_impl}: {e}") from None
    if mode == "dpo" and tokenizer.eos_token_id is None:
        raise UsageError(f"tokenizer {tok_path}: has no EOS token, which DPO scoring appends to every response")
    if o.ref_model:
        check_reference(o, config, tokenizer)
    fmt = ChatFormat(tokenizer, o.chat_template)

    t0 = time.perf_counter()
    tok_fp = tokenizer_fingerprint(tok_path, store.hashes)
    tok_key = None if tok_fp is None else sha256_text(
        "tokenized-v1", tok_fp, fmt.name, fmt.jinja, data_fingerprint(samples), mode, compat,
        official_tokenizer_class(tokenizer, tok_path), fmt.tokenizer_has_template)
    cached = store.get(tok_key) if tok_key else None
    if cached is not None:
        seqs = _unpack_seqs(cached)
    else:
        seqs = build_sequences(samples, tokenizer, fmt, mode, compat, tok_path)
        if tok_key:
            store.put(tok_key, _pack_seqs(seqs))
    tokenize_s = time.perf_counter() - t0
    context_check(samples, seqs, config, compat)
    lengths = np.array([len(e.ids) for e in seqs], dtype=np.int64)
    pad_id = tokenizer.eos_token_id  # the official DPO flow pads with EOS
    if mode == "rm":
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    max_tokens = o.max_tokens_per_batch or DEFAULT_MAX_TOKENS.get(device.type, DEFAULT_MAX_TOKENS["cuda"])
    plan = None
    if o.share_prefix and is_causal_decoder(config):
        ids = [e.ids for e in seqs]
        plan = plan_prefixes(ids, readout_limits(ids, [e.start for e in seqs], mode, pad_id),
                             kv_bytes_per_token(config, dtype), default_budget_bytes(device, o.prefix_cache_mb))
        plan = plan if plan.saved_tokens() > 0 else None
    if plan is not None:
        batch_lengths = lengths - plan.prefix
        batches = plan_batches(lengths, plan, max_tokens, o.max_batch_size)
    else:
        batch_lengths = lengths
        batches = make_batches(lengths, max_tokens, o.max_batch_size)
    return Prepared(samples, mode, ref_free, config, tokenizer, fmt, seqs, lengths, batches, max_tokens, plan,
                    batch_lengths, device, dtype, pad_id, tok_key, tokenize_s, cached is not None)


def _pack_seqs(seqs: list[Encoded]) -> dict:
    lengths = np.array([len(e.ids) for e in seqs], dtype=np.int64)
    return {"ids": np.array([t for e in seqs for t in e.ids], dtype=np.int64),
            "offsets": np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
            "starts": np.array([e.start for e in seqs], dtype=np.int64),
            "cuts": np.array([e.cut for e in seqs], dtype=np.int64)}


def _unpack_seqs(a: dict) -> list[Encoded]:
    ids, off = a["ids"].tolist(), a["offsets"].tolist()
    return [Encoded(ids[off[i]:off[i + 1]], int(a["starts"][i]), int(a["cuts"][i])) for i in range(len(off) - 1)]


@dataclass
class PassResult:
    arrays: dict  # rm: {"scores"}; dpo: {"total", "count", "sumsq"}
    info: dict  # fingerprint, class, cached or computed, seconds


def model_pass(prep: Prepared, o: ScoreOptions, model_path: str, role: str, store: Store, hooks=None,
               flush_every_s: float | None = None) -> PassResult:
    """One model over every sequence, through the store: a finished pass is reused as it is, an
    interrupted one resumes from its partial entry, and progress is saved every `flush_every_s`
    seconds and when the pass fails. hooks(role, batch) runs after each batch (tests count forward
    calls and inject failures with it)."""
    t0 = time.perf_counter()
    if flush_every_s is None:  # RMBENCH_FLUSH_SECONDS=0 saves progress after every batch
        flush_every_s = float(os.environ.get("RMBENCH_FLUSH_SECONDS", "5"))
    fp = model_fingerprint(model_path, store.hashes)
    store.hashes.save()
    impl = logprob_impl_used(o.logprob_impl, prep.device) if prep.mode == "dpo" else None
    label = pick_label(prep.config.num_labels, o.label_index, o.compat == "official") if prep.mode == "rm" else None
    key = None
    if fp["sha256"] and prep.tok_key:
        key = sha256_text("pass-v1", fp["sha256"], prep.tok_key, str(prep.dtype), prep.device.type, prep.mode, label,
                          impl, prep.max_tokens, o.max_batch_size, *_plan_key(prep.plan))
    info = {**fp, "role": role, "key": key}
    done_arrays = store.get(key) if key else None
    if done_arrays is not None:
        return PassResult(done_arrays, {**info, "cached": True, "seconds": time.perf_counter() - t0})

    n = len(prep.seqs)
    names = ("scores",) if prep.mode == "rm" else ("total", "count", "sumsq")
    partial = store.get_partial(key) if key else None
    if partial is not None:
        arrays, done = {k: partial[k] for k in names}, partial["done"].astype(bool)
    else:
        arrays, done = {k: np.zeros(n) for k in names}, np.zeros(n, dtype=bool)
    todo = [b for b in prep.batches if not done[b.indices].all()]
    progress = _Progress(n, o.progress, prep.batch_lengths, desc=role)
    progress.skip(int(done.sum()))
    last_flush = time.perf_counter()

    def flush():
        if key:
            store.put_partial(key, {**arrays, "done": done})

    def on_batch(batch):
        nonlocal last_flush
        done[batch.indices] = True
        progress(batch)
        if hooks is not None:
            hooks(role, batch)
        if key and time.perf_counter() - last_flush >= flush_every_s:
            flush()
            last_flush = time.perf_counter()

    resumed = int(done.sum())
    model = None
    try:
        if todo and o.engine == "ray":
            from .distributed import RayConfig, run_pass_on_ray

            cfg = RayConfig(o.ray_address, o.num_workers, o.gpus_per_worker)
            run_pass_on_ray(cfg, prep, o, model_path, label, todo, arrays, on_batch)
            info.update({"engine": "ray", "workers": o.num_workers})
        elif todo:
            if prep.device.type == "cpu":
                info["malloc_keeps_freed_memory"] = keep_freed_memory()
            model = load_model(model_path, prep.mode, prep.dtype, prep.device, o.trust_remote_code,
                               o.allow_pickle_weights)
            info.update({"class": type(model).__name__, "parameters": sum(p.numel() for p in model.parameters())})
            seqs = [e.ids for e in prep.seqs]
            prefix = None
            if prep.plan is not None:
                prefix = PrefixKV(model, seqs, prep.plan, np.concatenate([b.indices for b in todo]), prep.pad_id,
                                  prep.device, prep.max_tokens)
            if prep.mode == "rm":
                if model.config.pad_token_id is None:  # as the official script: pool at the last non-pad token
                    model.config.pad_token_id = prep.pad_id

                def run(batch_list):
                    score_rm(model, seqs, batch_list, prep.pad_id, prep.device, label, arrays["scores"], on_batch,
                             prefix)
            else:
                starts = [e.start for e in prep.seqs]
                out = (arrays["total"], arrays["count"], arrays["sumsq"])

                def run(batch_list):
                    sequence_logprob_stats(model, seqs, starts, batch_list, prep.pad_id, prep.device, out, on_batch,
                                           o.logprob_impl, prefix)
            _run_batches(run, todo, prep)
            if prefix is not None:
                info["prefix_sharing"] = prefix.note
    except BaseException:
        if int(done.sum()) > resumed:
            flush()  # nothing finished is lost
        raise
    finally:
        progress.close()
        model = None  # free it before the next pass loads
        gc.collect()
    if key:
        store.put(key, arrays)
    return PassResult(arrays, {**info, "cached": False, "resumed_sequences": resumed,
                               "seconds": time.perf_counter() - t0})


def finish(prep: Prepared, o: ScoreOptions, passes: dict, t_start: float, store: Store) -> ScoreRun:
    """scores -> metrics -> results (written when o.output is set)."""
    if prep.mode == "rm":
        scores = passes["model"].arrays["scores"]
    else:
        policy = passes["model"].arrays
        ref = passes.get("ref_model")
        scores = dpo_rewards((policy["total"], policy["count"], policy["sumsq"]),
                             None if ref is None else (ref.arrays["total"],), prep.ref_free or "avg")
    n = len(prep.samples)
    idx = np.array([[sequence_index(p, k, False) for k in range(3)] for p in range(n)], dtype=np.int64)
    chosen, rejected = scores[idx], scores[idx + 1]
    summary = summarize(chosen, rejected, [s.domain for s in prep.samples], [s.subset for s in prep.samples],
                        [s.name for s in prep.samples])
    seqs, lengths = prep.seqs, prep.lengths
    counts = token_counts(prep.batch_lengths, prep.batches)
    plan = prep.plan
    shared = plan.shared_tokens() if plan is not None else 0
    # padded: what the model computes, the suffix batches with their padding and each shared prefix
    # once; real: every sequence whole, so padded < real when prefixes are shared
    counts.update(real_tokens=int(lengths.sum()), padded_tokens=counts["padded_tokens"] + shared,
                  padding_ratio=(counts["padded_tokens"] + shared) / max(1, counts["real_tokens"] + shared),
                  shared_prefix={"prompts": plan.prompts() if plan is not None else 0,
                                 "tokens_saved": plan.saved_tokens() if plan is not None else 0})
    computed = [p for p in passes.values() if not p.info["cached"]]
    score_s = sum(p.info["seconds"] for p in computed)
    computed_tokens = counts["real_tokens"] * len(computed)
    run = {
        "options": asdict(o),
        "mode": prep.mode,
        "ref_free": prep.ref_free,
        "compat": o.compat,
        "chat_template": prep.fmt.name,
        "device": str(prep.device),
        "dtype": str(prep.dtype).replace("torch.", ""),
        "logprob_impl": logprob_impl_used(o.logprob_impl, prep.device) if prep.mode == "dpo" else None,
        "models": {role: {k: v for k, v in p.info.items() if k != "key"} for role, p in passes.items()},
        "versions": _versions(),
        "machine": {"platform": platform.platform(), "python": platform.python_version(),
                    "cpu_threads": torch.get_num_threads(),
                    "gpu": torch.cuda.get_device_name(prep.device) if prep.device.type == "cuda" else None},
        "n_prompts": n,
        "n_sequences": len(seqs),
        **counts,
        "passes": len(passes),
        "passes_computed": len(computed),
        "max_sequence_tokens": int(lengths.max()) if len(lengths) else 0,
        "sequences_over_2048_tokens": int(sum(len(e.ids) + e.cut > OFFICIAL_MAX_LENGTH for e in seqs)),
        "truncated": {"sequences": int(sum(e.cut > 0 for e in seqs)), "tokens": int(sum(e.cut for e in seqs))},
        "cache": {"dir": str(store.root) if store.enabled else None, "tokenized_from_cache": prep.tokenize_cached},
        "wall_s": time.perf_counter() - t_start,
        "tokenize_s": prep.tokenize_s,
        "score_s": score_s,
        "tokens_per_s": computed_tokens / score_s if score_s > 0 and computed_tokens else None,
    }
    result = ScoreRun(prep.samples, chosen, rejected, summary, run)
    if o.output:
        out = Path(o.output)
        write_results(out, prep.samples, chosen, rejected, summary)
        atomic_write_json(out / "run.json", run)
    return result


def score(o: ScoreOptions, store: Store | None = None, hooks=None) -> ScoreRun:
    """Score every sample of `o.data` with `o.model`; write results when `o.output` is set.
    Finished work comes from the store (o.cache_dir, default ~/.cache/rmbench-fast/store)."""
    t_start = time.perf_counter()
    own_store = store is None
    store = store or open_store(o)
    try:
        if o.output:
            check_output(o)
        prep = prepare(o, store)
        passes = {"model": model_pass(prep, o, o.model, "model", store, hooks)}
        if o.ref_model:
            passes["ref_model"] = model_pass(prep, o, o.ref_model, "ref_model", store, hooks)
        return finish(prep, o, passes, t_start, store)
    finally:
        if own_store:
            store.close()


def _plan_key(plan: PrefixPlan | None) -> tuple:
    if plan is None:
        return ()
    return ("prefix-v1", sha256_text(plan.prefix.tobytes().hex(), plan.wave.tobytes().hex()))


def _versions() -> dict:
    import numba
    import transformers

    out = {"rmbench_fast": __version__, "torch": torch.__version__, "transformers": transformers.__version__,
           "numba": numba.__version__, "numpy": np.__version__}
    try:
        import triton

        out["triton"] = triton.__version__
    except ImportError:
        out["triton"] = None
    return out


"""`score`: data -> templates -> tokenize -> batch -> score -> metrics -> results."""

from __future__ import annotations

import gc
import platform
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from . import __version__
from .batching import make_batches, token_counts
from .data import HUB_DEFAULT, STYLES, Sample, load_dataset
from .errors import UsageError
from .metrics import summarize
from .models import (detect_mode, fingerprint, load_config, load_model, load_tokenizer, resolve_device,
                     resolve_dtype)
from .results import atomic_write_json, write_results
from .scorers.dpo import LOGPROB_IMPLS, dpo_rewards, sequence_logprob_stats
from .scorers.rm import pick_label, score_rm
from .templates import ChatFormat
from .tokenize import OFFICIAL_MAX_LENGTH, Encoded, encode_dpo, encode_rm, rm_appends_eos

REF_FREE = ("sum", "avg", "norm")
DEFAULT_MAX_TOKENS = 16384


@dataclass
class ScoreOptions:
    model: str
    data: str = HUB_DEFAULT
    output: str | None = None
    ref_model: str | None = None
    mode: str = "auto"  # auto | rm | dpo
    ref_free: str | None = None  # sum | avg | norm; DPO without a reference (default avg)
    tokenizer: str | None = None
    chat_template: str | None = None
    dtype: str | None = None
    device: str | None = None
    max_tokens_per_batch: int = DEFAULT_MAX_TOKENS
    max_batch_size: int | None = None
    compat: str | None = None  # "official": the official truncation and top-label score
    trust_remote_code: bool = False
    limit: int | None = None
    domains: tuple = ()
    label_index: int | None = None
    logprob_impl: str = "auto"  # auto | triton | torch | plain (DPO log-prob path)
    progress: bool = True


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


def _check_options(o: ScoreOptions):
    if o.mode not in ("auto", "rm", "dpo"):
        raise UsageError(f"--mode {o.mode}: expected auto, rm or dpo")
    if o.ref_free is not None and o.ref_free not in REF_FREE:
        raise UsageError(f"--ref-free {o.ref_free}: expected one of {', '.join(REF_FREE)}")
    if o.ref_free is not None and o.ref_model is not None:
        raise UsageError("--ref-free and --ref-model exclude each other: the reference-free rewards use no reference")
    if o.compat not in (None, "official"):
        raise UsageError(f"--compat {o.compat}: the only compatibility mode is 'official'")
    if o.logprob_impl not in LOGPROB_IMPLS:
        raise UsageError(f"--logprob-impl {o.logprob_impl}: expected one of {', '.join(LOGPROB_IMPLS)}")
    if o.max_tokens_per_batch < 1:
        raise UsageError("--max-tokens-per-batch must be at least 1")
    if o.max_batch_size is not None and o.max_batch_size < 1:
        raise UsageError("--max-batch-size must be at least 1")


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


def _context_check(samples, seqs: list[Encoded], config, compat: bool):
    limit = getattr(config, "max_position_embeddings", None)
    if compat or not limit:
        return
    for i, e in enumerate(seqs):
        if len(e.ids) > limit:
            s = samples[i // 6]
            side = "rejected" if i % 2 else "chosen"
            raise UsageError(f"sample {s.name}, {side} {STYLES[(i % 6) // 2]}: {len(e.ids)} tokens exceed the model's "
                             f"context length {limit}; use --compat official to truncate as the official scripts do")


class _Progress:
    def __init__(self, total: int, enabled: bool, lengths):
        self.lengths = lengths
        self.tokens = 0
        self.t0 = time.perf_counter()
        self.bar = None
        if enabled:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, unit="seq", desc="scoring", dynamic_ncols=True, file=sys.stderr,
                            mininterval=0.5)

    def __call__(self, batch):
        self.tokens += int(self.lengths[batch.indices].sum())
        if self.bar is not None:
            self.bar.update(len(batch.indices))
            self.bar.set_postfix_str(f"{self.tokens / max(time.perf_counter() - self.t0, 1e-9):,.0f} tok/s")

    def close(self):
        if self.bar is not None:
            self.bar.close()


def score(o: ScoreOptions) -> ScoreRun:
    """Score every sample of `o.data` with `o.model`; write results when `o.output` is set."""
    _check_options(o)
    t_start = time.perf_counter()
    compat = o.compat == "official"
    device = resolve_device(o.device)
    dtype = resolve_dtype(o.dtype, device)
    samples = load_dataset(o.data, domains=o.domains, limit=o.limit)
    config = load_config(o.model, o.trust_remote_code)
    mode = detect_mode(config) if o.mode == "auto" else o.mode
    if mode == "rm" and o.ref_model is not None:
        raise UsageError("--ref-model is for DPO models; the model is a sequence classifier (rm mode)")
    if mode == "rm" and o.ref_free is not None:
        raise UsageError("--ref-free is for DPO models; the model is a sequence classifier (rm mode)")
    ref_free = None if (mode == "rm" or o.ref_model) else (o.ref_free or "avg")
    tokenizer = load_tokenizer(o.tokenizer or o.model, o.trust_remote_code)
    fmt = ChatFormat(tokenizer, o.chat_template)

    t_tok = time.perf_counter()
    seqs = build_sequences(samples, tokenizer, fmt, mode, compat, o.tokenizer or o.model)
    tokenize_s = time.perf_counter() - t_tok
    _context_check(samples, seqs, config, compat)
    ids = [e.ids for e in seqs]
    lengths = np.array([len(x) for x in ids], dtype=np.int64)
    batches = make_batches(lengths, o.max_tokens_per_batch, o.max_batch_size)
    passes = 2 if o.ref_model else 1
    progress = _Progress(passes * len(seqs), o.progress, lengths)

    t_score = time.perf_counter()
    models_info = {}
    try:
        model = load_model(o.model, mode, dtype, device, o.trust_remote_code)
        models_info["model"] = {**fingerprint(o.model), "class": type(model).__name__,
                                "parameters": sum(p.numel() for p in model.parameters())}
        if mode == "rm":
            pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
            if model.config.pad_token_id is None:  # as the official script: pool at the last non-pad token
                model.config.pad_token_id = pad_id
            label = pick_label(model.config.num_labels, o.label_index, compat)
            scores = score_rm(model, ids, batches, pad_id, device, label, progress)
        else:
            pad_id = tokenizer.eos_token_id  # the official DPO flow pads with EOS
            starts = [e.start for e in seqs]
            policy = sequence_logprob_stats(model, ids, starts, batches, pad_id, device, progress, o.logprob_impl)
            ref = None
            if o.ref_model:
                del model
                gc.collect()
                ref_config = load_config(o.ref_model, o.trust_remote_code)
                if getattr(ref_config, "vocab_size", None) != getattr(config, "vocab_size", None):
                    raise UsageError(f"policy and reference vocabularies differ ({config.vocab_size} vs "
                                     f"{ref_config.vocab_size}): they must share one tokenizer")
                model = load_model(o.ref_model, mode, dtype, device, o.trust_remote_code)
                models_info["ref_model"] = {**fingerprint(o.ref_model), "class": type(model).__name__}
                ref = sequence_logprob_stats(model, ids, starts, batches, pad_id, device, progress, o.logprob_impl)
            scores = dpo_rewards(policy, ref, ref_free or "avg")
        del model
    finally:
        progress.close()
    score_s = time.perf_counter() - t_score

    n = len(samples)
    chosen = np.stack([scores[[sequence_index(p, k, False) for k in range(3)]] for p in range(n)])
    rejected = np.stack([scores[[sequence_index(p, k, True) for k in range(3)]] for p in range(n)])
    summary = summarize(chosen, rejected, [s.domain for s in samples], [s.subset for s in samples],
                        [s.name for s in samples])
    wall_s = time.perf_counter() - t_start
    counts = token_counts(lengths, batches)
    run = {
        "options": asdict(o),
        "mode": mode,
        "ref_free": ref_free,
        "compat": o.compat,
        "chat_template": fmt.name,
        "device": str(device),
        "logprob_impl": _logprob_impl_used(o.logprob_impl, device) if mode == "dpo" else None,
        "dtype": str(dtype).replace("torch.", ""),
        "models": models_info,
        "versions": _versions(),
        "machine": {"platform": platform.platform(), "python": platform.python_version(),
                    "cpu_threads": torch.get_num_threads(),
                    "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None},
        "n_prompts": n,
        "n_sequences": len(seqs),
        **counts,
        "passes": passes,
        "max_sequence_tokens": int(lengths.max()) if len(lengths) else 0,
        "sequences_over_2048_tokens": int(sum(len(e.ids) + e.cut > OFFICIAL_MAX_LENGTH for e in seqs)),
        "truncated": {"sequences": int(sum(e.cut > 0 for e in seqs)), "tokens": int(sum(e.cut for e in seqs))},
        "wall_s": wall_s,
        "tokenize_s": tokenize_s,
        "score_s": score_s,
        "tokens_per_s": passes * counts["real_tokens"] / score_s if score_s > 0 else None,
    }
    result = ScoreRun(samples, chosen, rejected, summary, run)
    if o.output:
        out = Path(o.output)
        write_results(out, samples, chosen, rejected, summary)
        atomic_write_json(out / "run.json", run)
    return result


def _logprob_impl_used(impl: str, device) -> str:
    from .kernels import resolve_impl

    return impl if impl == "plain" else resolve_impl(impl, device)


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


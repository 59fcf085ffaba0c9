"""data -> templates -> tokenize -> batch: everything a run's model passes need, computed once per
(tokenizer, template, data, options), with the tokenized inputs kept in the result store."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np
import torch

from .batching import make_batches
from .checks import check_options, check_reference, context_check
from .data import Sample, load_dataset
from .fingerprints import data_fingerprint, tokenizer_fingerprint
from .keys import tokenized_key
from .models import is_causal_decoder, load_config, load_tokenizer, resolve_device, tokenizer_folder
from .precision import Precision, choose as choose_precision
from .options import DEFAULT_MAX_TOKENS, ScoreOptions
from .prefix import PrefixPlan, default_budget_bytes, kv_bytes_per_token, plan_batches, plan_prefixes
from .scorers import Scorer, make_scorer
from .store import Store
from .templates import ChatFormat
from .tokenize import Encoded, official_tokenizer_class, pack, unpack

log = logging.getLogger("rmbench_fast")


@dataclass
class Prepared:
    samples: list[Sample]
    scorer: Scorer
    config: object
    tokenizer: object
    fmt: ChatFormat
    seqs: list[Encoded]  # every sequence of the run, in layout order
    lengths: np.ndarray
    batches: list
    max_tokens: int  # --max-tokens-per-batch, or the device's default
    plan: PrefixPlan | None  # shared prompt prefixes; then batches hold suffixes
    batch_lengths: np.ndarray  # what the batches were cut from: lengths, less shared prefixes
    device: torch.device
    precision: Precision
    tok_key: str | None
    tokenize_s: float
    tokenize_cached: bool

    @property
    def dtype(self) -> torch.dtype:
        return self.precision.dtype


def prepare(o: ScoreOptions, store: Store) -> Prepared:
    check_options(o)
    compat = o.compat == "official"
    device = resolve_device(o.device)
    samples = load_dataset(o.data, domains=o.domains, limit=o.limit)
    config = load_config(o.model, o.trust_remote_code)
    tok_path = tokenizer_folder(o.tokenizer or o.model)
    tokenizer = load_tokenizer(tok_path, o.trust_remote_code)
    scorer = make_scorer(o, config, tokenizer, device, tok_path)
    precision = choose_precision(o, device, scorer.mode, scorer.official_quantized, scorer.official_dtype)
    dtype, scorer.int8 = precision.dtype, precision.int8
    if o.ref_model:
        check_reference(o, config, tokenizer)
    fmt = ChatFormat(tokenizer, o.chat_template)
    if fmt.departure:
        log.warning("%s (run.json records it)", fmt.departure)

    t0 = time.perf_counter()
    tok_fp = tokenizer_fingerprint(tok_path, store.hashes)
    tok_key = None if tok_fp is None else tokenized_key(
        tok_fp, fmt.name, fmt.jinja, fmt.text("{prompt}", "{response}"), data_fingerprint(samples), type(scorer).__name__, compat,
        official_tokenizer_class(tokenizer, tok_path), fmt.tokenizer_has_template)
    cached = store.get(tok_key) if tok_key else None
    if cached is not None:
        seqs = unpack(cached)
    else:
        seqs = scorer.encode(samples, tokenizer, fmt, compat, tok_path)
        if tok_key:
            store.put(tok_key, pack(seqs))
    tokenize_s = time.perf_counter() - t0
    context_check(samples, seqs, config, compat)
    lengths = np.array([len(e.ids) for e in seqs], dtype=np.int64)
    max_tokens = o.max_tokens_per_batch or DEFAULT_MAX_TOKENS.get(device.type, DEFAULT_MAX_TOKENS["cuda"])
    plan = None
    if o.share_prefix and is_causal_decoder(config):
        limits = np.array([scorer.readout_limit(e) for e in seqs], dtype=np.int64)
        plan = plan_prefixes([e.ids for e in seqs], limits, kv_bytes_per_token(config, dtype),
                             default_budget_bytes(device, o.prefix_cache_mb))
        plan = plan if plan.saved_tokens() > 0 else None
    if plan is not None:
        batch_lengths = lengths - plan.prefix
        batches = plan_batches(lengths, plan, max_tokens, o.max_batch_size)
    else:
        batch_lengths = lengths
        batches = make_batches(lengths, max_tokens, o.max_batch_size)
    return Prepared(samples, scorer, config, tokenizer, fmt, seqs, lengths, batches, max_tokens, plan, batch_lengths,
                    device, precision, tok_key, tokenize_s, cached is not None)

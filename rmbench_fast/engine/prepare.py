"""data -> templates -> tokenize -> batch: everything a run's model passes need, computed once per
(tokenizer, template, data, options), with the tokenized inputs kept in the result store.

In three phases: load what the run names (data, configs, tokenizers, what each model is, the chat
format), then check it all at once (engine.checks.check_run), then build the scorer and the batches.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..errors import UsageError
from ..inputs.batching import make_batches
from ..inputs.data import Sample, load_dataset
from ..inputs.layout import PER_PROMPT
from ..inputs.prefix import PrefixPlan, default_budget_bytes, kv_bytes_per_token, plan_batches, plan_prefixes
from ..inputs.prefix_attention import expected
from ..inputs.templates import ChatFormat
from ..inputs.tokenize import Encoded, official_tokenizer_class, pack, unpack
from ..models.device import Target, local_target
from ..models.kinds import detect_mode, is_causal_decoder
from ..models.loading import load_config, load_tokenizer, tokenizer_folder
from ..models.precision import Precision
from ..models.precision import choose as choose_precision
from ..models.tokenizer_loading import read_json
from ..models.versions import parse_version, transformers_version
from ..models.weight_files import check_weights
from ..scorers import Scorer, make_scorer
from ..store.entries import Store
from ..store.fingerprints import data_fingerprint, tokenizer_fingerprint
from ..store.keys import tokenized_key
from .api.lent import Given, config_of, dtype_of, name_of
from .checks import check_options, check_run, context_check
from .options import DEFAULT_MAX_TOKENS, RM_BENCH, ScoreOptions

log = logging.getLogger("rmbench_fast")


@dataclass
class Loaded:
    """What a run names, loaded and not yet checked against each other."""
    target: Target  # where the passes compute (on Ray: what a worker has)
    logprob_impl: str | UsageError | None  # --logprob-impl as Ray workers resolve it, or why they cannot;
    # None: resolve it in this process
    samples: list[Sample]
    config: object
    tokenizer_path: str
    tokenizer_fp: str | None  # the fingerprint of its files (None: not a local folder)
    tokenizer: object
    adapter: object  # adapters.Adapter, or None for the plain scorers
    mode: str  # rm or dpo
    ref_config: object  # None without --ref-model
    ref_tokenizer: object  # None unless --ref-model is a folder with tokenizer files
    fmt: ChatFormat
    benchmark: str  # engine.benchmarks: rm-bench, or the benchmark whose rows `samples` holds


def run_target(o: ScoreOptions, reuse: dict | None = None) -> tuple[Target, object]:
    """Where the run's passes compute, and --logprob-impl as resolved there (None: in this process).
    On Ray the workers compute: decided from what one of them has, not from this process."""
    if o.engine != "ray":
        return local_target(o.device), None
    from .scaleout.distributed import RayConfig, probe_workers

    reuse = {} if reuse is None else reuse
    key = ("ray-target", o.ray_address, o.gpus_per_worker, o.device, o.logprob_impl)
    if key not in reuse:
        reuse[key] = probe_workers(RayConfig(o.ray_address, o.num_workers, o.gpus_per_worker), o.device,
                                   o.logprob_impl)
    return reuse[key]


def load_run(o: ScoreOptions, store: Store, reuse: dict | None = None, given: Given | None = None) -> Loaded:
    """What the run names, loaded. reuse: what earlier runs of this process loaded (a sweep's
    checkpoints share their data, and usually their tokenizer files): the data by selection, a
    tokenizer by the fingerprint of its files, so identical files load once. given: models and a
    tokenizer already loaded (engine.api.lent), read instead of o.model / o.ref_model / o.tokenizer."""
    from ..adapters import select

    reuse = {} if reuse is None else reuse
    target, logprob_impl = run_target(o, reuse)
    from .finished import stats

    from .benchmarks import benchmark_of, load_samples
    from .benchmarks import check as check_benchmark

    benchmark = benchmark_of(o)
    check_benchmark(o, benchmark)
    # with the files' stats: data edited during a sweep is loaded again, never stamped as what it was not
    data_key = ("data", benchmark, o.tie_credit, str(o.data), tuple(o.domains or ()), o.limit,
                json.dumps(stats(Path(o.data).expanduser())))
    if data_key not in reuse:
        reuse[data_key] = (load_dataset(o.data, domains=o.domains, limit=o.limit) if benchmark == RM_BENCH
                           else load_samples(o, benchmark))
    samples = reuse[data_key]
    given = given or Given({})
    lent, lent_ref = given.model("model"), given.model("ref_model")
    config = config_of(lent) if lent is not None else load_config(o.model, o.trust_remote_code, store)
    for role, path, held in (("model", o.model, lent), ("reference", o.ref_model, lent_ref)):
        if path and held is None:  # a pointer or a cut file: one line now, not a traceback from the pre-flight
            check_weights(path, role, o.allow_pickle_weights)
    if given.tokenizer is not None:  # used as it is: no files to fingerprint, nothing of it stored
        tokenizer, tok_fp = given.tokenizer, None
        tok_path = name_of(tokenizer) or f"<{type(tokenizer).__name__} in memory>"
    else:
        tok_path = tokenizer_folder(o.tokenizer or o.model)
        tok_fp = tokenizer_fingerprint(tok_path, store.hashes)
        tokenizer = _tokenizer(tok_path, tok_fp, o.trust_remote_code, reuse, store, o.chat_template)
    adapter = select(o.model, config, o.adapter) if o.mode in ("auto", "rm") else None
    if adapter is not None and lent is not None:
        raise UsageError(f"model {o.model}: scored through the {adapter.name} adapter, which loads the model its own "
                         "way; pass its path instead of the loaded model")
    mode = "rm" if adapter is not None else detect_mode(config) if o.mode == "auto" else o.mode
    ref_config = ref_tokenizer = None
    if lent_ref is not None:
        ref_config = config_of(lent_ref)
    elif o.ref_model:
        ref_config = load_config(o.ref_model, o.trust_remote_code, store)
        ref_dir = Path(o.ref_model)
        if ref_dir.is_dir() and any((ref_dir / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json")):
            ref_fp = tokenizer_fingerprint(o.ref_model, store.hashes)
            ref_tokenizer = _tokenizer(o.ref_model, ref_fp, o.trust_remote_code, reuse, store, o.chat_template)
    return Loaded(target, logprob_impl, samples, config, tok_path, tok_fp, tokenizer, adapter, mode, ref_config, ref_tokenizer,
                  ChatFormat(tokenizer, o.chat_template), benchmark)


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
    target: Target  # device: what keys and run.json name; compute: where tensors go
    precision: Precision
    tok_key: str | None
    tokenize_s: float
    tokenize_cached: bool
    load_s: float = 0.0  # load_run and check_run: data, configs, tokenizers, what each model is
    names: object = None  # how errors name sequence i (a callable); None: layout.sequence_name
    given: Given | None = None  # models lent in memory (engine.api.lent): their passes use them as they are
    benchmark: str = "rm-bench"  # engine.benchmarks: what the samples are and how finish aggregates them

    def name(self, i: int) -> str:
        from ..inputs.layout import sequence_name

        return self.names(i) if self.names is not None else sequence_name(self.samples, i)

    @property
    def dtype(self) -> torch.dtype:
        return self.precision.dtype

    @property
    def device(self) -> torch.device:
        return self.target.device


def _tokenizer(path: str, fp: str | None, trust_remote_code: bool, reuse: dict, store: Store,
               chat_template: str | None):
    """The tokenizer at `path`: loaded once per process for identical files, and from a later run on,
    while only its facts are read, a StoredTokenizer that loads it on first need (tokenizer_facts)."""
    if fp is None:  # not a local folder of tokenizer files: nothing to key it on
        return load_tokenizer(path, trust_remote_code)
    model_cfg = read_json(Path(path) / "config.json")  # 4.51's class can come from there (tokenizer_loading)
    key = ("tokenizer", fp, trust_remote_code, model_cfg.get("model_type"), model_cfg.get("tokenizer_class"))
    if key not in reuse:
        reuse[key] = _stored_tokenizer(path, trust_remote_code, store, chat_template, key)
    return reuse[key]


def _stored_tokenizer(path: str, trust_remote_code: bool, store: Store, chat_template: str | None, key: tuple):
    from ..models.tokenizer_facts import facts, stored_tokenizer
    from ..store.keys import tokenizer_facts_key

    if not store.enabled:
        return load_tokenizer(path, trust_remote_code, native=True)
    choice = chat_template
    if choice is not None and Path(choice).is_file():  # a Jinja file: its text, not its name
        choice = Path(choice).read_text(encoding="utf-8")
    fkey = tokenizer_facts_key(*key[1:], choice)
    got = store.get(fkey)
    if got is not None:
        return stored_tokenizer(json.loads(str(got["facts"])), lambda: load_tokenizer(path, trust_remote_code))
    tokenizer = load_tokenizer(path, trust_remote_code)
    try:
        jinja = ChatFormat(tokenizer, chat_template).jinja
    except UsageError:  # reported by the run itself (load_run's ChatFormat)
        return tokenizer
    kept = facts(tokenizer, jinja)
    if kept is not None:
        store.put(fkey, {"facts": np.array(json.dumps(kept))})
    return tokenizer


def shares_prefix(o: ScoreOptions, mode: str, device, compat: bool, config=None) -> bool:
    """--share-prefix as given, else where it was measured faster: DPO on the CPU for the models that
    take the split attention (inputs.prefix_attention.expected: Llama, Mistral, Qwen2; their forwards
    6% faster in four alternating pairs; scores within 3e-5, summary.json unchanged; docs/scoring.md).
    RM keeps its read-out (the last layer at one position), which a cached prefix forgoes and which
    saves more (27.1 s of forwards against 31.4 s shared); `--compat official` scores as the
    official flow does, unshared; GPUs and other architectures (the masked cache) are unmeasured;
    on Ray each unit computes its own prompts' prefixes in
    other batches (scores within 1e-6 of a local run, not equal), so it stays off there unless asked
    for; --tp and --device-map refuse it."""
    if o.share_prefix is not None:
        return o.share_prefix
    return (mode == "dpo" and device.type == "cpu" and not compat and o.tp == 1 and not o.device_map
            and o.engine == "local" and config is not None and expected(config))


def in_memory(o: ScoreOptions, store: Store) -> bool:
    """Whether this run's store entries live in this process alone (store.keys.IN_MEMORY)."""
    return not store.enabled and o.engine == "local" and o.tp == 1


def prepare(o: ScoreOptions, store: Store, reuse: dict | None = None, given: Given | None = None) -> Prepared:
    check_options(o)
    t_load = time.perf_counter()
    run = load_run(o, store, reuse, given)
    check_run(o, run)
    load_s = time.perf_counter() - t_load
    compat = o.compat == "official"
    samples, config, tokenizer, tok_path, fmt = run.samples, run.config, run.tokenizer, run.tokenizer_path, run.fmt
    target = run.target
    device = target.device
    if isinstance(run.logprob_impl, UsageError) and run.mode == "dpo" and run.adapter is None:
        raise run.logprob_impl
    impl = run.logprob_impl if isinstance(run.logprob_impl, str) else None
    scorer = make_scorer(o, run.mode, run.adapter, config, tokenizer, target.compute, tok_path, impl, run.benchmark)
    lent = given.model("model") if given is not None else None
    if lent is not None:  # scored in the dtype it is in, never cast
        precision = Precision(dtype_of(lent), False, "the loaded model's own dtype (passed in memory)")
    else:
        precision = choose_precision(o, device, scorer.mode, scorer.official_quantized, scorer.official_dtype)
    dtype, scorer.int8 = precision.dtype, precision.int8
    if fmt.departure:
        log.warning("%s (run.json records it)", fmt.departure)

    t0 = time.perf_counter()
    tok_fp = run.tokenizer_fp
    tok_key = None if tok_fp is None else tokenized_key(
        scorer.code_modules(), tok_fp, fmt.name, fmt.jinja, fmt.text("{prompt}", "{response}"),
        data_fingerprint(samples), type(scorer).__name__, compat, official_tokenizer_class(tokenizer, tok_path),
        fmt.tokenizer_has_template, *scorer.encode_key(), in_memory=in_memory(o, store))
    cached = store.get(tok_key) if tok_key else None
    if cached is not None:
        seqs = unpack(cached)
    else:
        seqs = scorer.encode(samples, tokenizer, fmt, compat, tok_path)
        if tok_key:
            store.put(tok_key, pack(seqs))
    tokenize_s = time.perf_counter() - t0
    context_check(samples, seqs, config, compat)
    masked = scorer.masks_attention(seqs, range(len(seqs)), is_causal_decoder(config))
    lengths = np.array([len(e.ids) for e in seqs], dtype=np.int64)
    max_tokens = o.max_tokens_per_batch or DEFAULT_MAX_TOKENS.get(device.type, DEFAULT_MAX_TOKENS["cuda"])
    plan = None
    if shares_prefix(o, scorer.mode, device, compat, config) and is_causal_decoder(config):
        limits = np.array([scorer.readout_limit(e) for e in seqs], dtype=np.int64)
        sizes = PER_PROMPT if run.benchmark == RM_BENCH else [len(s.responses) for s in samples]  # a row's responses
        plan = plan_prefixes([e.ids for e in seqs], limits, kv_bytes_per_token(config, dtype),
                             default_budget_bytes(target.memory, o.prefix_cache_mb), group_size=sizes)
        plan = plan if plan.saved_tokens() > 0 else None
    # a plain Llama without transformers (models.native_llama), in this process only; masked batches
    # (a doubled BOS) whole and masked as transformers 5 masks them on a torch whose SDPA takes a fully
    # masked row (transformers patched the mask for torch < 2.5)
    scorer.native = (o.engine == "local" and o.tp == 1 and not o.device_map and not compat
                     and (not masked or (plan is None and transformers_version() >= (5,)
                                         and parse_version(torch.__version__) >= (2, 5))))
    if plan is not None:
        batch_lengths = lengths - plan.prefix
        batches = plan_batches(lengths, plan, max_tokens, o.max_batch_size)
    else:
        batch_lengths = lengths
        batches = make_batches(lengths, max_tokens, o.max_batch_size)
    return Prepared(samples, scorer, config, tokenizer, fmt, seqs, lengths, batches, max_tokens, plan, batch_lengths,
                    target, precision, tok_key, tokenize_s, cached is not None, load_s, given=given,
                    benchmark=run.benchmark)

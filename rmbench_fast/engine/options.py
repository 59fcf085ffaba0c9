"""What a run is asked to do: the options of `score` and `sweep`, their choices and defaults.

The command line reads its choices and defaults from here, so the library and the CLI cannot
disagree. `checks.check_options` validates a ScoreOptions built by library callers.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from ..inputs.data import HUB_DEFAULT
from ..models.device import DTYPES
from ..scorers.names import DEFAULT_REF_FREE, REF_FREE

MODES = ("auto", "rm", "dpo")
LOGPROB_IMPLS = ("auto", "triton", "torch", "plain")
COMPAT = ("official",)
ENGINES = ("local", "ray")
# the benchmarks `score` runs (engine.benchmarks; rules: rmbench_fast.tasks)
RM_BENCH = "rm-bench"
BENCHMARK_NAMES = (RM_BENCH, "reward-bench", "reward-bench-2", "pairs")
# accelerate's placements (transformers' from_pretrained device_map strings): auto spreads the model
# over the visible devices as the official run_rm.py loads it
DEVICE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")
SIZE_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30,
              "tib": 2**40}  # as accelerate reads them: GB decimal, GiB binary
# Padded tokens per batch when not given: on GPU large batches; on CPU batches whose activations
# stay under glibc's mmap threshold (rmbench_fast.runtime), which measured 7-11% faster.
DEFAULT_MAX_TOKENS = {"cuda": 16384, "cpu": 2048}


@dataclass
class ScoreOptions:
    model: str
    data: str = HUB_DEFAULT
    output: str | None = None
    ref_model: str | None = None
    mode: str = "auto"  # MODES
    ref_free: str | None = None  # REF_FREE; DPO without a reference (default avg)
    tokenizer: str | None = None
    chat_template: str | None = None
    dtype: str | None = None  # DTYPES; default float32 on CPU, bfloat16 on GPU
    device: str | None = None
    max_tokens_per_batch: int | None = None  # default: DEFAULT_MAX_TOKENS for the device
    max_batch_size: int | None = None
    compat: str | None = None  # "official": the official truncation, multi-label lists and precision
    trust_remote_code: bool = False
    limit: int | None = None
    domains: tuple = ()
    label_index: int | None = None
    adapter: str | None = None  # a reward-model adapter by name (rmbench_fast.adapters); default: chosen from the model
    logprob_impl: str = "auto"  # LOGPROB_IMPLS (DPO log-prob path)
    # compute each prompt's shared prefix once (causal decoders); None: on where it is measured faster
    # (engine.prepare.shares_prefix: DPO on the CPU), off elsewhere
    share_prefix: bool | None = None
    tp: int = 1  # tensor-parallel ranks of each pass (engine.scaleout.tensor_parallel)
    prefix_cache_mb: int | None = None  # memory for prefix caches at a time (default: 1 GiB CPU, 1/10 GPU)
    cache: bool = True  # the result store: reuse finished work, resume interrupted work
    cache_dir: str | None = None  # default: $RMBENCH_CACHE/store or ~/.cache/rmbench-fast/store
    engine: str = "local"  # ENGINES
    ray_address: str | None = None
    num_workers: int = 2
    gpus_per_worker: float = 0.0
    overwrite: bool = False  # replace another run's results in `output`
    allow_pickle_weights: bool = False  # pickle weights (.bin) can run code when loaded
    benchmark: str | None = None  # engine.benchmarks.BENCHMARK_NAMES; default: detected from --data
    tie_credit: float = 0.0  # pairs: what a tie counts (0: wrong, as everywhere else)
    device_map: str | None = None  # DEVICE_MAPS: accelerate places the model over the visible devices (models.loading)
    # bytes per device, as accelerate takes them: {"0": "70GiB", "cpu": "200GiB"} (keys: GPU index, cpu, disk);
    # with device_map what it may put where, and for the pre-flight the memory it may count on
    max_memory: dict | None = None
    offload_folder: str | None = None  # device_map's disk offload (default: a temporary folder per pass)
    preflight: bool = True  # refuse a model that will not fit before loading it (engine.preflight)
    progress: bool = True
    # resamples of the prompts for summary.json's 95% intervals (results.intervals; 0: none). Not one of
    # SCORED_OPTIONS: another count gives the same scores, so a folder is rewritten, not refused
    bootstrap: int = 10_000
    # "after:TEXT": score only what follows the last TEXT of each response (inputs.spans; None: all of it)
    score_span: str | None = None


def memory_size(text) -> int:
    """Bytes from accelerate's size strings ("70GiB", "500MB", "1.5TB") or a number of bytes."""
    if isinstance(text, int) and not isinstance(text, bool) and text >= 0:
        return text
    raw = str(text).strip().lower().replace(" ", "")
    unit = next((u for u in sorted(SIZE_UNITS, key=len, reverse=True) if raw.endswith(u)), "")
    try:
        value = float(raw[:len(raw) - len(unit)])
    except ValueError:
        raise ValueError(f"{text!r} is not a size (e.g. 70GiB, 500MB)") from None
    if not value >= 0:
        raise ValueError(f"{text!r} is not a size (e.g. 70GiB, 500MB)")
    return int(value * SIZE_UNITS.get(unit, 1))


def max_memory_budgets(spec: dict | None) -> dict:
    """--max-memory as accelerate takes it: GPU indices as ints, cpu / disk as names, bytes as ints.
    Raises ValueError naming what is wrong."""
    out = {}
    for key, value in (spec or {}).items():
        k = str(key).strip().lower()
        if k.isdigit():
            k = int(k)
        elif k not in ("cpu", "disk"):
            raise ValueError(f"{key!r} is not a device (a GPU index, cpu or disk)")
        out[k] = memory_size(value)
    return out


def parse_max_memory(values) -> dict | None:
    """--max-memory 0=70GiB,cpu=200GiB (repeatable) -> {"0": "70GiB", "cpu": "200GiB"}."""
    out = {}
    for value in values or ():
        for part in str(value).split(","):
            if not part.strip():
                continue
            key, sep, size = part.partition("=")
            if not sep or not key.strip() or not size.strip():
                raise ValueError(f"{part!r} is not DEVICE=SIZE (e.g. 0=70GiB,cpu=200GiB)")
            out[key.strip()] = size.strip()
    return out or None


def default(name: str):
    """The default of a ScoreOptions field (for the command line)."""
    return next(f.default for f in fields(ScoreOptions) if f.name == name)


# The options that decide what a run's numbers are: a folder holding results of other values is
# another run's.
SCORED_OPTIONS = ("model", "ref_model", "mode", "ref_free", "data", "tokenizer", "chat_template", "dtype", "compat",
                  "label_index", "adapter", "limit", "domains", "score_span")

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
    share_prefix: bool = False  # compute each prompt's shared prefix once (causal decoders)
    prefix_cache_mb: int | None = None  # memory for prefix caches at a time (default: 1 GiB CPU, 1/10 GPU)
    cache: bool = True  # the result store: reuse finished work, resume interrupted work
    cache_dir: str | None = None  # default: $RMBENCH_CACHE/store or ~/.cache/rmbench-fast/store
    engine: str = "local"  # ENGINES
    ray_address: str | None = None
    num_workers: int = 2
    gpus_per_worker: float = 0.0
    overwrite: bool = False  # replace another run's results in `output`
    allow_pickle_weights: bool = False  # pickle weights (.bin) can run code when loaded
    progress: bool = True
    # resamples of the prompts for summary.json's 95% intervals (results.intervals; 0: none). Not one of
    # SCORED_OPTIONS: another count gives the same scores, so a folder is rewritten, not refused
    bootstrap: int = 10_000


def default(name: str):
    """The default of a ScoreOptions field (for the command line)."""
    return next(f.default for f in fields(ScoreOptions) if f.name == name)


# The options that decide what a run's numbers are: a folder holding results of other values is
# another run's.
SCORED_OPTIONS = ("model", "ref_model", "mode", "ref_free", "data", "tokenizer", "chat_template", "dtype", "compat",
                  "label_index", "adapter", "limit", "domains")

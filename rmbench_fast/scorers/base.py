"""The scorer interface: one object per scoring family owns everything that differs between them.

A scorer says which models a run passes over (`roles`), how a run's sequences are encoded, the
pad id, how a model is loaded and prepared, what one batch computes (`batch_fn`, returning one
array per name in `outputs`), how a pass's arrays become rewards, and what else decides a pass's
numbers (`pass_key`). The engine, the Ray workers and the sweep call only this interface; none of
them branches on the mode. A scorer holds plain settings (ids, names), never a model or a
tokenizer, so it pickles to Ray workers as it is.
"""

from __future__ import annotations

import numpy as np

from ..inputs.tokenize import Encoded


class Scorer:
    family = "base"  # recorded in run.json: rm, dpo, dpo-ref-free, or an adapter's name
    mode = "rm"  # rm (reward model) or dpo: which official script's rules apply (precision.choose)
    official_quantized = True  # the REWARD_MODEL_CONFIG entry's `quantized` (--compat official on CUDA)
    official_dtype = None  # the entry's pinned torch_dtype, if any
    int8 = False  # load 8-bit (set from precision.choose)
    outputs: dict[str, tuple] = {}  # float64 arrays a model pass yields: name -> one sequence's shape
    # set by make_scorer for every scorer (adapters' too): what the sequences are encoded for
    benchmark = "rm-bench"  # engine.options.BENCHMARK_NAMES: which official script's truncation applies
    span = None  # --score-span after:TEXT's TEXT (inputs.spans), None: every response scored whole

    def __init__(self, pad_id: int):
        self.pad_id = pad_id

    def roles(self, o) -> list[tuple[str, str]]:
        """(role, model path) of every model pass, in order."""
        return [("model", o.model)]

    def encode(self, samples, tokenizer, fmt, compat: bool, tokenizer_path=None) -> list[Encoded]:
        """Every sequence of the run, in layout order (rmbench_fast.layout)."""
        raise NotImplementedError

    def code_modules(self) -> tuple[str, ...]:
        """The modules whose code computes this scorer's numbers: store keys hash their sources and
        those of every module they import (store.keys)."""
        return (type(self).__module__,)

    def encode_key(self) -> tuple:
        """What, beyond the tokenizer, template, data and compat, decides the encoded sequences: the
        benchmark (its truncation rule) and the span; () for RM-Bench without a span, so its keys stay."""
        return (() if self.benchmark == "rm-bench" else (f"benchmark:{self.benchmark}",)) + \
            (() if self.span is None else (f"score-span:after:{self.span}",))

    # whether load may build a plain Llama without transformers (models.native_llama): prepare decides,
    # from where the run computes and the masks its batches need
    native = False

    def pass_key(self) -> tuple:
        """Whatever else, beyond model, inputs, dtype and batching, decides a pass's arrays."""
        return (self.family,)

    def load(self, path: str, dtype, device, trust_remote_code: bool, allow_pickle_weights: bool = False):
        """The model at `path`, ready to score (evaluation mode, on `device`)."""
        raise NotImplementedError

    def adopt(self, model):
        """A model loaded elsewhere (the Python API's in-memory models), set up for a pass as `load`
        sets up the models it loads; returns a function that undoes it, since the caller keeps the
        model."""
        return lambda: None

    def vocab_limit(self, model) -> int:
        """Token ids must stay below this for `model` (its input embedding size)."""
        return model.get_input_embeddings().num_embeddings

    def batch_fn(self, model, device):
        """What one batch computes on `model`: a function (seqs, batch, prefix=None) -> {name: values
        for batch.indices} for every name in `outputs`; seqs are the pass's tokenize.Encoded, prefix a
        prefix.PrefixKV when the batches are of suffixes after shared prompt prefixes."""
        raise NotImplementedError

    def rewards(self, passes: dict[str, dict[str, np.ndarray]]) -> np.ndarray:
        """Per-sequence scores from each role's pass arrays."""
        raise NotImplementedError

    def readout_limit(self, e: Encoded) -> int:
        """The longest prefix of `e` a shared prompt cache may cover: no read-out position in it."""
        raise NotImplementedError

    def masks_attention(self, seqs, indices, causal: bool) -> bool:
        """Whether a batch of these sequences (whole, right-padded) reaches the model with an attention
        mask it expands to rows x width x width: a causal decoder gets none (inputs.batching.batch_inputs)."""
        return not causal

    def notes(self, seqs) -> dict:
        """What run.json records about this run's sequences as this scorer sees them."""
        return {}

    def describe(self) -> dict:
        """What run.json records about how this run scored."""
        return {"scorer": self.family}

"""Sequence-classifier reward models: the head's logits at the pooled position, as the official
flow (rewardbench's RewardBenchPipeline in run_rm.py) computes them.

Pad ids follow run_rm.py: a tokenizer without a pad token pads with EOS and the model's config pad
id becomes EOS too; a config without a pad id takes the tokenizer's. The model pools at its own rule
(transformers: the rightmost token that is not the config's pad id). Rows are padded with the
config's pad id, so padding never moves the pooled position and a score does not depend on its
batch. When the tokenizer adds a BOS to a text that already starts with one (templates beginning
with `{{ bos_token }}`), the official pipeline gives the first BOS attention 0: so do we.
"""

from __future__ import annotations

import numpy as np
import torch

from ..errors import UsageError
from ..inputs.batching import batch_inputs, forward
from ..inputs.layout import full_texts
from ..inputs.spans import cut_samples
from ..inputs.tokenize import encode_rm, rm_appends_eos, rm_truncation
from ..models.kinds import is_causal_decoder
from ..models.loading import load_model
from .base import Scorer
from .readout import readout_fn


def pick_label(num_labels: int, label_index: int | None, compat: bool) -> int | None:
    """The logit column to score: the only one, `label_index`, or None for the official flow's
    whole logits vector (compat mode; accuracy then compares the vectors as Python lists do)."""
    if label_index is not None:
        if not 0 <= label_index < num_labels:
            raise UsageError(f"--label-index {label_index}: the model's head has {num_labels} labels")
        return label_index
    if num_labels == 1:
        return 0
    if compat:
        return None
    raise UsageError(f"the reward model's head has {num_labels} labels: choose one with --label-index K "
                     "(or --compat official for the official flow's whole logits vector, compared as a list)")


def official_bos(tokenizer) -> int | None:
    """The BOS id RewardBenchPipeline's doubled-BOS check looks for (None: the tokenizer has no BOS)."""
    return tokenizer.bos_token_id if tokenizer.bos_token is not None else None


def official_pad_ids(tokenizer, config) -> tuple[int | None, int | None]:
    """(tokenizer pad id, config pad id) after run_rm.py's setup."""
    tok_pad, cfg_pad = tokenizer.pad_token_id, getattr(config, "pad_token_id", None)
    if tok_pad is None:
        tok_pad = cfg_pad = tokenizer.eos_token_id
    if cfg_pad is None:
        cfg_pad = tok_pad
    return tok_pad, cfg_pad


class RewardModelScorer(Scorer):
    family = "rm"

    def __init__(self, pad_id: int, label: int | None, num_labels: int = 1, bos_id: int | None = None,
                 tokenizer_pad_id: int | None = None, readout: bool = True):
        super().__init__(pad_id)  # the config's pad id: what rows are padded with and pooling skips
        self.label = label  # None: the whole logits vector
        self.num_labels = num_labels
        self.bos_id = bos_id  # None: the tokenizer has no BOS token (no doubled-BOS masking)
        self.tokenizer_pad_id = pad_id if tokenizer_pad_id is None else tokenizer_pad_id
        self.outputs = {"scores": () if label is not None else (num_labels,)}
        # the last layer at the read-out positions only (scorers.readout); off (the whole forward, keyed
        # apart) with --compat official, as the official flow computes, and with --device-map
        self.readout = readout

    def encode(self, samples, tokenizer, fmt, compat, tokenizer_path=None):
        texts = full_texts(self.spanned(samples), fmt)
        append_eos = rm_appends_eos(tokenizer, fmt.tokenizer_has_template, tokenizer_path)
        return encode_rm(tokenizer, texts, append_eos, *self.truncation(tokenizer, compat))

    def spanned(self, samples):
        """The samples as the model reads them: with --score-span, each response cut after its last TEXT."""
        return cut_samples(samples, self.span)

    def truncation(self, tokenizer, compat: bool) -> tuple[int | None, str]:
        """(max_length, side) of encode_rm: the official script's of this run's benchmark (compat only)."""
        return rm_truncation(tokenizer, self.benchmark, compat)

    def pass_key(self):
        return ("rm", self.label, self.num_labels, self.pad_id, self.bos_id, self.int8,
                *(() if self.readout else ("whole-forward",)), *self.encode_key())

    def load(self, path, dtype, device, trust_remote_code, allow_pickle_weights=False):
        model = load_model(path, "rm", dtype, device, trust_remote_code, allow_pickle_weights, self.int8,
                           native=self.native)
        model.config.pad_token_id = self.pad_id  # run_rm.py's setup (see official_pad_ids)
        return model

    def adopt(self, model):
        before = model.config.pad_token_id
        model.config.pad_token_id = self.pad_id  # as load sets it: the pooled position skips this id
        return lambda: setattr(model.config, "pad_token_id", before)

    def double_bos(self, ids) -> bool:
        return self.bos_id is not None and len(ids) > 1 and ids[0] == ids[1] == self.bos_id

    def masks_attention(self, seqs, indices, causal):
        return not causal or any(self.double_bos(seqs[i].ids) for i in indices)  # a doubled BOS is masked

    def batch_fn(self, model, device):
        causal = is_causal_decoder(model.config)
        readout = readout_fn(model, self.pad_id) if self.readout and causal and not self.int8 else None

        @torch.inference_mode()
        def run(seqs, batch, prefix=None):
            first = np.array([self.double_bos(seqs[i].ids) for i in batch.indices])
            inputs, _ = batch_inputs(seqs, batch, self.pad_id, device, causal, prefix, mask_first=first)
            if readout is not None and prefix is None:
                logits = readout(inputs["input_ids"], inputs["attention_mask"]).float()
            else:
                logits = forward(model, inputs).logits.float()
            picked = logits if self.label is None else logits[:, self.label]
            return {"scores": picked.double().cpu().numpy()}

        return run

    def rewards(self, passes):
        return passes["model"]["scores"]

    def readout_limit(self, e):
        if self.double_bos(e.ids):  # its first token is masked: no prefix of it is shared
            return 0
        return next((t for t in range(len(e.ids) - 1, -1, -1) if e.ids[t] != self.pad_id), 0)

    def notes(self, seqs):
        out = {"pad_ids": {"tokenizer": self.tokenizer_pad_id, "config": self.pad_id},
               "double_bos_sequences": int(sum(self.double_bos(e.ids) for e in seqs))}
        if self.label is None:
            out["scores"] = f"whole logits vector of {self.num_labels} labels, compared as lists (official)"
        return out

    def describe(self):
        return {"scorer": self.family, "mode": "rm", "ref_free": None, "logprob_impl": None}

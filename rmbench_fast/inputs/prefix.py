"""Shared-prompt prefixes: each prompt's six sequences (3 styles x chosen/rejected) start with the
same templated prompt. A causal decoder's states at those positions depend only on those tokens,
so they are computed once per prompt and the six responses run on top of that KV cache.

The plan (prepare.prepare) gives every sequence its shared prefix length and cuts the prompts into
waves whose prefix caches fit a memory budget; batches are made per wave from the suffix lengths.
PrefixKV (per model pass) computes a wave's prefix caches when its first batch arrives, keeping
each layer's keys and values of the whole wave in one flat [tokens + 1, kv heads, head dim] tensor
(the last row zeros), and builds each suffix batch's inputs: the prefixes right-aligned in a cache
(left holes masked, read from the zero row), gathered with one index per layer, the suffixes
right-padded after them, position ids continuing from each row's own prefix.

On the CPU, for Llama, Mistral and Qwen2, a suffix batch skips that cache and its mask: each layer
attends causally to the suffix and, unmasked, to each row's prefix where `flat` keeps it, and merges
the two (inputs.prefix_attention), both on SDPA's fast paths.

A prefix never covers a position that is read out (each scorer's `readout_limit`: RM pools at the
last non-pad token, DPO reads the hidden states from the one before the first response token). Sharing is checked once per pass
against a plain forward of one sequence; a model for which the two disagree runs unshared.
"""

from __future__ import annotations

import inspect
import logging
from dataclasses import dataclass

import numpy as np
import torch

from ..models.device import OUT_OF_MEMORY
from ..models.kinds import base_model, text_config
from ..store.fingerprints import sha256_text
from .batching import Batch, forward, halves, make_batches, mask_first_tokens, pad_rows
from .layout import PER_PROMPT
from .prefix_attention import KEY, NATIVE, SplitPrefix, applies

log = logging.getLogger("rmbench_fast")

MIN_PREFIX = 8  # shorter common prefixes are not worth a cache


@dataclass
class PrefixPlan:
    prefix: np.ndarray  # per sequence: tokens taken from its prompt's shared cache (0: none)
    group: np.ndarray  # per sequence: its prompt
    wave: np.ndarray  # per sequence: the wave of its prompt

    def shared_tokens(self) -> int:
        """Prefix tokens computed once: one per prompt."""
        first = np.unique(self.group, return_index=True)[1]
        return int(self.prefix[first].sum())

    def prompts(self) -> int:
        """Prompts whose prefix is shared."""
        return int(len(np.unique(self.group[self.prefix > 0])))

    def saved_tokens(self) -> int:
        return int(self.prefix.sum()) - self.shared_tokens()

    def wave_tokens(self) -> int:
        """The most prefix tokens one wave keeps (PrefixKV's flat store, its zero row included)."""
        first = np.unique(self.group, return_index=True)[1]
        if not len(first):
            return 0
        return int(np.bincount(self.wave[first], weights=self.prefix[first]).max()) + 1

    def key(self) -> tuple:
        """What a model pass's store key needs of the plan."""
        return ("prefix-v1", sha256_text(self.prefix.tobytes().hex(), self.wave.tobytes().hex()))


def plan_prefixes(seqs: list[list[int]], limits: np.ndarray, kv_bytes_per_token: int, budget_bytes: int,
                  group_size=PER_PROMPT, min_prefix: int = MIN_PREFIX) -> PrefixPlan:
    """Common prefix of each group of consecutive sequences, capped by `limits`; prompts are packed
    into waves in order while their prefix caches fit `budget_bytes`. group_size: every group's size
    (RM-Bench: 6), or one size per group in order (another benchmark's rows: each row's responses)."""
    n = len(seqs)
    sizes = np.asarray([group_size] * -(-n // group_size) if np.isscalar(group_size) else group_size,
                       dtype=np.int64)
    if np.isscalar(group_size) and n:
        sizes[-1] = n - group_size * (len(sizes) - 1)
    if int(sizes.sum()) != n or (sizes < 1).any():
        raise ValueError(f"group sizes cover {int(sizes.sum())} sequences, not {n}")
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    prefix = np.zeros(n, dtype=np.int64)
    group = np.repeat(np.arange(len(sizes)), sizes)
    wave = np.zeros(n, dtype=np.int64)
    per_wave = max(1, budget_bytes // max(1, kv_bytes_per_token))  # prefix tokens per wave
    w, used = 0, 0
    for g0, g1 in zip(bounds[:-1], bounds[1:]):
        members = seqs[g0:g1]
        cap = int(min(limits[g0:g1]))
        first = members[0]
        k = 0
        while k < cap and all(len(s) > k and s[k] == first[k] for s in members):
            k += 1
        k = k if k >= min_prefix and len(members) > 1 else 0
        if used and used + k > per_wave:
            w, used = w + 1, 0
        used += k
        prefix[g0:g1] = k
        wave[g0:g1] = w
    return PrefixPlan(prefix, group, wave)


def plan_batches(lengths: np.ndarray, plan: PrefixPlan, max_tokens: int, max_batch_size: int | None) -> list[Batch]:
    """Length-bucketed batches of the suffixes, wave after wave."""
    suffix = lengths - plan.prefix
    batches = []
    for w in np.unique(plan.wave):
        idx = np.flatnonzero(plan.wave == w)
        batches += [Batch(idx[b.indices], b.max_len) for b in make_batches(suffix[idx], max_tokens, max_batch_size)]
    return batches


def kv_bytes_per_token(config, dtype: torch.dtype) -> int:
    cfg = text_config(config)
    layers = getattr(cfg, "num_hidden_layers", None) or getattr(cfg, "n_layer", 1)
    heads = getattr(cfg, "num_attention_heads", None) or getattr(cfg, "n_head", 1)
    kv_heads = getattr(cfg, "num_key_value_heads", None) or heads
    hidden = getattr(cfg, "hidden_size", None) or getattr(cfg, "n_embd", 1)
    head_dim = getattr(cfg, "head_dim", None) or hidden // heads
    return 2 * layers * kv_heads * head_dim * torch.tensor([], dtype=dtype).element_size()


def default_budget_bytes(gpu_memory: int | None, megabytes: int | None) -> int:
    """--prefix-cache-mb, else a tenth of the GPU's memory (bytes; None on the CPU), else 1 GiB."""
    if megabytes is not None:
        return megabytes << 20
    if gpu_memory is not None:
        return gpu_memory // 10
    return 1 << 30


def _cache_kw(module) -> str:
    """transformers 5 calls the KV cache argument `cache`; earlier versions `past_key_values`."""
    params = inspect.signature(module.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def _layers(cache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    if hasattr(cache, "layers"):
        return [(layer.keys, layer.values) for layer in cache.layers]
    if hasattr(cache, "key_cache"):
        return list(zip(cache.key_cache, cache.value_cache))
    return [(k, v) for k, v in cache]


def _new_cache(kvs):
    from transformers import DynamicCache

    cache = DynamicCache()
    for layer, (k, v) in enumerate(kvs):
        cache.update(k, v, layer)
    return cache


class PrefixKV:
    """The prefix caches of one model pass, one wave at a time."""

    def __init__(self, model, seqs: list[list[int]], plan: PrefixPlan, pending: np.ndarray, pad_id: int, device,
                 max_tokens_per_batch: int):
        self.model, self.seqs, self.plan, self.pad_id, self.device = model, seqs, plan, pad_id, device
        self.max_tokens = max_tokens_per_batch
        self.pending = np.asarray(pending, dtype=np.int64)  # sequences this pass will score
        self.base = base_model(model) or model
        self.kw_base, self.kw_model = _cache_kw(self.base), _cache_kw(model)
        self.flat: list[tuple[torch.Tensor, torch.Tensor]] = []  # per layer: the wave's keys, values
        self.start: dict[int, tuple[int, int]] = {}  # prompt (group) -> (first row in `flat`, prefix length)
        self.wave = None
        self.enabled = True
        self.checked = False
        self.note = "on"
        self.oom_halvings = 0  # prefix batches halved after an out-of-memory error
        # suffix batches attend to their prefixes with the split attention (inputs.prefix_attention)
        # rather than through a masked cache: both the decoder and the whole model must take it, so
        # that the self-check (on the decoder) checks the path that scores (an RM's whole model)
        self.split = applies(model, self.base, device) and applies(model, model, device)
        if not self.split and type(model).__module__ == NATIVE:  # it takes no cache: nothing shared
            self.enabled, self.note = False, "off: the split attention does not apply and this model takes no cache"
        self.used: set[str] = set()  # the ways suffix batches attended to their prefixes

    @torch.inference_mode()
    def _load_wave(self, w: int):
        """Compute wave w's prefix caches. The wave counts as loaded only once every prefix batch
        has run: an error (out of memory) part-way leaves no wave loaded, so the retry computes it
        again rather than reading the rows it never filled (zeros). A prefix batch that runs out of
        memory is halved, as the runner halves suffix batches."""
        self.flat, self.start, self.wave = [], {}, None
        rows = self.pending[(self.plan.wave[self.pending] == w) & (self.plan.prefix[self.pending] > 0)]
        if not len(rows):
            self.wave = w
            return
        groups, first = np.unique(self.plan.group[rows], return_index=True)
        lead = rows[first]  # one sequence per prompt
        lens = self.plan.prefix[lead]
        starts = np.concatenate([[0], np.cumsum(lens)])
        prefixes = [self.seqs[i][:p] for i, p in zip(lead, lens)]
        try:
            for b in make_batches(lens, self.max_tokens):
                self._prefix_batch(b, prefixes, lens, starts)
            self.start = {int(g): (int(o), int(p)) for g, o, p in zip(groups, starts, lens)}
            self.wave = w
            if not self.checked:
                self._check(rows)
                self.checked = True
        except BaseException:
            self.flat, self.start, self.wave = [], {}, None
            raise

    def _prefix_batch(self, b: Batch, prefixes, lens, starts):
        ids, _ = pad_rows([prefixes[j] for j in b.indices], b.max_len, self.pad_id, self.device)
        try:
            out = self.base(input_ids=ids, use_cache=True)
        except OUT_OF_MEMORY:
            if len(b.indices) == 1:
                raise
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
            self.oom_halvings += 1
            for half in halves(b, lens):
                self._prefix_batch(half, prefixes, lens, starts)
            return
        layers = _layers(out.get("cache") if out.get("cache") is not None else out.get("past_key_values"))
        p = torch.as_tensor(lens[b.indices], device=self.device)
        real = torch.arange(b.max_len, device=self.device)[None, :] < p[:, None]  # [rows, max_len]
        to = torch.as_tensor(np.concatenate([np.arange(starts[j], starts[j] + lens[j]) for j in b.indices]),
                             device=self.device)
        for layer, (k, v) in enumerate(layers):
            if not self.flat:  # first batch: allocate every layer's flat store (+ one zero row)
                self.flat = [(k.new_zeros((int(starts[-1]) + 1, k.shape[1], k.shape[3])),
                              v.new_zeros((int(starts[-1]) + 1, v.shape[1], v.shape[3]))) for k, v in layers]
            self.flat[layer][0][to] = k.transpose(1, 2)[real]  # [tokens, kv heads, head dim], rows in order
            self.flat[layer][1][to] = v.transpose(1, 2)[real]

    def _check(self, rows):
        """One sequence, shared and unshared: the hidden states must agree, else sharing is off."""
        i = int(rows[np.argmin([len(self.seqs[r]) for r in rows])])
        b = Batch(np.array([i]), len(self.seqs[i]) - int(self.plan.prefix[i]))
        shared = forward(self.base, self.inputs(b, base=True))[0][0].float()
        full = self.base(input_ids=torch.as_tensor([self.seqs[i]], device=self.device), use_cache=False)[0][0]
        full = full[int(self.plan.prefix[i]):].float()
        tol = 1e-3 if self.model.dtype == torch.float32 else 5e-2
        err = float((shared - full).abs().max() / full.abs().max().clamp_min(1e-6))
        if not err <= tol:
            self.enabled, self.flat, self.start, self.used = False, [], {}, set()
            self.note = f"off: shared and plain states differ ({err:.2e} relative) for {type(self.model).__name__}"
            log.warning("prefix sharing %s; scoring without it", self.note)

    def attention_kind(self) -> str:
        """How suffix batches attended to their prefixes (run.json): "split" (causal on the suffix,
        unmasked on the prefix, merged: inputs.prefix_attention), "masked cache", or both."""
        return " and ".join(sorted(self.used)) or "none"

    def offsets(self, batch: Batch) -> np.ndarray:
        """Per row: where row position 0 sits in its sequence."""
        return self.plan.prefix[batch.indices] if self.enabled else np.zeros(len(batch.indices), dtype=np.int64)

    def inputs(self, batch: Batch, base: bool = False, mask_first=None) -> dict:
        """Model keyword arguments for a batch (ids of the suffixes after the cached prefixes).
        mask_first: rows whose first token gets attention mask 0 (they have no prefix)."""
        rows = batch.indices
        w = int(self.plan.wave[rows[0]])
        if self.enabled and self.wave != w:
            self._load_wave(w)
        off = self.offsets(batch)
        suffixes = [self.seqs[i][o:] for i, o in zip(rows, off)]
        ids, suffix_mask = pad_rows(suffixes, max(map(len, suffixes)), self.pad_id, self.device)
        masked = mask_first_tokens(suffix_mask, mask_first)
        pm = int(off.max())
        if pm == 0:  # nothing shared: the fast causal path, no mask unless a first token is masked
            return {"input_ids": ids, "attention_mask": suffix_mask if masked else None, "use_cache": False}
        # prefixes right-aligned in pm cache slots, the holes on their left masked
        off_t = torch.as_tensor(off, device=self.device)
        prefix_mask = (torch.arange(pm, device=self.device)[None, :] >= pm - off_t[:, None]).long()
        pos = off_t[:, None] + torch.arange(ids.shape[1], device=self.device)[None, :]
        # the flat row of each (row, cache slot): its prefix's tokens right-aligned, the holes the zero row
        first = np.zeros(len(rows), dtype=np.int64)
        for r in np.flatnonzero(off):  # a row's prefix must be its own prompt's, and no longer than it
            first[r], stored = self.start[int(self.plan.group[rows[r]])]
            assert off[r] <= stored, f"row {r}: prefix {off[r]} > the {stored} tokens stored for its prompt"
        if self.split and not masked:  # no cache, no mask: each row reads its prefix where it is kept
            self.used.add("split")
            rows = [(int(f), int(o)) for f, o in zip(first, off)]
            return {"input_ids": ids, "attention_mask": None, "position_ids": pos, "use_cache": False,
                    KEY: SplitPrefix(self.flat, rows)}
        self.used.add("masked cache")
        rel = np.arange(pm)[None, :] - (pm - off)[:, None]
        zero_row = self.flat[0][0].shape[0] - 1
        idx = torch.as_tensor(np.where(rel >= 0, first[:, None] + rel, zero_row), device=self.device)
        layers = [(k[idx].transpose(1, 2), v[idx].transpose(1, 2)) for k, v in self.flat]  # [rows, kv heads, pm, dim]
        return {"input_ids": ids, "attention_mask": torch.cat([prefix_mask, suffix_mask], dim=1),
                "position_ids": pos, self.kw_base if base else self.kw_model: _new_cache(layers), "use_cache": True}

"""Attention of suffixes on shared prompt prefixes, on the CPU, without a mask.

PrefixKV's general path gathers each row's prefix keys and values into a cache before its suffix
(right-aligned, the holes on their left masked) and hands SDPA a [rows, 1, suffix, slots + suffix]
mask. With a mask, the CPU's flash kernel computes every block, the upper half of the suffix's own
causal attention included. Here each layer's attention is cut in two, both on the kernel's fast
paths:
- the suffix on itself, causal (is_causal: the blocks above the diagonal are skipped);
- each row's suffix on its own prompt's prefix keys and values, read where PrefixKV keeps them (no
  copy into a cache), unmasked: every prefix position precedes every suffix position.
The two are merged with their log-sum-exps, as the kernel merges its own blocks of keys: the same
attention up to the order of fp32 sums.

It runs as a transformers attention implementation, registered under NAME, that a model uses only
during the forwards given a SplitPrefix under KEY (`switched`, from inputs.batching.forward).
`applies` says for which models: Llama, Mistral and Qwen2 on the CPU with SDPA and no sliding window.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import torch

from ..models.kinds import SPLIT_PREFIX, forward_keywords, sliding_window

NAME = "rmbench_split_prefix"  # the attention implementation's name in transformers' registry
KEY = SPLIT_PREFIX  # the model argument that carries a batch's SplitPrefix
MODEL_TYPES = ("llama", "mistral", "qwen2")  # attention modules that hand post-rotary states to the registry
NATIVE = "rmbench_fast.models.native_llama"  # its attention takes KEY itself (SplitPrefix.attend): nothing to switch


@dataclass
class SplitPrefix:
    """What one suffix batch attends to besides itself."""

    layers: list[tuple[torch.Tensor, torch.Tensor]]  # per layer: the prefixes' keys, values [tokens, kv heads, dim]
    rows: list[tuple[int, int]]  # per batch row: its prefix's first row in `layers`, its length (0: none)

    def attend(self, query, key, value, layer: int, scale=None) -> torch.Tensor:
        """split_attention of a layer's states on this split (for attention modules that take it themselves)."""
        return split_attention(query, key, value, self, layer, scale)


def _flash(q, k, v, causal: bool, scale):
    """SDPA's CPU flash kernel, which F.scaled_dot_product_attention calls: (out [B, H, L, D], lse [B, H, L])."""
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal, scale=scale)


def _heads(x: torch.Tensor, n: int) -> torch.Tensor:
    """[B, kv heads, L, D] -> [B, kv heads * n, L, D]: query head h reads kv head h // n (transformers' repeat_kv)."""
    return x if n == 1 else x.repeat_interleave(n, dim=1)


def split_attention(query, key, value, split: SplitPrefix, layer: int, scale=None) -> torch.Tensor:
    """Attention of `query` ([B, H, L, D], a batch of suffixes) on its own key/value causally and on
    each row's prefix in `split` (layer `layer`), merged: [B, H, L, D]."""
    n = query.shape[1] // key.shape[1]
    out, lse = _flash(query, _heads(key, n), _heads(value, n), True, scale)
    prefix_k, prefix_v = split.layers[layer]
    for r, (start, length) in enumerate(split.rows):
        if not length:
            continue
        k = prefix_k[start:start + length].transpose(0, 1)[None]  # [1, kv heads, length, D]
        v = prefix_v[start:start + length].transpose(0, 1)[None]
        o2, l2 = _flash(query[r:r + 1], _heads(k, n), _heads(v, n), False, scale)
        l1 = lse[r]
        top = torch.maximum(l1, l2[0])
        w1, w2 = (l1 - top).exp_(), (l2[0] - top).exp_()
        total = w1 + w2
        out[r] = (out[r].float() * (w1 / total)[..., None] + o2[0].float() * (w2 / total)[..., None]).to(out.dtype)
    return out


def attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """The registered implementation (transformers' attention interface): the split attention for
    a forward given a SplitPrefix, else transformers' own SDPA attention."""
    split = kwargs.pop(KEY, None)
    if split is None:
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

        return ALL_ATTENTION_FUNCTIONS["sdpa"](module, query, key, value, attention_mask, scaling=scaling,
                                              dropout=dropout, **kwargs)
    out = split_attention(query, key, value, split, module.layer_idx, scaling)
    return out.transpose(1, 2).contiguous(), None


def expected(config) -> bool:
    """Whether a model of this config should take the split attention on the CPU (`applies` decides
    on the loaded model): one of MODEL_TYPES, not remote code, no sliding window."""
    auto = getattr(config, "auto_map", None)
    return getattr(config, "model_type", None) in MODEL_TYPES and sliding_window(config) is None and not auto


def applies(model, module, device) -> bool:
    """Whether `module` (the model or its decoder) may run a suffix batch with the split attention:
    transformers' own Llama, Mistral or Qwen2 on the CPU, with SDPA, no sliding window, every
    attention layer numbered, and a forward that passes extra arguments down to the attention."""
    cfg = getattr(model, "config", None)
    if torch.device(device).type != "cpu" or cfg is None or model.training:
        return False
    if not expected(cfg) or not type(model).__module__.startswith(("transformers.", NATIVE)):
        return False
    if getattr(cfg, "_attn_implementation", None) != "sdpa":
        return False
    attns = [m for m in model.modules() if type(m).__name__.endswith("Attention")]
    if not attns or any(not isinstance(getattr(a, "layer_idx", None), int) for a in attns):
        return False
    return forward_keywords(type(module)) is None  # None: its forward takes **kwargs


@contextmanager
def switched(module):
    """`module`'s model uses NAME for the block (registered on first use), then its own again."""
    if type(module).__module__ == NATIVE:
        yield
        return
    from transformers.modeling_utils import AttentionInterface

    if NAME not in AttentionInterface._global_mapping:
        AttentionInterface.register(NAME, attention)
    cfg = module.config
    before = cfg._attn_implementation
    cfg._attn_implementation = NAME
    try:
        yield
    finally:
        cfg._attn_implementation = before

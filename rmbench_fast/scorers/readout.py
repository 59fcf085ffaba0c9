"""A reward model's last layer at its read-out positions only.

A sequence classifier reads one position per row (transformers' rule: the rightmost token that is
not the pad id). In a causal decoder, the last layer's output at that position needs the layer's
keys and values at every position, but its query, attention, output projection and MLP only at
the read-out position: the rest of the last layer's work is never read. `readout_fn` runs the
model's own forward up to its last layer (every earlier layer, the attention mask and the rotary
tables as the model builds them, bit for bit), stops it there, then computes the last layer's keys
and values for all positions and the rest of it, the final norm and the head for one position per
row. That saves about 80% of one layer's matmuls and its attention: a fifth of a 4-layer model's
forward, 2.5% of a 32-layer one's.

The scores equal the whole forward's up to fp32 rounding (the last layer's matmuls run on fewer
rows and the attention on one query per row; within 2e-5 in tests/test_readout.py). It applies to
the architectures whose last layer it restates (Llama, Mistral, Qwen2: pre-norm, rotary, SDPA
attention, no sliding window); anything else runs the model's own forward. The stop swaps the
model's last layer for a stand-in during the call: one model must not run two forwards at once
(the engine runs its batches one after another).
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

from ..models.kinds import sliding_window

# the classes whose decoder layer this module restates (checked against each one's forward in tests)
ARCHITECTURES = ("LlamaForSequenceClassification", "MistralForSequenceClassification",
                 "Qwen2ForSequenceClassification")
_LAYER_PARTS = ("self_attn", "mlp", "input_layernorm", "post_attention_layernorm")
OWN_MODULES = ("transformers.models.", "rmbench_fast.models.native_llama")  # the classes whose layers it restates
_ATTENTION_PARTS = ("q_proj", "k_proj", "v_proj", "o_proj")


def readout_fn(model, pad_id: int | None):
    """A function (input_ids [B, T], attention_mask [B, T] or None) -> logits [B, num_labels] at
    each row's read-out position, or None when `model` is not one this module can run (then the
    model's own forward is used)."""
    if type(model).__name__ not in ARCHITECTURES or not type(model).__module__.startswith(OWN_MODULES) \
            or model.training or pad_id is None:  # remote code of the same name may pool or rotate otherwise
        return None
    base, head = getattr(model, "model", None), getattr(model, "score", None)
    if type(head) is not torch.nn.Linear or base is None:
        return None
    if not all(hasattr(base, a) for a in ("embed_tokens", "layers", "norm", "rotary_emb")) or len(base.layers) < 1:
        return None
    cfg = model.config
    if getattr(cfg, "pad_token_id", None) != pad_id:  # the model pools at its config's pad id
        return None
    if (getattr(cfg, "_attn_implementation", None) != "sdpa" or sliding_window(cfg) is not None
            or getattr(model, "hf_device_map", None) or len(base.layers) != cfg.num_hidden_layers):
        return None
    last = base.layers[-1]
    att = getattr(last, "self_attn", None)
    if not all(hasattr(last, p) for p in _LAYER_PARTS) or \
            not all(type(getattr(att, p, None)) is torch.nn.Linear for p in _ATTENTION_PARTS):
        return None
    if any(hasattr(att, p) for p in ("q_norm", "k_norm")) or getattr(att, "sliding_window", None) is not None or \
            any(hasattr(last, p) for p in ("pre_feedforward_layernorm", "post_feedforward_layernorm")):
        return None
    if any(hasattr(w, "to_local") for w in model.parameters()) or \
            any(hasattr(m, "_hf_hook") for m in model.modules()):  # sharded (--tp) or offloaded: the own forward
        return None
    rotate_half = getattr(sys.modules.get(type(att).__module__), "rotate_half", None)
    if rotate_half is None:
        return None

    @torch.inference_mode()
    def run(input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        got = _last_layer_inputs(base, input_ids, attention_mask)
        if got[2] is None:  # the layers get no rotary tables: not the forward this module restates
            return model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits
        return _readout(model, base, last, att, rotate_half, input_ids, pad_id, *got)

    return run


def readout_positions(input_ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Per row, the rightmost position whose token is not `pad_id` (0 for a row of pads), as the
    sequence classifiers of transformers pool."""
    t = torch.arange(input_ids.shape[1], device=input_ids.device, dtype=torch.int32)
    return (t * (input_ids != pad_id).to(torch.int32)).argmax(-1)


class _Reached(Exception):
    """Raised by _Stop at the last layer: what the model's forward hands it, and nothing after it runs."""

    def __init__(self, hidden, mask, rotary):
        super().__init__("the last layer's inputs")
        self.got = hidden, mask, rotary


class _Stop(torch.nn.Module):
    """Stands in for the last layer during one forward: raises with the layer's inputs."""

    def forward(self, hidden_states, *args, attention_mask=None, position_embeddings=None, **kwargs):
        raise _Reached(hidden_states, attention_mask, position_embeddings)


def _last_layer_inputs(base, input_ids, attention_mask):
    """(hidden states, the attention mask as the model built it for its layers (None: causal SDPA),
    (cos, sin)) at the last layer's input: the model's own forward runs every earlier layer, builds
    the mask and the rotary tables, and stops there."""
    layers = base.layers
    last = layers[-1]
    layers[-1] = _Stop()
    try:
        # no output capture asked: transformers 5 would hook its capture onto the stand-in for good
        base(input_ids=input_ids, attention_mask=attention_mask, use_cache=False, output_hidden_states=False,
             output_attentions=False)
    except _Reached as stop:
        return stop.got
    finally:
        layers[-1] = last
    raise RuntimeError("the model's forward never reached its last layer")


def _readout(model, base, last, att, rotate_half, ids, pad_id, h, mask, rotary):
    b, t = ids.shape
    cos, sin = rotary
    pos = readout_positions(ids, pad_id).to(torch.long)
    rows = torch.arange(b, device=ids.device)
    d = att.head_dim
    x = last.input_layernorm(h)
    k = att.k_proj(x).view(b, t, -1, d).transpose(1, 2)
    v = att.v_proj(x).view(b, t, -1, d).transpose(1, 2)
    k = (k * cos[:, None]) + (rotate_half(k) * sin[:, None])
    q = att.q_proj(x[rows, pos][:, None]).view(b, 1, -1, d).transpose(1, 2)  # [b, heads, 1, d]
    cq, sq = (c[rows if c.shape[0] == b else 0, pos][:, None, None] for c in (cos, sin))
    q = (q * cq) + (rotate_half(q) * sq)
    if k.shape[1] != q.shape[1]:  # grouped-query attention: each key/value head serves a group
        k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
        v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
    if mask is None:  # causal: keys up to the read-out position
        mask = (torch.arange(t, device=ids.device)[None] <= pos[:, None])[:, None, None]
    else:  # the model's own mask, its row at the read-out position ([b, 1, t, t], bool or additive)
        mask = mask.expand(b, -1, -1, -1)[rows, :, pos, :t][:, :, None]
    a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=att.scaling)
    hp = h[rows, pos] + att.o_proj(a.transpose(1, 2).reshape(b, -1))
    hp = hp + last.mlp(last.post_attention_layernorm(hp))
    return model.score(base.norm(hp))

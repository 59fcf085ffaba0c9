"""A reward model's last layer at its read-out positions only.

A sequence classifier reads one position per row (transformers' rule: the rightmost token that is
not the pad id). In a causal decoder, the last layer's output at that position needs the layer's
keys and values at every position, but its query, attention, output projection and MLP only at
the read-out position: the rest of the last layer's work is never read. `readout_fn` runs every
layer but the last as the model's own modules (the same calls as its forward, so their outputs are
bit for bit the model's), then the last layer's keys and values for all positions and the rest of
it, the final norm and the head for one position per row. That saves about 80% of one layer's
matmuls and its attention: a fifth of a 4-layer model's forward, 2.5% of a 32-layer one's.

The scores equal the whole forward's up to fp32 rounding (the last layer's matmuls run on fewer
rows and the attention on one query per row; measured within 2e-5, tests/test_readout.py).
It applies to the architectures whose layer it restates (Llama, Mistral, Qwen2: pre-norm,
rotary, SDPA attention, no sliding window) and to batches without an attention mask; anything
else runs the model's own forward.
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

# the classes whose decoder layer this module restates (checked against each one's forward in tests)
ARCHITECTURES = ("LlamaForSequenceClassification", "MistralForSequenceClassification",
                 "Qwen2ForSequenceClassification")
_LAYER_PARTS = ("self_attn", "mlp", "input_layernorm", "post_attention_layernorm")
_ATTENTION_PARTS = ("q_proj", "k_proj", "v_proj", "o_proj")


def readout_fn(model, pad_id: int | None):
    """A function input_ids [B, T] -> logits [B, num_labels] at each row's read-out position, or
    None when `model` is not one this module can run (then the model's own forward is used)."""
    if type(model).__name__ not in ARCHITECTURES or model.training or pad_id is None:
        return None
    base, head = getattr(model, "model", None), getattr(model, "score", None)
    if type(head) is not torch.nn.Linear or base is None:
        return None
    if not all(hasattr(base, a) for a in ("embed_tokens", "layers", "norm", "rotary_emb")) or len(base.layers) < 1:
        return None
    cfg = model.config
    window = getattr(cfg, "sliding_window", None) if getattr(cfg, "use_sliding_window", True) else None  # Qwen2's switch
    if (getattr(cfg, "_attn_implementation", None) != "sdpa" or window is not None
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
    def run(input_ids: torch.Tensor) -> torch.Tensor:
        return _readout(model, base, last, att, rotate_half, input_ids, pad_id)

    return run


def readout_positions(input_ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Per row, the rightmost position whose token is not `pad_id` (0 for a row of pads), as the
    sequence classifiers of transformers pool."""
    t = torch.arange(input_ids.shape[1], device=input_ids.device, dtype=torch.int32)
    return (t * (input_ids != pad_id).to(torch.int32)).argmax(-1)


def _readout(model, base, last, att, rotate_half, ids, pad_id):
    b, t = ids.shape
    h = base.embed_tokens(ids)
    position_ids = torch.arange(t, device=ids.device)[None]
    cos, sin = base.rotary_emb(h, position_ids)
    for layer in base.layers[:-1]:  # as the model's forward calls them, without a mask (causal SDPA)
        out = layer(h, attention_mask=None, position_ids=position_ids, position_embeddings=(cos, sin),
                    use_cache=False)
        h = out[0] if isinstance(out, tuple) else out  # transformers 4.x returns a tuple
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
    seen = torch.arange(t, device=ids.device)[None] <= pos[:, None]  # causal: keys up to the read-out
    a = F.scaled_dot_product_attention(q, k, v, attn_mask=seen[:, None, None], scale=att.scaling)
    hp = h[rows, pos] + att.o_proj(a.transpose(1, 2).reshape(b, -1))
    hp = hp + last.mlp(last.post_attention_layernorm(hp))
    return model.score(base.norm(hp))

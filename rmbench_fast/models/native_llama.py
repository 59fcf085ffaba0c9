"""Llama without transformers (issue 34): the modules of transformers' Llama, restated in its op
order so that every output is the same bits (benchmarks/native_forward.py: equal under 5.25 and
4.51, fp32 and bf16), with the same attribute names (model.layers[i].self_attn.q_proj, score,
lm_head: checkpoints load as they are), built from a native_config and model.safetensors.

What a run hands a model and this module takes: right-padded causal batches without a mask, or
whole sequences with a 2D mask (a masked doubled BOS), masked as transformers 5 masks them
(transformers 4 builds another mask: engine.prepare leaves those runs to it); the RM read-out
position; use_cache=True returning each layer's keys and values (PrefixKV's prefix batches); and a
split prefix (inputs.prefix_attention.KEY) for the suffix batches.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import nn

from .kinds import SPLIT_PREFIX as KEY


def _linear(n_in: int, n_out: int) -> nn.Linear:
    """An nn.Linear without bias whose weight load() assigns: an empty meta tensor until then. Not
    through nn.Linear's __init__, whose initialization on the meta device imports torch._dynamo
    (0.9 s here, the cost a path without transformers saves)."""
    lin = nn.Linear.__new__(nn.Linear)
    nn.Module.__init__(lin)
    lin.in_features, lin.out_features = n_in, n_out
    lin.weight = nn.Parameter(torch.empty(n_out, n_in, device="meta"), requires_grad=False)
    lin.register_parameter("bias", None)
    return lin


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class LlamaRMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(size, device="meta"))
        self.variance_epsilon = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * x.to(dtype)


class LlamaMLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.gate_proj = _linear(c.hidden_size, c.intermediate_size)
        self.up_proj = _linear(c.hidden_size, c.intermediate_size)
        self.down_proj = _linear(c.intermediate_size, c.hidden_size)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaAttention(nn.Module):
    is_causal = True

    def __init__(self, c, layer_idx: int):
        super().__init__()
        self.layer_idx, self.head_dim = layer_idx, c.head_dim
        self.scaling = c.head_dim ** -0.5
        self.gqa = c.num_key_value_heads != c.num_attention_heads
        self.q_proj = _linear(c.hidden_size, c.num_attention_heads * c.head_dim)
        self.k_proj = _linear(c.hidden_size, c.num_key_value_heads * c.head_dim)
        self.v_proj = _linear(c.hidden_size, c.num_key_value_heads * c.head_dim)
        self.o_proj = _linear(c.num_attention_heads * c.head_dim, c.hidden_size)

    def forward(self, hidden_states, position_embeddings, attention_mask=None, kv=None, **kwargs):
        b, t = hidden_states.shape[:2]
        q, k, v = (p(hidden_states).view(b, t, -1, self.head_dim).transpose(1, 2)
                   for p in (self.q_proj, self.k_proj, self.v_proj))
        cos, sin = (e.unsqueeze(1) for e in position_embeddings)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        if kv is not None:  # use_cache: this layer's keys and values, as a cache holds them
            kv.append((k, v))
        split = kwargs.get(KEY)
        if split is not None:  # a suffix batch on shared prefixes (inputs.prefix_attention)
            a = split.attend(q, k, v, self.layer_idx, self.scaling)
        elif attention_mask is not None:  # transformers 5's SDPA call with a mask: key / value heads repeated
            if self.gqa:
                k, v = (_repeat_heads(x, q.shape[1] // x.shape[1]) for x in (k, v))
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=attention_mask, dropout_p=0.0, scale=self.scaling,
                                               is_causal=False)
        else:
            a = F.scaled_dot_product_attention(q, k, v, scale=self.scaling, is_causal=t > 1, enable_gqa=self.gqa)
        return self.o_proj(a.transpose(1, 2).reshape(b, t, -1)), None


def _repeat_heads(x, n: int):
    """Each key / value head n times in a row, as transformers' repeat_kv writes it."""
    b, h, t, d = x.shape
    return x[:, :, None].expand(b, h, n, t, d).reshape(b, h * n, t, d)


def causal_padding_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """transformers 5's SDPA mask for a 2D attention mask (1: attend) without a cache: [b, 1, t, t]
    booleans, key <= query and the key not masked."""
    t = attention_mask.shape[1]
    pos = torch.arange(t, device=attention_mask.device)
    return (pos[None, None, None, :] <= pos[None, None, :, None]) & attention_mask.bool()[:, None, None, :]


class LlamaDecoderLayer(nn.Module):
    def __init__(self, c, layer_idx: int):
        super().__init__()
        self.self_attn = LlamaAttention(c, layer_idx)
        self.mlp = LlamaMLP(c)
        self.input_layernorm = LlamaRMSNorm(c.hidden_size, c.rms_norm_eps)
        self.post_attention_layernorm = LlamaRMSNorm(c.hidden_size, c.rms_norm_eps)

    def forward(self, hidden_states, attention_mask=None, position_embeddings=None, **kwargs):
        a, _ = self.self_attn(self.input_layernorm(hidden_states), position_embeddings, attention_mask, **kwargs)
        h = hidden_states + a
        return h + self.mlp(self.post_attention_layernorm(h))


class LlamaRotaryEmbedding(nn.Module):
    def __init__(self, c):
        super().__init__()
        dim = c.head_dim
        inv_freq = 1.0 / (c.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x, position_ids):
        freqs = position_ids[..., None].float() * self.inv_freq.to(device=x.device, dtype=torch.float)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


class LlamaModel(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.config = c
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size,  # _weight: no initialization (see _linear)
                                         _weight=torch.empty(c.vocab_size, c.hidden_size, device="meta"))
        self.layers = nn.ModuleList(LlamaDecoderLayer(c, i) for i in range(c.num_hidden_layers))
        self.norm = LlamaRMSNorm(c.hidden_size, c.rms_norm_eps)
        self.rotary_emb = LlamaRotaryEmbedding(c)

    def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=False, **kwargs):
        other = sorted(k for k, v in kwargs.items() if k != KEY and v is not None and v is not False)
        if other:  # a cache to extend, logits_to_keep, outputs to capture: not this module's
            raise TypeError(f"native Llama does not take {other}")
        if attention_mask is not None:  # a masked batch (a doubled BOS): whole sequences only
            if use_cache or kwargs.get(KEY) is not None:
                raise TypeError("native Llama takes a mask only for whole sequences without a cache")
            attention_mask = causal_padding_mask(attention_mask)
        h = self.embed_tokens(input_ids)
        if position_ids is None:
            position_ids = torch.arange(input_ids.shape[1], device=h.device)[None]
        rotary = self.rotary_emb(h, position_ids)
        kv = [] if use_cache else None
        extra = {KEY: kwargs[KEY]} if kwargs.get(KEY) is not None else {}
        for layer in self.layers:
            h = layer(h, attention_mask=attention_mask, position_embeddings=rotary, kv=kv, **extra)
        h = self.norm(h)
        return {"last_hidden_state": h, "past_key_values": kv, 0: h}


class _Output(dict):
    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


class _Head(nn.Module):
    """What the engine reads of a transformers model besides its modules."""

    base_model_prefix = "model"

    def __init__(self, c):
        super().__init__()
        self.config = c
        self.model = LlamaModel(c)

    @property
    def base_model(self):
        return self.model

    @property
    def dtype(self):
        return self.model.embed_tokens.weight.dtype

    @property
    def device(self):
        return self.model.embed_tokens.weight.device

    def get_input_embeddings(self):
        return self.model.embed_tokens


class LlamaForCausalLM(_Head):
    def __init__(self, c):
        super().__init__(c)
        self.lm_head = _linear(c.hidden_size, c.vocab_size)

    def get_output_embeddings(self):
        return self.lm_head

    def forward(self, input_ids, **kwargs):
        out = self.model(input_ids, **kwargs)
        return _Output(logits=self.lm_head(out[0]), past_key_values=out["past_key_values"])


class LlamaForSequenceClassification(_Head):
    def __init__(self, c):
        super().__init__(c)
        self.score = _linear(c.hidden_size, c.num_labels)

    def forward(self, input_ids, **kwargs):
        logits = self.score(self.model(input_ids, **kwargs)[0])
        t = torch.arange(input_ids.shape[1], device=input_ids.device, dtype=torch.int32)
        last = (t * (input_ids != self.config.pad_token_id).to(torch.int32)).argmax(-1)
        return _Output(logits=logits[torch.arange(input_ids.shape[0], device=logits.device), last])


def model_config(config) -> SimpleNamespace:
    """The numbers the modules are built from, from a native_config (mutable: the scorers set pad_token_id)."""
    raw = json.loads((Path(config._path).expanduser() / "config.json").read_text(encoding="utf-8"))
    rope = raw.get("rope_parameters") or {}
    return SimpleNamespace(
        model_type="llama", architectures=list(config.architectures), vocab_size=config.vocab_size,
        hidden_size=config.hidden_size, intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_hidden_layers, num_attention_heads=config.num_attention_heads,
        num_key_value_heads=config.num_key_value_heads, head_dim=config.head_dim,
        rms_norm_eps=raw["rms_norm_eps"], rope_theta=float(rope.get("rope_theta", raw.get("rope_theta", 10000.0))),
        num_labels=config.num_labels, pad_token_id=config.pad_token_id, is_encoder_decoder=False,
        max_position_embeddings=config.max_position_embeddings, _attn_implementation="sdpa",
        tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)))


def load(path: str, config, dtype: torch.dtype, device) -> nn.Module:
    """The model at `path` (a plain Llama: native_config gave `config`) from model.safetensors, every
    weight of the class from the file and every weight in the file used (else ValueError)."""
    from safetensors.torch import load_file

    c = model_config(config)
    cls = LlamaForSequenceClassification if c.architectures[0].endswith("SequenceClassification") else LlamaForCausalLM
    model = cls(c)  # on the meta device
    weights = load_file(str(Path(path).expanduser() / "model.safetensors"))
    tied = c.tie_word_embeddings and cls is LlamaForCausalLM
    if tied and "lm_head.weight" in weights:  # transformers ties over the file's own head: let it decide
        raise ValueError("tie_word_embeddings with an lm_head.weight of its own")
    want = {k: p.shape for k, p in model.state_dict().items()}
    got = {k: v.shape for k, v in weights.items()} | ({"lm_head.weight": want.get("lm_head.weight")} if tied else {})
    if want != got:
        raise ValueError(f"weights do not match {cls.__name__}: missing {sorted(set(want) - set(got))[:5]}, "
                         f"unexpected {sorted(set(got) - set(want))[:5]}, "
                         f"other shapes {[k for k in want if k in got and want[k] != got[k]][:5]}")
    # each weight copied into a block of its own, one at a time: the file's tensors sit at its offsets
    # (32-byte aligned here), where the CPU's matmuls ran 4-5% slower than on transformers' copies
    state = {k: weights.pop(k).to(dtype=dtype, copy=True) for k in list(weights)}
    if tied:
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    model.load_state_dict(state, assign=True)
    if tied:  # one Parameter for both, as transformers ties them (parameter counts, memory estimates)
        model.lm_head.weight = model.model.embed_tokens.weight
    model.model.rotary_emb = LlamaRotaryEmbedding(c)  # a buffer computed, not loaded (off the meta device)
    return model.to(device).eval().requires_grad_(False)

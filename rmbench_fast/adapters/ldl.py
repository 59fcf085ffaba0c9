"""LDL-Reward (ShikaiChen/LDL-Reward-Gemma-2-27B-v0.1): a Gemma-2 decoder whose last hidden state
feeds 22 reward distributions over 10 bins (`regression_layer`) mixed by 22 weights
(`gating_layer`); the score is the mixture's mean on linspace(0, 1, 10).

Layout, as its class saves it: the safetensors hold the bare Gemma-2 decoder; the two heads are
separate state dicts, `regression_layer.pt` (Linear-LeakyReLU-...-Linear, output viewed as [22, 10]
and softmaxed per distribution) and `gating_layer.pt` (Linear-LeakyReLU-Dropout(0)-...-Linear, a
softmax over the 22 weights only when config.softmax, at config.temperature). Their widths are read
from the files (4096 in the published model). The heads are plain tensors, loaded without pickle
code (torch.load weights_only), and run in float32 as the official class casts them.

The read-out is the hidden state just before the first pad id. The official class forces bf16 and
flash_attention_2 (which applies Gemma-2's softcapping, as eager attention does here). Its pipeline
(LDLPipeline) drops the first column of the whole padded batch when any row starts with a doubled
BOS, so a row's score depends on its batch when rows differ or the tokenizer pads on the left;
rmbench-fast drops a row's first BOS exactly when that row starts with two (the official score of
the sequence alone).
"""

from __future__ import annotations

import functools
import json
from collections import OrderedDict
from pathlib import Path

import torch
import torch.nn as nn

from ..errors import UsageError
from ..models.loading import load_model
from .base import Adapter
from .pooling import before_first, rows
from .scoring import scorer_for

HEADS = ("regression_layer", "gating_layer")
BINS = 10


@functools.cache
def model_class():
    """LDLBackbone, built on first use: its transformers base class imports the model code (seconds),
    which a run whose passes all come from the store never needs."""
    from transformers import Gemma2Model

    class LDLBackbone(Gemma2Model):
        # heads saved inside the safetensors too are ignored: the .pt files are what the official class loads
        _keys_to_ignore_on_load_unexpected = [r"^(regression_layer|gating_layer)\."]

    return LDLBackbone


class Head(nn.Module):
    """`network`: the Linear layers a state dict holds at their indices, LeakyReLU after each but the
    last (the Dropout(0) slots between are identities and hold no weights)."""

    def __init__(self, state: dict):
        super().__init__()
        idx = sorted({int(k.split(".")[1]) for k in state if k.startswith("network.") and k.endswith(".weight")})
        layers = OrderedDict()
        for n, i in enumerate(idx):
            w = state[f"network.{i}.weight"]
            layers[str(i)] = nn.Linear(w.shape[1], w.shape[0], bias=f"network.{i}.bias" in state)
            if n < len(idx) - 1:
                layers[str(i + 1)] = nn.LeakyReLU()
        self.network = nn.Sequential(layers)
        self.load_state_dict(state, strict=True)

    def forward(self, x):
        return self.network(x)


def gating_settings(folder: Path) -> tuple[bool, float]:
    """(softmax, temperature) of the gating head, as the official class reads them: config.to_dict()
    under transformers 4.51, i.e. config.json's own values. They are read from the file, not the
    loaded config: transformers 5 drops `temperature` from model configs (a generation setting there),
    which silently gave temperature 1.0."""
    try:
        raw = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise UsageError(f"model {folder}: cannot read config.json ({e})") from None
    return bool(raw.get("softmax", False)), float(raw.get("temperature", 1.0))


class LDLRewardModel(nn.Module):
    def __init__(self, backbone, regression: Head, gating: Head, softmax: bool = False, temperature: float = 1.0):
        super().__init__()
        self.model, self.regression_layer, self.gating_layer = backbone, regression, gating
        self.config = backbone.config
        self.softmax, self.temperature = softmax, temperature

    def get_input_embeddings(self):
        return self.model.embed_tokens

    def forward(self, input_ids, attention_mask):
        h = self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        x = rows(h, before_first(input_ids, self.config.pad_token_id)).float()
        x = x.to(next(self.regression_layer.parameters()).device)  # --device-map: the last block may be on another device
        dist = torch.softmax(self.regression_layer(x).view(x.shape[0], -1, BINS), dim=-1)  # [B, 22, 10]
        w = self.gating_layer(x)
        if self.softmax:
            w = torch.softmax(w / self.temperature, dim=1)
        total = torch.bmm(w.unsqueeze(1), dist).squeeze(1)  # [B, 10]
        return (total * torch.linspace(0, 1, BINS, device=x.device)).sum(-1)  # [B]


def load(scorer, path, dtype, device, trust_remote_code, allow_pickle_weights):
    folder = Path(path)
    missing = [f"{h}.pt" for h in HEADS if not (folder / f"{h}.pt").is_file()]
    if missing:
        raise UsageError(f"model {path}: LDL-Reward keeps its heads in {' and '.join(missing)} next to config.json; "
                         "not found (a local folder is needed)")
    # eager attention, which applies Gemma-2's attention-logit softcapping as the official class's
    # FlashAttention-2 does; transformers 4.51's default for a bare Gemma2Model (SDPA) skips it
    backbone = load_model(path, "rm", dtype, device, False, allow_pickle_weights, False, model_class=model_class(),
                          attn_implementation="eager")
    heads = []
    for h in HEADS:
        try:
            state = torch.load(folder / f"{h}.pt", map_location="cpu", weights_only=True)
            heads.append(Head(state).float().to(device))
        except (RuntimeError, KeyError, ValueError, IndexError) as e:
            raise UsageError(f"model {path}: {h}.pt is not the head's state dict ({e})") from None
    return LDLRewardModel(backbone, *heads, *gating_settings(folder)).eval().requires_grad_(False)


def make_scorer(o, config, tokenizer, device, tokenizer_path):
    warn = ()
    if tokenizer.bos_token is not None:
        warn = ("LDLPipeline drops the first column of the whole batch when any row starts with a doubled BOS, so its "
                "score depends on the batch for mixed batches or left padding; rmbench-fast drops a row's first BOS "
                "exactly when that row starts with two (the sequence's official score alone)",)
    return scorer_for(ADAPTER, o, config, tokenizer, load, bos="drop", quantized=False, dtype=torch.bfloat16,
                      warnings=warn)


ADAPTER = Adapter(
    name="ldl",
    summary="LDL-Reward (Gemma-2 + 22 reward distributions mixed by a gating head, from regression_layer.pt and "
            "gating_layer.pt)",
    official_names=("ShikaiChen/LDL-Reward-Gemma-2-27B-v0.1",),
    architectures=("LDLRewardModel27B",),
    files=("regression_layer.pt", "gating_layer.pt"),
    make_scorer=make_scorer,
    notes=("the official pipeline drops the first column of a whole batch when any row starts with a doubled BOS "
           "(batch-dependent); here a row's first BOS is dropped when that row starts with two",
           "the official class forces bfloat16 and flash_attention_2 (CUDA only); here eager attention "
           "(softcapping applies, as with FlashAttention) and --dtype, the heads in float32"),
)
ADAPTERS = [ADAPTER]

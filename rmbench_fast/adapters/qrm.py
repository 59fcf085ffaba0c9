"""QRM (nicolinho/QRM-Llama3.1-8B, QRM-Llama3-8B): quantile regression over 19 objectives,
mixed by a gating network that looks at the prompt.

Weights: `model.*` (Llama), `regression_layer` (h -> num_objectives x num_quantiles, no bias),
`reward_transform_matrix` (objectives x objectives), `gating.layers.*` (n x [Linear without bias,
ReLU, BatchNorm1d] then Linear; eval BatchNorm uses its running statistics) and `gating.logit_scale`.
Score = sum over objectives of gate * (mean over quantiles of the rewards) @ transform, where the
rewards come from the hidden state just before the first pad id and the gate from the one at the
last `<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n`, found by Llama-3's token ids
(so only a Llama-3 tokenizer and chat template work: sequences without the pattern are an error
here, as officially). The head runs in float32 (as the 3.1 class's autocast does). Scored through
RewardBenchPipeline: a doubled BOS gets attention 0.

The official classes force flash_attention_2 and drop the requested dtype, so they load float32
weights that FlashAttention rejects: they run only under accelerate's bf16 autocast, on CUDA with
flash-attn (QRM-Llama3-8B's head then runs in bf16). Here: transformers' default attention and
--dtype.
"""

from __future__ import annotations

import functools
import torch
import torch.nn as nn

from ..errors import UsageError
from .base import Adapter
from .pooling import before_first, rows
from .scoring import AdapterScorer, load_own, scorer_for

GATING_PATTERN = (128009, 128006, 78191, 128007, 271)  # <|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n


def last_pattern(ids: torch.Tensor, pattern=GATING_PATTERN) -> torch.Tensor:
    """Per row, where the last occurrence of `pattern` starts (-1 when there is none)."""
    k = len(pattern)
    if ids.shape[1] < k:
        return torch.full((ids.shape[0],), -1, device=ids.device)
    hit = (ids.unfold(1, k, 1) == torch.tensor(pattern, device=ids.device)).all(-1)  # [B, L - k + 1]
    pos = torch.arange(hit.shape[1], device=ids.device)
    return torch.where(hit, pos, -1).max(1).values


class GatingNetwork(nn.Module):
    def __init__(self, h: int, out: int, temperature: float, hidden: int, n_hidden: int):
        super().__init__()
        self.temperature = temperature
        self.logit_scale = nn.Parameter(torch.ones(1))
        layers = []
        for _ in range(n_hidden):
            layers += [nn.Linear(h, hidden, bias=False), nn.ReLU(), nn.BatchNorm1d(hidden)]
            h = hidden
        self.layers = nn.ModuleList(layers + [nn.Linear(h, out)])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return torch.softmax(x / self.temperature, dim=1) * self.logit_scale[0]


@functools.cache
def model_class():
    """GatedRewardModel, built on first use: its transformers base class imports the model code (seconds),
    which a run whose passes all come from the store never needs."""
    from transformers import LlamaModel, LlamaPreTrainedModel

    class GatedRewardModel(LlamaPreTrainedModel):
        def __init__(self, config):
            super().__init__(config)
            self.model = LlamaModel(config)
            self.objectives = getattr(config, "num_objectives", 19)
            self.quantiles = getattr(config, "num_quantiles", 1)
            self.regression_layer = nn.Linear(config.hidden_size, self.objectives * self.quantiles, bias=False)
            self.reward_transform_matrix = nn.Parameter(torch.eye(self.objectives), requires_grad=False)
            self.gating = GatingNetwork(config.hidden_size, self.objectives, getattr(config, "gating_temperature", 10),
                                        getattr(config, "gating_hidden_dim", 1024), getattr(config, "gating_n_hidden", 3))
            self.post_init()

        def get_input_embeddings(self):
            return self.model.embed_tokens

        def head_to_float(self):
            self.regression_layer.float()
            self.gating.float()
            self.reward_transform_matrix.data = self.reward_transform_matrix.data.float()
            return self

        def forward(self, input_ids, attention_mask):
            h = self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            at = last_pattern(input_ids)
            if (at < 0).any():
                raise UsageError("QRM: a sequence lacks Llama-3's '<|eot_id|><|start_header_id|>assistant<|end_header_id|>"
                                 "\\n\\n' token ids, where the gating network reads")
            rewards = self.regression_layer(rows(h, before_first(input_ids, self.config.pad_token_id)).float())
            rewards = rewards.view(-1, self.objectives, self.quantiles).mean(2) @ self.reward_transform_matrix
            gate = self.gating(rows(h, at).float())
            return (gate * rewards).sum(1)  # [B]

    return GatedRewardModel


class GatedScorer(AdapterScorer):
    def encode(self, samples, tokenizer, fmt, compat, tokenizer_path=None):
        seqs = super().encode(samples, tokenizer, fmt, compat, tokenizer_path)
        missing = [i for i, e in enumerate(seqs) if last_pattern(torch.tensor([e.ids]))[0] < 0]
        if missing:
            raise UsageError(f"{self.family}: {len(missing)} of {len(seqs)} sequences lack Llama-3's '<|eot_id|>"
                             "<|start_header_id|>assistant<|end_header_id|>\\n\\n' token ids, where its gating network "
                             "reads (it needs a Llama-3 tokenizer and chat template, and no truncation of that part)")
        return seqs


def load(scorer, *args):
    return load_own(model_class(), scorer, *args).head_to_float()


def make_scorer(o, config, tokenizer, device, tokenizer_path):
    return scorer_for(ADAPTER, o, config, tokenizer, load, GatedScorer, bos="mask", quantized=False,
                      dtype=torch.bfloat16)


ADAPTER = Adapter(
    name="qrm",
    summary="QRM (Llama-3 quantile reward heads mixed by a prompt gating network), as RewardBenchPipeline runs it",
    official_names=("nicolinho/QRM-Llama3.1-8B", "nicolinho/QRM-Llama3-8B"),
    architectures=("LlamaForRewardModelWithGating",),
    accepts=lambda c: getattr(c, "num_quantiles", None) is not None,
    make_scorer=make_scorer,
    notes=("the official classes force flash_attention_2 and run only under accelerate's bf16 autocast on CUDA; "
           "here transformers' default attention and --dtype, the head in float32",
           "the gating network needs Llama-3's token ids for '<|eot_id|><|start_header_id|>assistant"
           "<|end_header_id|>\\n\\n'", "a doubled BOS gets attention 0 (RewardBenchPipeline)"),
)
ADAPTERS = [ADAPTER]

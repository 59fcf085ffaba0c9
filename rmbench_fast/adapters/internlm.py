"""InternLM2 reward models (internlm/internlm2-{1_8b,7b,20b}-reward): the model's own class
(InternLM2ForRewardModel, config.json auto_map AutoModel), run under --trust-remote-code. It scores
at the last attended token, which must be the reward token (config.reward_token_id).

The official InternLMPipeline encodes each text without special tokens (the chat template already
starts with BOS), appends the reward token unless the text already ends with it, right-pads and
passes a mask. It never truncates, whatever max_length says: neither does this adapter, even with
--compat official.
"""

from __future__ import annotations

from functools import partial

from ..errors import UsageError
from ..inputs.layout import full_texts
from ..inputs.tokenize import Encoded
from .base import Adapter
from .scoring import QUANTIZED, AdapterScorer, encode_plain, load_remote, require_remote_code, scorer_for


class InternLMScorer(AdapterScorer):
    """Encodes without special tokens; the reward token (the model's, so not part of the tokenized
    inputs the result store shares between models) is appended to each row of a batch."""

    reward_token_id = None

    def extra_key(self):
        return (self.reward_token_id,)

    def encode(self, samples, tokenizer, fmt, compat, tokenizer_path=None):
        return [Encoded(ids) for ids in encode_plain(tokenizer, full_texts(self.spanned(samples), fmt))]

    def rows(self, seqs, batch):
        t = self.reward_token_id
        return [ids + ([] if ids and ids[-1] == t else [t]) for ids in super().rows(seqs, batch)]


def make_scorer(o, config, tokenizer, device, tokenizer_path):
    require_remote_code(o, config, ADAPTER.name, "AutoModel")
    token = getattr(config, "reward_token_id", None)
    if token is None:
        raise UsageError(f"model {o.model}: its config has no reward_token_id, which InternLM2 reward models score at")
    s = scorer_for(ADAPTER, o, config, tokenizer, partial(load_remote, "AutoModel"), InternLMScorer, quantized=True)
    s.reward_token_id = int(token)
    return s


ADAPTER = Adapter(
    name="internlm2",
    summary="InternLM2 reward models (the model's own code, --trust-remote-code): reward token appended, read there",
    official_names=("internlm/internlm2-20b-reward", "internlm/internlm2-7b-reward", "internlm/internlm2-1_8b-reward"),
    architectures=("InternLM2ForRewardModel",),
    auto_map=("InternLM2ForRewardModel",),
    make_scorer=make_scorer, remote_code=True,
    notes=("runs the model's own code (auto_map AutoModel) under --trust-remote-code",
           "texts encoded without special tokens, the reward token appended; never truncated (as the official "
           "pipeline)", QUANTIZED),
)
ADAPTERS = [ADAPTER]

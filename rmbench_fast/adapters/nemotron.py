"""Nemotron reward LMs: NVIDIA's HF reward checkpoints published as a LlamaForCausalLM, whose
reward is the logit of vocabulary id 0 at the conversation's last position.

Their model cards score a conversation [user prompt, assistant response] by tokenizing it with
the tokenizer's chat template (`apply_chat_template(tokenize=True, add_generation_prompt=False)`:
the template's own special tokens, none added), generating one token with `output_scores=True` and
taking `scores[0][0][0]`: the logit of id 0 predicted after the last input token (greedy, no logits
processor, so the raw logit). NVIDIA converted the NeMo reward head into row 0 of the LM head
(HF discussion nvidia/Llama-3.1-Nemotron-70B-Reward-HF#7). Official names: the checkpoints whose
card documents exactly that read-out - nvidia/Llama-3.1-Nemotron-70B-Reward-HF and
nvidia/Llama-3.3-Nemotron-70B-Reward. Not included: -Reward-Principle (its card reads the Yes
minus No logits after a principle question) and Qwen-3-Nemotron-32B-Reward (a sequence
classifier, the plain scorer). rewardbench 0.1.4 has no entry for any of them; RM-Bench's run_rm.py
would load one as a sequence classifier with a random head.

Here: the base model's hidden state at each sequence's last position times LM-head row 0 (+ bias,
with the logit transforms the log-prob seam knows), never the full logits; once per pass the row
is checked against the model's own logits (scorers.verdict, with one row instead of two), and a
mismatch sends the rest of the pass through the model's own logits, with a warning and run.json's
`logprob_head` saying why.
"""

from __future__ import annotations

import logging

import torch

from ..models.loading import load_model
from ..scorers.verdict import rows_reader
from .base import Adapter
from .scoring import PlainTextScorer, scorer_for

log = logging.getLogger("rmbench_fast")
READ_ID = 0  # the vocabulary id whose logit is the reward
CARD = ("reward = the logit of vocabulary id 0 at the last position of the chat-templated conversation (the model "
        "card's generate(max_new_tokens=1, output_scores=True).scores[0][0][0]), from LM-head row 0 only")


class NemotronScorer(PlainTextScorer):
    """The chat template's ids (no special tokens added), read at the last position through row 0."""

    truncate = False  # no official pipeline to mimic: --compat official cuts nothing

    def extra_key(self):
        return ("lm-head-row", READ_ID)

    def vocab_limit(self, model):
        return min(model.get_input_embeddings().num_embeddings, model.get_output_embeddings().weight.shape[0])

    def batch_fn(self, model, device):
        read, run_info = rows_reader(model, device, self.pad_id, (READ_ID,), "rewards")

        def run(seqs, batch, prefix=None):
            return {"scores": read(seqs, batch, prefix)[:, 0]}

        run.info = run_info
        return run

    def readout_limit(self, e):
        return max(0, len(e.ids) - 1)  # the last position is read: a shared prefix stops before it

    def notes(self, seqs):
        return {**super().notes(seqs), "read_out": CARD}

    def describe(self):
        return {**super().describe(), "read_id": READ_ID}


def load(scorer, path, dtype, device, trust_remote_code, allow_pickle_weights):
    """The checkpoint as the causal LM it is (AutoModelForCausalLM, strict weight check)."""
    return load_model(path, "dpo", dtype, device, trust_remote_code, allow_pickle_weights, scorer.int8)


def make_scorer(o, config, tokenizer, device, tokenizer_path):
    return scorer_for(ADAPTER, o, config, tokenizer, load, NemotronScorer, quantized=False, dtype=torch.bfloat16)


ADAPTER = Adapter(
    name="nemotron-reward",
    summary="Nemotron reward LMs (a LlamaForCausalLM): the logit of vocabulary id 0 at the last position",
    official_names=("nvidia/Llama-3.1-Nemotron-70B-Reward-HF", "nvidia/Llama-3.3-Nemotron-70B-Reward"),
    make_scorer=make_scorer,
    notes=(CARD, "texts encoded without special tokens (the chat template carries them), as the card's "
           "apply_chat_template(tokenize=True)", "the model card loads bfloat16",
           "not in rewardbench 0.1.4's REWARD_MODEL_CONFIG: no official RM-Bench flow scores these"),
)
ADAPTERS = [ADAPTER]


def fits(name: str) -> bool:
    """Whether a model name looks like a Nemotron reward LM this adapter reads (for the refusal's hint)."""
    low = name.lower()
    return "nemotron" in low and "reward" in low and not any(s in low for s in ("principle", "genrm"))

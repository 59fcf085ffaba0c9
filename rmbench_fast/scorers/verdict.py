"""Logit verdicts: a generative judge scored without decoding.

Each sequence is a whole judge prompt as the caller rendered it (chat template with the generation
prompt, then a forced answer prefix such as "\\boxed{" or "[["). The prompt is prefilled once and
the verdict is read from the logits that predict the token after its last position, for the two
verdict tokens only (A first, then B): the base model runs for hidden states and just those two
rows of the LM head (+ bias, with the logit transforms the log-prob seam knows: Cohere's scale,
Granite's divisor, Gemma's soft-capping) are applied at one position per row, so no
[tokens, vocab] tensor is made. Once per pass the head is checked against the model's own logits
(as the DPO scorer's check_head); a transform it does not know sends the rest of the pass through
the model's own logits, and run.json says why (`logprob_head`, the key the DPO scorer and the Ray
merge use: "fused" here means the two head rows applied to hidden states).
"""

from __future__ import annotations

import logging

import numpy as np
import torch

from ..errors import UsageError, one_line
from ..inputs.batching import Batch, batch_inputs, forward
from ..inputs.tokenize import Encoded
from ..models.device import OUT_OF_MEMORY
from ..models.kinds import base_model, is_causal_decoder
from ..models.loading import load_model
from .base import Scorer
from .dpo import CHECK_TOKENS, lm_head_of
from .logprobs import LMHead, head_logits, ready

log = logging.getLogger("rmbench_fast")


def verdict_probs(logits2: np.ndarray) -> np.ndarray:
    """Softmax over the two verdict logits [..., 2] -> the probability of the first (A), float64:
    1 / (1 + exp(b - a)) through exp(-|a - b|), which never overflows, so logits of any size give
    0, 1 or the exact value (NaN only from NaN or from two equal infinities)."""
    z = np.asarray(logits2, dtype=np.float64)
    if z.shape[-1:] != (2,):
        raise ValueError(f"verdict logits must end in a dimension of 2, not {z.shape}")
    d = z[..., 0] - z[..., 1]
    with np.errstate(under="ignore"):  # exp(-|d|) below the smallest float64 is 0: a certain verdict
        e = np.exp(-np.abs(d))
    return np.where(d >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def two_rows(head: LMHead, token_ids: tuple) -> LMHead:
    """The LM head restricted to the rows of `token_ids` (copies: a few rows, not a vocabulary), on
    the device where the head computes: read through accelerate's hook when --device-map offloaded
    it, and gathered from the ranks that hold them when --tp shards it over the vocabulary."""
    with ready(head) as h:
        if h.vocab_start is None:
            rows = torch.as_tensor(token_ids, device=h.weight.device)
            bias = None if h.bias is None else h.bias[rows].clone()
            return LMHead(h.weight[rows].clone(), bias, h.scale, h.softcap, h.divisor)
        import torch.distributed as dist

        # each rank fills the rows it holds; a sum over the ranks (in fp32: exact, as all others add 0) has them all
        w = torch.zeros(len(token_ids), h.weight.shape[1], dtype=torch.float32, device=h.weight.device)
        b = torch.zeros(len(token_ids), dtype=torch.float32, device=h.weight.device)
        for k, t in enumerate(token_ids):
            if h.vocab_start <= t < h.vocab_start + h.weight.shape[0]:
                w[k] = h.weight[t - h.vocab_start].float()
                if h.bias is not None:
                    b[k] = h.bias[t - h.vocab_start].float()
        dist.all_reduce(w, group=h.group)
        dist.all_reduce(b, group=h.group)
        return LMHead(w.to(h.weight.dtype), None if h.bias is None else b.to(h.bias.dtype), h.scale, h.softcap,
                      h.divisor)


def _last_positions(seqs, batch: Batch, offsets=None) -> np.ndarray:
    """Per row: its last real position in the batch's rows (a cached prefix shifts it left)."""
    last = np.array([len(seqs[i].ids) - 1 for i in batch.indices], dtype=np.int64)
    return last if offsets is None else last - np.asarray(offsets, dtype=np.int64)


@torch.inference_mode()
def batch_verdict_logits(model, seqs, batch: Batch, pad_id: int, device, token_ids: tuple[int, int],
                         head: LMHead | None, prefix=None) -> np.ndarray:
    """[rows, 2] float64: the logits of the two verdict tokens after each row's last token; from the
    base model's hidden states and `head` (the two rows), or with head None from the model's own
    logits. prefix: a PrefixKV (every row's last position is in its suffix: readout_limit)."""
    causal = is_causal_decoder(model.config)
    inputs, offsets = batch_inputs(seqs, batch, pad_id, device, causal, prefix, base=head is not None)
    last = _last_positions(seqs, batch, offsets)
    if (last < 0).any():
        bad = int(batch.indices[int(np.argmax(last < 0))])
        raise UsageError(f"sequence {bad}: an empty judge prompt has no position to read a verdict from")
    rows = torch.arange(len(last), device=device)
    pos = torch.as_tensor(last, device=device)
    if head is not None:
        states = forward(base_model(model), inputs)[0]  # --device-map: on the last block's device
        hidden = states[rows.to(states.device), pos.to(states.device)]
        z = head_logits(hidden.to(head.weight.device), head)  # which may not be where the head computes
    else:
        z = forward(model, inputs).logits[rows, pos][:, list(token_ids)].float()
    return z.double().cpu().numpy()


@torch.inference_mode()
def check_verdict_head(model, full: LMHead, head: LMHead, seqs, i: int, pad_id: int, device,
                       token_ids: tuple[int, int]) -> str | None:
    """None when the head gives what the model gives, else why not: sequence i's first CHECK_TOKENS
    tokens, the whole head's logits (fp32 from the model's weights) against the model's own at every
    position, and the two-row head against the model's own two logits, within the rounding of one
    model-dtype value (its machine epsilon of the largest |logit|), as the DPO scorer's check_head:
    a transform the seam does not know (a 2% scale, say) shows across the whole vocabulary."""
    cut = [Encoded(seqs[i].ids[:CHECK_TOKENS])]
    one = Batch(np.array([0]), len(cut[0].ids))
    inputs, _ = batch_inputs(cut, one, pad_id, device, is_causal_decoder(model.config))
    own = forward(model, inputs).logits[0].float()
    try:
        hidden = forward(base_model(model), inputs)[0][0]
        with ready(full) as f:  # --device-map: the whole head where it computes, for the check's few rows
            ours = head_logits(hidden.to(f.weight.device), f).to(own.device)
        pair = head_logits(hidden.to(head.weight.device), head).to(own.device)
    except OUT_OF_MEMORY:
        raise  # the runner retries, and the check runs again
    except RuntimeError as e:  # a head that reads another hidden size than the base model's output
        return f"the LM head does not fit {type(model).__name__}'s hidden states ({one_line(e, 120)})"
    err = max(float((ours - own).abs().max()), float((pair - own[:, list(token_ids)]).abs().max()))
    tol = max(torch.finfo(full.weight.dtype).eps, 1e-5) * max(1.0, float(ours.abs().max()))
    if not err <= tol:
        return f"the LM head's logits differ from {type(model).__name__}'s own by {err:.2e} (tolerance {tol:.1e})"
    return None


def rows_reader(model, device, pad_id: int, token_ids: tuple, what: str):
    """(read, run_info): read(seqs, batch, prefix=None) -> float64 [rows, len(token_ids)], the LM-head
    rows `token_ids` at each row's last position; the head checked once per pass against the model's
    own logits, which it falls back to (and run_info says why) when they differ or the head is not a
    plain linear layer. `what`: how warnings name the numbers (verdicts, rewards)."""
    full = lm_head_of(model)
    head = None if full is None else two_rows(full, token_ids)
    state = {"checked": head is None}
    if head is None:
        log.warning("the LM head of %s is not a plain linear layer: %s from the model's own logits",
                    type(model).__name__, what)
        run_info = {"logprob_head": "model logits (the head is not a plain linear layer)"}
    else:
        run_info = {"logprob_head": "fused"}

    def read(seqs, batch, prefix=None):
        nonlocal head
        if not state["checked"]:  # once per pass: the head rows against the model's own logits
            some = [i for i in batch.indices if len(seqs[i].ids)]
            why = check_verdict_head(model, full, head, seqs, int(some[0]), pad_id, device,
                                     token_ids) if some else None
            state["checked"] = bool(some)
            if why is not None:
                log.warning("%s: using the model's own logits", why)
                head, run_info["logprob_head"] = None, f"model logits: {why}"
        return batch_verdict_logits(model, seqs, batch, pad_id, device, token_ids, head, prefix)

    return read, run_info


class VerdictScorer(Scorer):
    """Per judge prompt, the logits of the two verdict tokens (A, B) at the next position."""

    family = "judge-logits"
    mode = "dpo"  # a causal LM, loaded and prepared as a DPO policy
    outputs = {"verdict_logits": (2,)}

    def __init__(self, pad_id: int, token_ids: tuple[int, int]):
        super().__init__(pad_id)
        a, b = (int(t) for t in token_ids)
        if a == b or min(a, b) < 0:
            raise UsageError(f"verdict token ids must be two different ids, not {tuple(token_ids)}")
        self.token_ids = (a, b)

    def encode(self, samples, tokenizer, fmt, compat, tokenizer_path=None):
        raise NotImplementedError("judge prompts are rendered and tokenized by the judge stage: each an Encoded "
                                  "whose ids are the whole prompt")

    def pass_key(self):
        return ("judge-logits-v1", self.token_ids, self.int8)

    def load(self, path, dtype, device, trust_remote_code, allow_pickle_weights=False):
        return load_model(path, "dpo", dtype, device, trust_remote_code, allow_pickle_weights, self.int8)

    def vocab_limit(self, model):
        return min(model.get_input_embeddings().num_embeddings, model.get_output_embeddings().weight.shape[0])

    def batch_fn(self, model, device):
        rows = model.get_output_embeddings().weight.shape[0]
        if max(self.token_ids) >= rows:
            raise UsageError(f"verdict token ids {self.token_ids}: the model's LM head has {rows} rows")
        read, run_info = rows_reader(model, device, self.pad_id, self.token_ids, "verdicts")

        def run(seqs, batch, prefix=None):
            return {"verdict_logits": read(seqs, batch, prefix)}

        run.info = run_info
        return run

    def rewards(self, passes):
        return passes["model"]["verdict_logits"]

    def readout_limit(self, e):
        return max(0, len(e.ids) - 1)  # the last position is read: a shared prefix stops before it

    def describe(self):
        return {"scorer": self.family, "mode": "dpo", "ref_free": None, "logprob_impl": None,
                "verdict_token_ids": list(self.token_ids)}

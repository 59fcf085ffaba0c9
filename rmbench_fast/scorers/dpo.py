"""DPO implicit rewards: per-sequence sums of response-token log-probs.

The base model runs once per batch for hidden states; the LM head is applied only to the
positions that predict response tokens, through the log-prob seam (`rmbench_fast.logprobs`).
With a reference model the reward is sum log p_policy - sum log p_ref; without one, sum, avg (per
token) or norm (minus the L2 norm of the token log-probs), as rewardbench's DPOInference.
"""

from __future__ import annotations

import logging

import numpy as np
import torch

from ..errors import one_line
from ..inputs.batching import Batch, batch_inputs, forward
from ..inputs.layout import prompt_texts, responses, text
from ..inputs.spans import marks
from ..inputs.tokenize import Encoded, encode_dpo
from ..kernels import logits_logprobs
from ..models.device import OUT_OF_MEMORY
from ..models.kinds import base_model, is_causal_decoder, text_config
from ..models.loading import load_model
from .base import Scorer
from .logprobs import LMHead, head_logits, ready, segment_stats, token_logprobs

log = logging.getLogger("rmbench_fast")


def lm_head_of(model) -> LMHead | None:
    """The model's LM head as an LMHead (weight, bias, and the logit transforms transformers models
    apply after it: Cohere's logit_scale, Granite's logits_scaling divisor, Gemma's final
    soft-capping), or None when it is not one the seam can express (then the model's own logits
    are used). Transforms it does not know are caught by check_head."""
    head = model.get_output_embeddings()
    if type(head) is not torch.nn.Linear:  # a subclass may do more in forward (Dory: a learned per-token scale)
        return None
    if base_model(model) is None:
        return None
    cfg = text_config(model.config)
    scale = getattr(cfg, "logit_scale", None)
    divisor = getattr(cfg, "logits_scaling", None)
    softcap = getattr(cfg, "final_logit_softcapping", None)
    weight, bias = head.weight, head.bias
    transforms = tuple(None if x is None else float(x) for x in (scale, softcap, divisor))
    if hasattr(weight, "to_local"):  # a tensor-parallel head (a DTensor): kept sharded (kernels.logprob_sharded)
        return _sharded_head(weight, bias, transforms)
    return LMHead(weight, bias, *transforms,
                  module=head)  # read through accelerate's hook when --device-map offloaded it (logprobs.ready)


def _sharded_head(weight, bias, transforms) -> LMHead:
    """This rank's rows of a vocabulary-sharded head (transformers' colwise plan: Shard(0) of [V, d])
    and where they start; a head replicated or sharded otherwise is gathered whole. Measured on this
    CPU with 2 gloo ranks, merging per-shard partials was never slower than gathering the head
    (benchmarks/logprob_sharded.py)."""
    import torch.distributed as dist
    from torch.distributed.tensor import Shard

    if list(weight.placements) != [Shard(0)]:
        full = bias.full_tensor() if hasattr(bias, "full_tensor") else bias
        return LMHead(weight.full_tensor(), full, *transforms)
    group = weight.device_mesh.get_group()
    local = weight.to_local()
    sizes = [0] * dist.get_world_size(group)
    dist.all_gather_object(sizes, int(local.shape[0]), group=group)
    start = sum(sizes[:dist.get_rank(group)])
    bias = bias.to_local() if hasattr(bias, "to_local") else bias
    return LMHead(local, bias, *transforms, vocab_start=start, vocab=int(weight.shape[0]), group=group)


def _label_positions(seqs, batch: Batch, device, offsets=None):
    """(rows, positions) of every scored token of the batch: position t predicts ids[t + 1], for
    the tokens ids[start:]; a row whose first `offsets[row]` tokens come from a cached prefix has
    its positions shifted by that much. The row index doubles as the token's segment."""
    rows, pos = [], []
    for row, i in enumerate(batch.indices):
        n, s = len(seqs[i].ids), seqs[i].start
        if n - s <= 0:
            continue
        off = 0 if offsets is None else int(offsets[row])
        rows.append(np.full(n - s, row))
        pos.append(np.arange(s - 1 - off, n - 1 - off))
    if not rows:  # no scored token in the batch
        return (torch.zeros(0, dtype=torch.long, device=device),) * 2
    rows = torch.as_tensor(np.concatenate(rows), device=device)
    return rows, torch.as_tensor(np.concatenate(pos), device=device)


@torch.inference_mode()
def batch_token_logprobs(model, seqs, batch: Batch, pad_id: int, device, impl: str, head: LMHead | None,
                         prefix=None):
    """(rows, log-probs) of every scored token of `batch`, fp32.

    impl: "triton" / "torch" pick the fused op's implementation (rmbench_fast.kernels) applied to
    `head`; with head None (impl "plain", or heads the fused op cannot express) the whole model
    runs for logits, reduced at the label positions only. prefix: a PrefixKV, when the batches
    are of suffixes after shared prompt prefixes (every scored position is in the suffix).
    A model placed over several devices (--device-map) returns its hidden states on its last
    block's device: the response rows move to where the head computes (ready), and the log-probs
    are where the head is."""
    causal = is_causal_decoder(model.config)
    inputs, offsets = batch_inputs(seqs, batch, pad_id, device, causal, prefix, base=head is not None)
    ids = inputs["input_ids"]
    rows, pos = _label_positions(seqs, batch, device, offsets)
    targets = ids[rows, pos + 1]
    if head is not None:
        hidden = forward(base_model(model), inputs)[0]
        picked = hidden[rows.to(hidden.device), pos.to(hidden.device)]
        with ready(head) as h:
            at = h.weight.device
            return rows.to(at), token_logprobs(picked.to(at), h, targets.to(at), impl)
    logits = forward(model, inputs).logits
    at = logits.device
    return rows.to(at), logits_logprobs(logits[rows.to(at), pos.to(at)], targets.to(at),
                                        "torch" if impl == "plain" else impl)


def batch_logprob_stats(model, seqs, batch: Batch, pad_id: int, device, impl: str, head: LMHead | None,
                        prefix=None) -> dict[str, np.ndarray]:
    """Per sequence of `batch`: sum, count and sum of squares of its scored tokens' log-probs."""
    rows, logps = batch_token_logprobs(model, seqs, batch, pad_id, device, impl, head, prefix)
    s, c, q = segment_stats(logps, rows, len(batch.indices))
    return {"total": s.cpu().numpy(), "count": c.cpu().numpy(), "sumsq": q.cpu().numpy()}


CHECK_TOKENS = 64  # scored tokens the self-check compares
# How far the fused op's log-probs may be from log_softmax of the same head's fp32 logits: the
# kernels' measured error against an fp64 reference (tests/test_kernels.py: 1e-4 in fp32, 5e-3 in
# half precision, TMA included), relative to the largest |log-prob| (at least 1).
KERNEL_TOL = {torch.float32: 1e-4, torch.bfloat16: 5e-3, torch.float16: 5e-3}


@torch.inference_mode()
def check_head(model, head: LMHead, seqs, i: int, pad_id: int, device, impl: str) -> str | None:
    """The first CHECK_TOKENS scored tokens of sequence i: None when the fused head gives what the
    model gives, else why not. Two checks on one shortened sequence (only [64, V] logits are made):
    - the head's logits (fp32 math from the model's weights) against the model's own logits, within
      the rounding of one model-dtype value (its machine epsilon of the largest |logit|): a logit
      transform the seam does not know (a 2% scale, say) shows here, as the log-probs it would move
      could hide inside a log-prob tolerance;
    - the fused op's log-probs against log_softmax of those logits, within the kernels' error."""
    e = seqs[i]
    cut = [Encoded(e.ids[:e.start + CHECK_TOKENS], e.start)]
    one = Batch(np.array([0]), len(cut[0].ids))
    inputs, _ = batch_inputs(cut, one, pad_id, device, is_causal_decoder(model.config))
    pos = torch.arange(cut[0].start - 1, len(cut[0].ids) - 1, device=device)
    targets = inputs["input_ids"][0, pos + 1]
    logits = forward(model, inputs).logits
    own = logits[0, pos.to(logits.device)].float()
    try:
        hidden = forward(base_model(model), inputs)[0]
        hidden = hidden[0, pos.to(hidden.device)]
        with ready(head) as h:  # a placed model: where its head computes (scorers.logprobs.ready)
            at = h.weight.device
            hidden, targets, own = hidden.to(at), targets.to(at), own.to(at)
            ours = head_logits(hidden, h)
            fused = token_logprobs(hidden, h, targets, impl)
    except OUT_OF_MEMORY:
        raise  # not a head that does not fit: the runner retries, and the check runs again
    except RuntimeError as e:  # e.g. a head that reads another hidden size than the base model's output
        return f"the fused head does not fit {type(model).__name__} ({one_line(e, 120)})"
    dtype = head.weight.dtype
    err = float((ours - own).abs().max())
    tol = max(torch.finfo(dtype).eps, 1e-5) * max(1.0, float(ours.abs().max()))
    if not err <= tol:
        return f"the fused head's logits differ from {type(model).__name__}'s own by {err:.2e} (tolerance {tol:.1e})"
    exact = ours.log_softmax(-1)[torch.arange(len(pos), device=ours.device), targets]
    err = float((fused - exact).abs().max())
    tol = KERNEL_TOL.get(dtype, 5e-3) * max(1.0, float(exact.abs().max()))
    if not err <= tol:
        return f"the fused log-prob op differs from its head's exact log-probs by {err:.2e} (tolerance {tol:.1e})"
    return None


class DPOScorer(Scorer):
    """Log-prob sums of the policy (and of the reference, when there is one)."""

    outputs = {"total": (), "count": (), "sumsq": ()}
    mode = "dpo"

    def __init__(self, pad_id: int, impl: str, ref_free: str | None, resolved: str | None = None):
        super().__init__(pad_id)
        self.impl = impl  # as asked: auto (per shape, the faster of triton and torch on CUDA), triton, torch, plain
        self.resolved = resolved or impl  # what it runs as on this device: triton, torch or plain
        self.ref_free = ref_free  # None: with a reference model
        self.family = "dpo" if ref_free is None else "dpo-ref-free"

    def roles(self, o):
        return [("model", o.model)] + ([("ref_model", o.ref_model)] if self.ref_free is None else [])

    def encode(self, samples, tokenizer, fmt, compat, tokenizer_path=None):
        """DPOInference.tokenize_row's sequences: each full text (a conversation: every turn) with the
        prompt's own rendering removed and tokenized after it; the scored tokens are what follows."""
        prompts = prompt_texts(samples, fmt)
        fulls = [[text(fmt, s, r) for r in responses(s)] for s in samples]
        return [e for per_prompt in encode_dpo(tokenizer, prompts, fulls, compat, **self.layout(samples))
                for e in per_prompt]

    def layout(self, samples) -> dict:
        """encode_dpo's groups and span marks for `samples`: RM-Bench's chosen/rejected pairs (None), or
        each row's responses as one group (tokenize_row's pair for a 1x1 row); --score-span's marks."""
        groups = None if self.benchmark == "rm-bench" else [[len(responses(s))] for s in samples]
        return {"groups": groups, "after": marks(samples, self.span)}

    def pass_key(self):
        # the same arrays with and without a reference
        return ("dpo-logprobs", self.impl, self.resolved, self.int8, *self.encode_key())

    def load(self, path, dtype, device, trust_remote_code, allow_pickle_weights=False):
        return load_model(path, "dpo", dtype, device, trust_remote_code, allow_pickle_weights, self.int8,
                          native=self.native)

    def vocab_limit(self, model):
        return min(model.get_input_embeddings().num_embeddings, model.get_output_embeddings().weight.shape[0])

    def batch_fn(self, model, device):
        head = lm_head_of(model) if self.impl != "plain" else None
        state = {"checked": head is None}
        if head is None and self.impl != "plain":
            log.warning("the LM head of %s is not a plain linear layer the fused log-prob op can express: "
                        "using the model's own logits", type(model).__name__)
            run_info = {"logprob_head": "model logits (the head is not a plain linear layer)"}
        else:
            run_info = {"logprob_head": "model logits" if head is None else "fused"}

        def run(seqs, batch, prefix=None):
            nonlocal head
            if not state["checked"]:  # once per pass: the fused head against the model's own logits
                scored = [i for i in batch.indices if len(seqs[i].ids) > seqs[i].start]
                why = check_head(model, head, seqs, int(scored[0]), self.pad_id, device, self.impl) if scored else None
                state["checked"] = bool(scored)
                if why is not None:
                    log.warning("%s: using the model's own logits", why)
                    head, run_info["logprob_head"] = None, f"model logits: {why}"
            return batch_logprob_stats(model, seqs, batch, self.pad_id, device, self.impl, head, prefix)

        run.info = run_info
        return run

    def rewards(self, passes):
        return dpo_rewards(passes["model"], passes.get("ref_model"), self.ref_free)

    def readout_limit(self, e):
        return max(0, e.start - 1)

    def describe(self):
        return {"scorer": self.family, "mode": "dpo", "ref_free": self.ref_free, "logprob_impl": self.resolved}


def dpo_rewards(policy: dict, ref: dict | None = None, ref_free: str | None = None) -> np.ndarray:
    """With a reference: sum log p_policy - sum log p_ref. Without: sum, avg (per token) or norm
    (minus the L2 norm of the token log-probs), as rewardbench's DPOInference."""
    if ref is not None:
        return policy["total"] - ref["total"]
    if ref_free == "sum":
        return policy["total"].copy()
    if ref_free == "avg":
        with np.errstate(invalid="ignore", divide="ignore"):
            return policy["total"] / policy["count"]
    if ref_free == "norm":
        return -np.sqrt(policy["sumsq"])
    raise ValueError(f"unknown reference-free reward {ref_free!r}")

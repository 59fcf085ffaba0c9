"""The scorer every adapter uses: the shape all of rewardbench's reward-model pipelines share,
with the knobs in which the families differ.

Each official pipeline tokenizes a batch of texts, pads it, calls the model and reads one number
per text. What differs between families, and is a setting here:
- how the texts become token ids (`encode`: the RewardBenchPipeline way, or a family's own;
  subclasses override it, and their class name keys the tokenized inputs in the result store);
- a doubled BOS (the template's and the tokenizer's): kept (most pipelines), its first token given
  attention 0 (RewardBenchPipeline: QRM, INF-ORM), or dropped (LDL, as it does for a lone sequence);
- whether the model gets an attention mask (WorldPM's pipeline passes input ids only);
- which output field holds the scores, and their sign (beaver's cost pipeline negates).
Where a score is read is the model's own business (its forward). Rows are right-padded with the
config's pad id and carry an attention mask, so a row's score never depends on its batch.
"""

from __future__ import annotations

import logging

import torch

from ..errors import UsageError, one_line
from ..inputs.batching import mask_first_tokens, pad_rows
from ..inputs.layout import full_texts
from ..inputs.tokenize import OFFICIAL_MAX_LENGTH, Encoded
from ..models.loading import load_model
from ..scorers.rm import RewardModelScorer, official_bos, official_pad_ids

log = logging.getLogger("rmbench_fast")
QUANTIZED = ("a quantized entry: run_rm.py loads it 8-bit (bitsandbytes) unless a Llama-3 spelling, --not_quantized or "
             "bfloat16; here --dtype, or the same 8-bit with --compat official on CUDA")


def read_output(out, field: str | None):
    """The scores in a model's output: `field` of it (a ModelOutput or dict); the output itself
    when it is a tensor; otherwise, as WorldPM's pipeline reads it, its first value."""
    if isinstance(out, torch.Tensor):
        return out
    if field is not None:
        return out[field] if isinstance(out, dict) else getattr(out, field)
    return next(iter(out.values())) if isinstance(out, dict) else out[0]


def encode_plain(tokenizer, texts) -> list[list[int]]:
    """Token ids without the tokenizer's special tokens (`add_special_tokens=False`), as the
    InternLM and WorldPM pipelines and apply_chat_template(tokenize=True) encode."""
    return [list(x) for x in tokenizer(list(texts), add_special_tokens=False, return_attention_mask=False,
                                       return_token_type_ids=False)["input_ids"]]


class AdapterScorer(RewardModelScorer):
    """A reward model scored by an adapter (see the module docstring for the knobs)."""

    def __init__(self, adapter, pad_id: int, tokenizer_pad_id: int | None, *, loader, bos_id: int | None = None,
                 bos: str = "keep", mask: bool = True, field: str | None = None, sign: float = 1.0,
                 quantized: bool = False, dtype=None, warnings: tuple[str, ...] = ()):
        super().__init__(pad_id, 0, 1, bos_id, tokenizer_pad_id)
        self.family = adapter.name
        self.family_module = adapter.module  # the family's loader and read-out
        self.adapter_notes = tuple(adapter.notes)
        self.loader = loader  # (scorer, path, dtype, device, trust_remote_code, allow_pickle_weights) -> model
        self.bos = bos  # keep | mask | drop: what happens to a doubled BOS
        self.mask = mask
        self.field = field
        self.sign = sign
        self.official_quantized = quantized
        self.official_dtype = dtype
        self.warnings = tuple(warnings)
        for w in self.warnings:
            log.warning("%s: %s", self.family, w)

    def code_modules(self):
        return (*super().code_modules(), self.family_module)

    def pass_key(self):
        return ("adapter", self.family, self.pad_id, self.bos_id, self.bos, self.mask, self.field, self.sign,
                self.int8, *self.extra_key(), *self.encode_key())

    def extra_key(self) -> tuple:
        return ()

    def load(self, path, dtype, device, trust_remote_code, allow_pickle_weights=False):
        model = self.loader(self, path, dtype, device, trust_remote_code, allow_pickle_weights)
        model.config.pad_token_id = self.pad_id  # run_rm.py's setup (scorers.rm.official_pad_ids)
        return model

    def batch_fn(self, model, device):
        @torch.inference_mode()
        def run(seqs, batch, prefix=None):
            assert prefix is None, "adapters read no shared prefixes (readout_limit 0)"
            rows = self.rows(seqs, batch)
            ids, mask = pad_rows(rows, max(map(len, rows)), self.pad_id, device)
            if self.bos == "mask":
                mask_first_tokens(mask, [self.double_bos(r) for r in rows])
            try:
                out = model(input_ids=ids, attention_mask=mask) if self.mask else model(input_ids=ids)
            except REMOTE_CODE_ERRORS as e:
                if not type(model).__module__.startswith("transformers_modules"):
                    raise  # our own classes: a bug to see whole
                raise remote_code_error(type(model).__name__, e) from None
            scores = read_output(out, self.field).float().reshape(len(rows), -1)
            if scores.shape[1] != 1:
                raise UsageError(f"adapter {self.family}: the model gave {scores.shape[1]} values per sequence, "
                                 "not one score")
            return {"scores": (self.sign * scores[:, 0]).double().cpu().numpy()}

        return run

    def rows(self, seqs, batch) -> list[list[int]]:
        """The token ids the model sees for a batch's sequences (LDL: a doubled BOS dropped)."""
        rows = [seqs[i].ids for i in batch.indices]
        return [r[1:] if self.double_bos(r) else r for r in rows] if self.bos == "drop" else rows

    def readout_limit(self, e):
        return 0  # models with their own forward take no prefix cache: no shared prefixes

    def masks_attention(self, seqs, indices, causal):
        return self.mask  # every batch gets the padding mask (their own forwards may expand it)

    def notes(self, seqs):
        doubled = int(sum(self.double_bos(e.ids) for e in seqs))
        how = {"keep": "kept, as the official pipeline keeps it",
               "mask": "first BOS given attention 0, as RewardBenchPipeline does",
               "drop": "first BOS dropped, as the official pipeline does for a sequence alone"}[self.bos]
        out = {"pad_ids": {"tokenizer": self.tokenizer_pad_id, "config": self.pad_id},
               "double_bos_sequences": doubled, "double_bos": how}
        out["adapter_notes"] = list(self.adapter_notes)
        if self.warnings:
            out["adapter_warnings"] = list(self.warnings)
        if self.sign < 0:
            out["scores"] = "negated model output, as the official pipeline does"
        return out

    def describe(self):
        return {"scorer": self.family, "mode": "rm", "adapter": self.family, "ref_free": None, "logprob_impl": None}


class PlainTextScorer(AdapterScorer):
    """Texts encoded without special tokens; compat truncation keeps the last 2048 tokens."""

    truncate = True

    def encode(self, samples, tokenizer, fmt, compat, tokenizer_path=None):
        out = []
        for ids in encode_plain(tokenizer, full_texts(self.spanned(samples), fmt)):
            cut = max(0, len(ids) - OFFICIAL_MAX_LENGTH) if compat and self.truncate else 0
            out.append(Encoded(ids[cut:], 0, cut))
        return out


def scorer_for(adapter, o, config, tokenizer, loader, cls=AdapterScorer, **kw) -> AdapterScorer:
    """An adapter's scorer with run_rm.py's pad ids (a tokenizer without a pad pads with EOS; a
    config without a pad id takes the tokenizer's) and the tokenizer's BOS."""
    if o.label_index is not None:
        raise UsageError(f"--label-index is for plain sequence classifiers; {o.model} is scored by the {adapter.name} "
                         "adapter, one score per response")
    tok_pad, cfg_pad = official_pad_ids(tokenizer, config)
    if cfg_pad is None:
        raise UsageError(f"tokenizer of {o.model}: has neither a pad nor an EOS token to pad with")
    return cls(adapter, cfg_pad, tok_pad, loader=loader, bos_id=official_bos(tokenizer), **kw)


def require_remote_code(o, config, adapter_name: str, auto_class: str) -> str:
    """The model's own code (config.json auto_map[auto_class]); a UsageError naming the flag when
    --trust-remote-code is missing, or when the folder does not ship that code."""
    target = (getattr(config, "auto_map", None) or {}).get(auto_class)
    if target is None:
        raise UsageError(f"model {o.model}: the {adapter_name} adapter runs the model's own code, but its config.json "
                         f"has no auto_map entry for {auto_class}")
    if not o.trust_remote_code:
        raise UsageError(f"model {o.model}: the {adapter_name} adapter runs the model's own code ({target}, from its "
                         "folder): pass --trust-remote-code if you trust it")
    return target


def load_own(cls, scorer, path, dtype, device, trust_remote_code, allow_pickle_weights):
    """One of our re-implemented classes, with the strict weight check (models.load_model)."""
    return load_model(path, "rm", dtype, device, False, allow_pickle_weights, scorer.int8, model_class=cls)


def load_remote(auto_class: str, scorer, path, dtype, device, trust_remote_code, allow_pickle_weights):
    """The model's own class through transformers' `auto_class` (e.g. AutoModel) and its auto_map."""
    import transformers

    if not trust_remote_code:
        raise UsageError(f"model {path}: the {scorer.family} adapter runs the model's own code: "
                         "pass --trust-remote-code")
    try:
        return load_model(path, "rm", dtype, device, True, allow_pickle_weights, scorer.int8,
                          model_class=getattr(transformers, auto_class))
    except REMOTE_CODE_ERRORS as e:
        raise remote_code_error(path, e) from None


# what published reward-model code written against transformers 4 raises under transformers 5: no
# post_init() (AttributeError: all_tied_weights_keys), imports of names 5 removed, DynamicCache
# methods 5 dropped
REMOTE_CODE_ERRORS = (AttributeError, ImportError, NameError, TypeError)


def remote_code_error(where: str, e: Exception) -> Exception:
    """Under transformers 5, a UsageError that says the model's own code needs transformers 4 (the
    official flow's 4.51) and how to get it; under 4, the error itself."""
    import transformers

    from ..models.versions import transformers_version

    if transformers_version() < (5,):
        return e
    return UsageError(f"model {where}: its own code does not run under transformers {transformers.__version__} "
                      f"({one_line(e, 200)}); it was written for transformers 4, which the official flow uses "
                      "(4.51): score it in an environment with pip install 'transformers>=4.51,<5'")

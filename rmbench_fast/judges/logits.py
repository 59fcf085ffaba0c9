"""Logit verdicts (`judge --verdict logits`): no decoding. Each ask's prompt is prefilled up to the
protocol's forced answer prefix (rmbench: "\\boxed{"), and the verdict is read from the next
position's logits of the two verdict tokens (scorers.verdict: two rows of the LM head). Per order,
the chosen answer's probability over the two; a pair is won (cell 1, else 0) when its mean over
the orders asked exceeds 0.5. On other benchmarks: judges.bench_logits, through the same pass.

The asks go through the scalar engine as sequences (logit_pass): length-bucketed batches, the
result store (a pass is keyed by the weights and every prompt's tokens), Ray, and --share-prefix,
where the asks of one prompt (an RM-Bench sample, another benchmark's row) share the template and
question.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ..engine.options import DEFAULT_MAX_TOKENS, ScoreOptions
from ..engine.prepare import Prepared, run_target
from ..engine.score import model_pass
from ..errors import UsageError
from ..inputs.batching import make_batches
from ..inputs.prefix import default_budget_bytes, kv_bytes_per_token, plan_batches, plan_prefixes
from ..inputs.tokenize import Encoded
from ..models.kinds import is_causal_decoder
from ..models.loading import load_config, load_tokenizer
from ..models.precision import choose as choose_precision
from ..results.files import write_cell_results
from ..results.intervals import bootstrap
from ..results.metrics import summarize_cells
from ..scorers.verdict import VerdictScorer, verdict_probs
from ..store.atomic import atomic_open, atomic_write_json
from ..store.fingerprints import sha256_text, tokenizer_fingerprint
from . import plan as planning
from . import validity
from .options import read_template, safe_url
from .requests import Sampling


def score_options(o) -> ScoreOptions:
    """The engine's options for a judge run's logit pass."""
    return ScoreOptions(model=o.model, data=o.data, dtype=o.dtype, device=o.device,
                        max_tokens_per_batch=o.max_tokens_per_batch, max_batch_size=o.max_batch_size,
                        trust_remote_code=o.trust_remote_code, share_prefix=o.share_prefix, cache=o.cache,
                        cache_dir=o.cache_dir, engine=o.engine, ray_address=o.ray_address,
                        num_workers=o.num_workers, gpus_per_worker=o.gpus_per_worker,
                        allow_pickle_weights=o.allow_pickle_weights, progress=o.progress, mode="dpo")


def verdict_tokens(tokenizer, text: str, letters) -> tuple[int, int]:
    """The token ids the two verdict letters get right after `text` (a prompt ending in the answer
    prefix); each letter must be one token that leaves the prompt's tokens as they are."""
    base = tokenizer(text, add_special_tokens=False)["input_ids"]
    out = []
    for letter in letters:
        ids = tokenizer(text + letter, add_special_tokens=False)["input_ids"]
        if ids[:len(base)] != base or len(ids) != len(base) + 1:
            raise UsageError(f"--verdict logits: after the answer prefix, {letter!r} is not one token of its own for "
                             "this tokenizer (it merges with the prefix); use --verdict text")
        out.append(ids[-1])
    if out[0] == out[1]:
        raise UsageError(f"--verdict logits: the verdict letters {letters} are the same token")
    return out[0], out[1]


@dataclass
class LogitJudge:
    """The judge's tokenizer and chat template, and the key its prompts are named by."""
    tokenizer: object
    template: str | None
    tok_fp: str | None
    key: str
    t0: float  # when tokenizing began (run.json's pass counts it)

    def key_of(self, messages, sampling) -> str:
        """An ask's request key (what plan.plan and bench_plan.plan name requests by)."""
        return sha256_text("judge", self.key, [dict(x) for x in messages], sampling.as_dict())


@dataclass
class LogitPass:
    logits: np.ndarray  # (asks, 2): the two verdict tokens' logits, in ask order
    p_a: np.ndarray  # the first verdict letter's (A's) probability over the two
    record: dict  # run.json's fields of the pass: verdict_tokens, judge, pass, tokens, device, dtype, tokens_per_s


def load_judge(o, protocol, store) -> LogitJudge:
    """The judge's tokenizer and template; UsageError when the protocol has no answer prefix or the
    tokenizer no chat template."""
    if not protocol.answer_prefix:
        raise UsageError(f"--verdict logits: protocol {protocol.name} has no answer prefix to prefill (the text "
                         "an answer starts with just before its verdict); use --verdict text")
    tokenizer = load_tokenizer(o.model, o.trust_remote_code)
    template = read_template(o)
    if template is None and not getattr(tokenizer, "chat_template", None):
        raise UsageError(f"judge model {o.model}: its tokenizer has no chat template; pass --chat-template FILE")
    t0 = time.perf_counter()
    tok_fp = tokenizer_fingerprint(o.model, store.hashes)
    key = sha256_text("judge-logits", tok_fp or o.model, template, protocol.answer_prefix)
    return LogitJudge(tokenizer, template, tok_fp, key, t0)


def group_sizes(asks) -> list[int]:
    """How many consecutive asks each prompt has (asks are planned prompt by prompt): --share-prefix's
    groups (RM-Bench: 18 a sample, 9 with --orders random; another benchmark: its row's comparisons)."""
    sizes, last = [], None
    for a in asks:
        if a.prompt != last:
            sizes.append(0)
            last = a.prompt
        sizes[-1] += 1
    return sizes


def logit_pass(o, protocol, judge: LogitJudge, asks, samples, names, store) -> LogitPass:
    """Every ask's prompt (its messages through the chat template, then the answer prefix) through the
    scalar engine once; names(i): how errors name ask i."""
    so = score_options(o)
    tokenizer = judge.tokenizer
    texts = [tokenizer.apply_chat_template([dict(m) for m in a.request.messages], chat_template=judge.template,
                                           tokenize=False, add_generation_prompt=True) + protocol.answer_prefix
             for a in asks]
    tokens = verdict_tokens(tokenizer, texts[0], protocol.verdict_strings)
    seqs = [Encoded(ids, len(ids)) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]
    tokenize_s = time.perf_counter() - judge.t0
    target, _ = run_target(so)
    config = load_config(o.model, o.trust_remote_code, store)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    scorer = VerdictScorer(pad, tokens)
    precision = choose_precision(so, target.device, "dpo", False)
    lengths = np.array([len(e.ids) for e in seqs], dtype=np.int64)
    max_tokens = o.max_tokens_per_batch or DEFAULT_MAX_TOKENS.get(target.device.type, DEFAULT_MAX_TOKENS["cuda"])
    prefix_plan, batch_lengths = None, lengths
    if o.share_prefix and is_causal_decoder(config):
        limits = np.array([scorer.readout_limit(e) for e in seqs], dtype=np.int64)
        prefix_plan = plan_prefixes([e.ids for e in seqs], limits, kv_bytes_per_token(config, precision.dtype),
                                    default_budget_bytes(target.memory, None), group_size=group_sizes(asks))
        prefix_plan = prefix_plan if prefix_plan.saved_tokens() > 0 else None
    if prefix_plan is not None:
        batch_lengths = lengths - prefix_plan.prefix
        batches = plan_batches(lengths, prefix_plan, max_tokens, o.max_batch_size)
    else:
        batches = make_batches(lengths, max_tokens, o.max_batch_size)
    tok_key = sha256_text("judge-logits-inputs", judge.key, [e.ids for e in seqs], tokens)
    prep = Prepared(samples, scorer, config, tokenizer, None, seqs, lengths, batches, max_tokens, prefix_plan,
                    batch_lengths, target, precision, tok_key, tokenize_s, False, names=names)
    result = model_pass(prep, so, o.model, "model", store)
    logits2 = result.arrays["verdict_logits"]
    info = result.info
    record = {
        "verdict_tokens": {protocol.verdict_strings[0]: tokens[0], protocol.verdict_strings[1]: tokens[1]},
        "judge": {"backend": "hf", "weights": info.get("sha256"), "tokenizer": judge.tok_fp}, "pass": info,
        "tokens": {"prompt": int(lengths.sum()),
                   "shared_prefix_saved": prefix_plan.saved_tokens() if prefix_plan else 0},
        "device": str(target.device), "dtype": str(precision.dtype).removeprefix("torch."),
        "tokens_per_s": float(lengths.sum()) / info["seconds"] if not info.get("cached") and info["seconds"] else None,
    }
    return LogitPass(logits2, verdict_probs(logits2), record)


def winners(p_a) -> list[str]:
    """Each ask's verdict as a letter: the likelier one ("tie" at exactly one half)."""
    return ["A" if p > 0.5 else "B" if p < 0.5 else "tie" for p in p_a]


def _ask_name(samples, a) -> str:
    order = "chosen first" if a.chosen_first else "rejected first"
    return f"sample {samples[a.prompt].name}, chosen {a.i} against rejected {a.j}, {order}"


def judge_logits(o, protocol, samples, store, t_start):
    """(cells, summary, run.json's dict), results written when o.output is set."""
    judge = load_judge(o, protocol, store)
    asks = planning.plan(samples, protocol, judge.key_of, o.orders, o.seed, 1, Sampling())
    lp = logit_pass(o, protocol, judge, asks, samples, lambda i: _ask_name(samples, asks[i]), store)
    p_chosen = np.where([a.chosen_first for a in asks], lp.p_a, 1.0 - lp.p_a)
    mean = planning.cells(asks, p_chosen, len(samples))  # the chosen answer's mean probability per pair
    cells = (mean > 0.5).astype(np.float64)
    domains = [s.domain for s in samples]
    summary = summarize_cells(cells, domains, [s.subset for s in samples], [s.name for s in samples])
    # a logit verdict is never missing: every rate 0, in summary.json as for text verdicts
    valid = validity.rates(asks, [None] * len(asks), domains, list(summary["domains"]))
    summary.update(valid)
    summary["intervals"] = bootstrap(cells, domains, o.bootstrap)  # 95% intervals over prompts (None: --bootstrap 0)
    record = lp.record
    run = {
        "options": {**asdict(o), "base_url": safe_url(o.base_url)}, "kind": "judge", "verdict": "logits",
        "protocol": protocol.describe(), "verdict_tokens": record["verdict_tokens"], "judge": record["judge"],
        "n_prompts": len(samples), "asks": len(asks), "pass": record["pass"],
        **planning.stats(asks, winners(lp.p_a)), **valid, "tokens": record["tokens"], "device": record["device"],
        "dtype": record["dtype"], "tokens_per_s": record["tokens_per_s"],
        "wall_s": time.perf_counter() - t_start, "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    if o.output:
        write_cell_results(o.output, samples, cells, summary)
        with atomic_open(Path(o.output) / "judgements.jsonl", "w") as f:
            for a, x, p in zip(asks, lp.logits, p_chosen):
                f.write(json.dumps({"prompt": samples[a.prompt].name, "domain": samples[a.prompt].domain,
                                    "chosen": a.i, "rejected": a.j,
                                    "order": "chosen_first" if a.chosen_first else "rejected_first",
                                    "messages": list(a.request.messages), "verdict_logits": x.tolist(),
                                    "p_chosen": float(p)}, ensure_ascii=False) + "\n")
        atomic_write_json(Path(o.output) / "run.json", run)
    return cells, summary, run

"""A generative judge on RM-Bench (other benchmarks: judges.bench_run; their logit verdicts:
judges.bench_logits): data -> asks (judges.plan) ->
generations (a backend, through the journal: judges.session) -> verdicts (the protocol's parser) ->
cells -> the summary -> results, judgements.jsonl and run.json."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ..inputs.data import load_dataset
from ..results.files import write_cell_results
from ..results.intervals import bootstrap
from ..results.metrics import summarize_cells
from ..store.atomic import atomic_open, atomic_write_json
from ..store.entries import Store
from ..store.paths import store_root
from . import plan as planning
from . import validity
from .journal import Journal
from .options import JudgeOptions, check, invalid_rule, safe_url
from .protocols import get_protocol
from .requests import Sampling
from .session import JUDGED_OPTIONS, REPARSE_OPTIONS, hf_identity, make_backend  # noqa: F401  (imported from here too)
from .session import _tokens, check_output, complete, key_maker, setup_backend

log = logging.getLogger("rmbench_fast")


@dataclass
class JudgeRun:
    samples: list
    cells: np.ndarray
    summary: dict
    run: dict


def judge(o: JudgeOptions):
    """Judge every (chosen_i, rejected_j) pair of `o.data` with `o.model`; write results when
    `o.output` is set. Finished generations come from the journal in the result store. Another
    benchmark's data (--benchmark, or detected from the data): judges.bench_run (a BenchJudgeRun), with
    --verdict logits judges.bench_logits (one too)."""
    t_start = time.perf_counter()
    check(o)
    from .bench_logits import check as check_logits, judge_bench_logits
    from .bench_run import benchmark_name, judge_benchmark

    check_logits(o)  # rb2-4way / rb2-ratings with --verdict logits: one line, whatever the benchmark
    name = benchmark_name(o)
    if name != "rm-bench":
        return (judge_bench_logits if o.verdict == "logits" else judge_benchmark)(o, name, t_start)
    protocol = get_protocol(o.protocol, o.template, o.verdict_regex)
    tie = protocol.tie if o.tie is None else o.tie
    invalid = invalid_rule(o.invalid, protocol.invalid)
    if o.output:
        check_output(o)
    samples = load_dataset(o.data, domains=o.domains, limit=o.limit)
    store = Store(store_root(o.cache_dir) if o.cache else None)
    try:
        if o.verdict == "logits":
            from .logits import judge_logits

            cells, summary, run = judge_logits(o, protocol, samples, store, t_start)
            return JudgeRun(samples, cells, summary, run)
        return _judge_text(o, protocol, samples, store, tie, invalid, t_start)
    finally:
        store.close()


def _judge_text(o, protocol, samples, store, tie, invalid, t_start) -> JudgeRun:
    backend, identity, root = setup_backend(o, store)
    key, key_of = key_maker(identity, backend)
    asks = planning.plan(samples, protocol, key_of, o.orders, o.seed, o.samples,
                         Sampling(o.temperature, o.top_p, o.max_tokens))
    requests = planning.unique_requests(asks)
    journal = Journal(root, key)
    todo, gen, failed = complete(o, requests, journal, backend)
    winners, values, verdicts, causes = [], np.zeros(len(asks)), [], []
    for n, a in enumerate(asks):
        c = journal.done.get(a.request.key)
        v = protocol.parse(c.text if c is not None else None)
        verdicts.append(v)
        winners.append(v.winner)
        causes.append(validity.cause(c, v))
        values[n] = planning.value(a, v.winner, tie, invalid, o.seed)
    cells = planning.cells(asks, values, len(samples))
    domains = [s.domain for s in samples]
    summary = summarize_cells(cells, domains, [s.subset for s in samples], [s.name for s in samples])
    valid = validity.rates(asks, causes, domains, list(summary["domains"]))
    validity.check_max_invalid(valid, o.max_invalid)  # before anything is written
    line = validity.warning(valid, invalid)
    if line:
        log.warning("%s", line)
    summary.update(valid)
    summary["intervals"] = bootstrap(cells, domains, o.bootstrap)  # 95% intervals over prompts (None: --bootstrap 0)
    chars, reusable = planning.shared_prefix_chars(requests)
    run = {
        "options": {**asdict(o), "base_url": safe_url(o.base_url)}, "kind": "judge", "protocol": protocol.describe(),
        "tie": tie, "invalid_rule": invalid, "judge": identity, "judge_key": key, "n_prompts": len(samples),
        "asks": len(asks), "requests": len(requests), "from_store": len(requests) - len(todo),
        "failed_requests": len(failed),  # counted as answers without a verdict (--failed-as-invalid)
        "journal": {"path": str(journal.path) if journal.path else None, "cut_lines_skipped": journal.cut_lines},
        "generated": gen, **planning.stats(asks, winners), **valid,
        "tokens": _tokens(journal, requests),
        "prefix_cache": {"prompt_chars": chars, "reusable_prompt_chars": reusable,
                         # estimated: the prompt tokens the backend counted times the reusable characters' share
                         "reusable_prompt_tokens_estimate": _reusable_tokens(journal, requests, chars, reusable)},
        "wall_s": time.perf_counter() - t_start, "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    if o.output:
        write_cell_results(o.output, samples, cells, summary)
        write_judgements(Path(o.output) / "judgements.jsonl", samples, asks, journal, verdicts, values)
        atomic_write_json(Path(o.output) / "run.json", run)
    return JudgeRun(samples, cells, summary, run)


def _reusable_tokens(journal, requests, chars, reusable) -> int | None:
    """The prompt tokens a prefix cache could reuse, estimated from the reusable characters and the
    prompt tokens the backend counted (None when it counted none)."""
    prompt = _tokens(journal, requests)["prompt"]
    return round(prompt * reusable / chars) if prompt and chars else None


def write_judgements(path: Path, samples, asks, journal: Journal, verdicts, values) -> None:
    """Every ask of the run: where it belongs, what was sent, what came back and what it counted as."""
    with atomic_open(path, "w") as f:
        for a, v, x in zip(asks, verdicts, values):
            c = journal.done.get(a.request.key)
            rec = {"prompt": samples[a.prompt].name, "domain": samples[a.prompt].domain, "chosen": a.i,
                   "rejected": a.j, "order": "chosen_first" if a.chosen_first else "rejected_first",
                   "sample": a.sample, "key": a.request.key, "messages": list(a.request.messages),
                   "sampling": a.request.sampling.as_dict(), **(c.as_dict() if c is not None else {"text": None}),
                   "verdict": v.winner, "strength": v.strength, "why": v.why, "value": float(x)}
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")

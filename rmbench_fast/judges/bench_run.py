"""A generative judge on another benchmark than RM-Bench (`judge --benchmark reward-bench|reward-bench-2|
pairs`, or detected from the data as `score` detects it): rows (engine.benchmarks.load_samples) -> asks
(judges.bench_plan) -> generations (the backend, through the journal, as RM-Bench's judge runs) ->
verdicts -> each row's result -> the benchmark's numbers (judges.bench_scores, whose docstring says how
pairwise verdicts feed each benchmark) -> results.jsonl, summary.json, judgements.jsonl and run.json.

--domains names subsets (engine.benchmarks.load_samples), --limit takes the first N rows of each. A
conversational prompt or response (reward-bench's prior sets, TRL conversational pairs) is shown as
judges.conversation says; run.json counts the rows of each form, and one line on stderr says how many
are shown as a transcript. --samples K: judges.bench_scores says how the K samples make the numbers.
Not here (one line each when asked): --template, --verdict-regex, --tie and --invalid with the rb2
protocols (their rules are fixed by run_generative_v2.py).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from ..errors import UsageError
from ..store.atomic import atomic_open, atomic_write_json, atomic_write_text
from ..store.entries import Store
from ..store.paths import store_root
from . import bench_plan, conversation, plan as planning, rb2, validity
from .journal import Journal
from .options import JudgeOptions, invalid_rule, safe_url
from .requests import Sampling
from .session import _tokens, check_output, complete, key_maker, setup_backend

log = logging.getLogger("rmbench_fast")


@dataclass
class BenchJudgeRun:
    samples: list  # engine.benchmarks.TaskSample
    results: list  # each row's result (None: a Ties row, scored with its subset)
    summary: dict
    run: dict


def benchmark_name(o: JudgeOptions) -> str:
    """--benchmark, else the benchmark the data names (engine.benchmarks.benchmark_of: one line on stderr
    when it is not RM-Bench); the options that benchmark's judge takes."""
    from ..engine.benchmarks import benchmark_of
    from ..engine.options import BENCHMARK_NAMES, RM_BENCH

    if o.benchmark is not None and o.benchmark not in BENCHMARK_NAMES:
        raise UsageError(f"--benchmark {o.benchmark}: expected one of {', '.join(BENCHMARK_NAMES)}")
    name = benchmark_of(SimpleNamespace(benchmark=o.benchmark, data=o.data))
    if o.protocol in rb2.PROTOCOLS and name != "reward-bench-2":
        raise UsageError(f"--protocol {o.protocol}: RewardBench 2's own protocol; --data {o.data} is {name} "
                         "(give --benchmark reward-bench-2, or a pairwise protocol)")
    if name == RM_BENCH:
        return name
    if o.protocol in rb2.PROTOCOLS:
        given = [f for f, v in (("--template", o.template), ("--verdict-regex", o.verdict_regex), ("--tie", o.tie),
                                ("--invalid", o.invalid)) if v is not None]
        if given:
            raise UsageError(f"--protocol {o.protocol}: {', '.join(given)} not taken (its prompt, parser and "
                             "0.25 for no verdict are run_generative_v2.py's)")
    return name


def _protocol(o: JudgeOptions):
    """(the pairwise Protocol or None, its description, tie, invalid rule)."""
    if o.protocol in rb2.PROTOCOLS:
        return None, {"name": o.protocol, "notes": rb2.NOTES[o.protocol], "parse_error": rb2.PARSE_ERROR}, None, \
            (rb2.PARSE_ERROR if o.protocol == rb2.FOUR_WAY else "a rating of -1")
    from .protocols import get_protocol

    protocol = get_protocol(o.protocol, o.template, o.verdict_regex)
    tie = protocol.tie if o.tie is None else o.tie
    return protocol, protocol.describe(), tie, invalid_rule(o.invalid, protocol.invalid)


def load_rows(o: JudgeOptions, name: str, protocol) -> tuple[list, dict]:
    """The benchmark's rows (engine.benchmarks.TaskSample) and how many take each form (judges.conversation),
    with one line on stderr when some are shown as a transcript. protocol: the pairwise Protocol (None: rb2's)."""
    from ..engine.benchmarks import load_samples

    samples = load_samples(SimpleNamespace(data=o.data, limit=o.limit, tie_credit=0.0, domains=o.domains), name)
    forms = conversation.count_forms(samples, protocol)
    if forms[conversation.TRANSCRIPT]:
        long = sum(_messages(s) > 4 for s in samples) if name == "reward-bench" else 0
        log.warning("%d conversational rows are shown to the judge as a transcript of every turn (### User: ...): "
                    "--protocol %s has no prompt for their turns%s (docs/judging-benchmarks.md)",
                    forms[conversation.TRANSCRIPT], o.protocol,
                    f"; {long} of them have more than four messages, rows rewardbench 0.1.4's run_generative.py "
                    "leaves out" if long else "")
    return samples, forms


def _messages(s) -> int:
    """A row's messages as rewardbench's run_generative.py counts them: the prompt's turns, then the chosen
    response's (a string: one)."""
    return sum(1 if isinstance(x, str) else len(x) for x in (s.prompt, s.chosen[0]))


def judge_benchmark(o: JudgeOptions, name: str, t_start: float) -> BenchJudgeRun:
    from ..tasks import get

    protocol, described, tie, invalid = _protocol(o)
    if o.output:
        check_output(o)
    bench = get(name)
    samples, forms = load_rows(o, name, protocol)
    unused = bench_plan.unused_responses(samples, o.protocol)
    if unused:
        log.warning("--protocol rb2-4way: %d responses past each row's first chosen and three rejected are not shown "
                    "(as run_generative_v2.py shows only those four)", unused)
    store = Store(store_root(o.cache_dir) if o.cache else None)
    try:
        backend, identity, root = setup_backend(o, store)
        key, key_of = key_maker(identity, backend)
        asks = bench_plan.plan(samples, bench, protocol, o.protocol, key_of, o.orders, o.seed, o.samples,
                               Sampling(o.temperature, o.top_p, o.max_tokens))
        requests = planning.unique_requests(asks)
        journal = Journal(root, key)
        todo, gen, failed = complete(o, requests, journal, backend)
    finally:
        store.close()
    verdicts, values, causes = _read(o, protocol, asks, journal, tie, invalid)
    from .bench_scores import summarize

    summary, per, results, scores = summarize(name, samples, asks, values, o.bootstrap)
    subsets = [s.subset for s in samples]
    valid = validity.rates(asks, causes, subsets, list(summary["subsets"]))
    validity.check_max_invalid(valid, o.max_invalid)  # before anything is written
    line = validity.warning(valid, invalid)
    if line:
        log.warning("%s", line)
    summary.update({"n_rows": len(samples), "rules": bench.official, "judge_protocol": o.protocol, **valid})
    if name == "reward-bench-2" and o.protocol not in rb2.PROTOCOLS:
        summary["official"] = False  # RewardBench 2's official judges are rb2-4way and rb2-ratings
    run = {
        "options": {**asdict(o), "base_url": safe_url(o.base_url)}, "kind": "judge", "benchmark": name,
        "protocol": described, "tie": tie, "invalid_rule": invalid, "judge": identity, "judge_key": key,
        "n_prompts": len(samples), "asks": len(asks), "requests": len(requests),
        "from_store": len(requests) - len(todo), "failed_requests": len(failed), "unused_responses": unused,
        "conversations": forms,
        "journal": {"path": str(journal.path) if journal.path else None, "cut_lines_skipped": journal.cut_lines},
        "generated": gen, **bench_plan.stats(asks, [v.winner for v in verdicts]), **valid,
        "tokens": _tokens(journal, requests),
        "wall_s": time.perf_counter() - t_start, "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    if o.output:
        write_run(Path(o.output), samples, (per, results, scores), summary, run,
                  lambda path: write_judgements(path, samples, asks, journal, verdicts, values))
    return BenchJudgeRun(samples, results, summary, run)


def _read(o, protocol, asks, journal, tie, invalid):
    """Each ask's verdict, value and invalid cause, from the journal's text."""
    verdicts, values, causes = [], np.zeros(len(asks)), []
    for n, a in enumerate(asks):
        c = journal.done.get(a.request.key)
        text = c.text if c is not None else None
        if a.kind == bench_plan.PAIR:
            v = protocol.parse(text)
            values[n] = planning.value(a, v.winner, tie, invalid, o.seed)
        elif a.kind == bench_plan.FOUR_WAY:
            v = rb2.parse_four_way(text)
            values[n] = rb2.four_way_value(v, a.slot)
        else:
            v = rb2.parse_rating(text)
            values[n] = rb2.rating(v)
        verdicts.append(v)
        causes.append(validity.cause(c, v))
    return verdicts, values, causes


def _sample_record(x: dict) -> dict:
    """One sample of rb2's asks: its 4-way value or ratings (a response each) and its Ties scores."""
    rec = {}
    if "four_way" in x:
        rec["four_way"] = x["four_way"]
    if "ratings" in x:
        rec["ratings"] = [x["ratings"][k] for k in sorted(x["ratings"])]
    if x.get("ties_scores") is not None:
        rec["ties_scores"] = x["ties_scores"]
    return rec


def write_run(out: Path, samples, rows: tuple, summary: dict, run: dict, judgements) -> None:
    """A benchmark judge run's files under `out`: results.jsonl (rows: summarize's per-row values, results
    and Ties scores), summary.json, judgements.jsonl (judgements(path) writes it) and run.json, last."""
    out.mkdir(parents=True, exist_ok=True)
    write_results(out / "results.jsonl", samples, *rows)
    atomic_write_json(out / "summary.json", summary)
    judgements(out / "judgements.jsonl")
    atomic_write_json(out / "run.json", run)


def write_results(path: Path, samples, per, results, scores) -> None:
    """results.jsonl: every row's id, subset, what its asks gave (comparisons' credits: the mean over
    orders and samples; the 4-way value, the ratings), its Ties scores and its result: each number of
    the summary recomputes from them. rb2's asks with --samples K > 1: "samples", one record a sample
    (its values, Ties scores and result), and "result" their results' mean (Ties: None)."""
    lines = []
    for s, v, r, t in zip(samples, per, results, scores):
        rec = {"id": s.id, "subset": s.subset, "n_chosen": len(s.chosen), "n_rejected": len(s.rejected)}
        if "comparisons" in v:
            rec["comparisons"] = [{"better": i, "worse": j, "credit": c} for i, j, c in v["comparisons"].values()]
        runs = v.get("samples", [])
        if len(runs) == 1:
            rec.update(_sample_record(runs[0]))
        elif runs:
            rec["samples"] = [{**_sample_record(x), "result": x["result"]} for x in runs]
        elif t is not None:
            rec["ties_scores"] = t
        rec["result"] = r
        lines.append(json.dumps(rec, ensure_ascii=False))
    atomic_write_text(path, "\n".join(lines) + "\n")


def write_judgements(path: Path, samples, asks, journal: Journal, verdicts, values) -> None:
    """Every ask of the run: where it belongs, what was sent, what came back and what it counted as."""
    with atomic_open(path, "w") as f:
        for a, v, x in zip(asks, verdicts, values):
            c = journal.done.get(a.request.key)
            s = samples[a.prompt]
            rec = {"row": s.name, "subset": s.subset, "kind": a.kind, "sample": a.sample, "key": a.request.key}
            if a.kind == bench_plan.PAIR:
                rec.update(better=a.i, worse=a.j, order="chosen_first" if a.chosen_first else "rejected_first")
            elif a.kind == bench_plan.FOUR_WAY:
                rec["chosen_slot"] = rb2.LETTERS[a.slot]
            else:
                rec["response"] = a.i
            rec.update({"messages": list(a.request.messages), "sampling": a.request.sampling.as_dict(),
                        **(c.as_dict() if c is not None else {"text": None}),
                        "verdict": v.winner, "why": v.why, "value": float(x)})
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")

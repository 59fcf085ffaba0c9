"""Logit verdicts on another benchmark than RM-Bench (`judge --verdict logits` on reward-bench,
reward-bench-2 or pairs): no decoding. Each of the benchmark's comparisons is asked as a pairwise
judgement (judges.bench_plan, a pairwise protocol, in both orders or one drawn per comparison), every
ask's prompt is prefilled up to the protocol's answer prefix and run once through the scalar engine
(judges.logits.logit_pass: batches, the result store, Ray, --share-prefix with a row's asks as one
group). Per ask, the better response's probability over the two verdict tokens; a comparison is won
(credit 1, else 0) when its mean over the orders asked exceeds 0.5, as on RM-Bench. The credits then
make the benchmark's own numbers (judges.bench_scores: reward-bench's sections, reward-bench-2's
product over a row's comparisons and Ties, pairs' pooled comparisons), written as judges.bench_run
writes a text-verdict run's files. A conversational row is shown as judges.conversation says.

Not here: RewardBench 2's own protocols (rb2-4way, rb2-ratings): their rules read a letter or a rating
from decoded text (check refuses them); --samples > 1 (judges.options.check refuses it for logits).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from ..errors import UsageError
from ..store.atomic import atomic_open
from ..store.entries import Store
from ..store.paths import store_root
from . import bench_plan, rb2, validity
from .bench_run import BenchJudgeRun, load_rows, write_run
from .bench_scores import summarize
from .logits import load_judge, logit_pass, winners
from .options import JudgeOptions, safe_url
from .requests import Sampling
from .session import check_output


def check(o: JudgeOptions) -> None:
    """One line refusing --verdict logits with RewardBench 2's own protocols (any benchmark)."""
    if o.verdict == "logits" and o.protocol in rb2.PROTOCOLS:
        raise UsageError(f"--protocol {o.protocol} with --verdict logits: this protocol's official rules "
                         "(run_generative_v2.py) read a letter or a 1-10 rating from decoded text, which logits "
                         "cannot give; use --verdict text, or a pairwise protocol (e.g. --protocol rmbench)")


def credits(asks, p_chosen: np.ndarray) -> np.ndarray:
    """Each ask's value: its comparison's credit, 1 when the better response's mean probability over the
    comparison's asks (its orders) exceeds 0.5, else 0."""
    groups: dict[tuple, list[int]] = {}
    for n, a in enumerate(asks):
        groups.setdefault((a.prompt, a.comparison), []).append(n)
    values = np.zeros(len(asks))
    for members in groups.values():
        values[members] = float(np.mean(p_chosen[members]) > 0.5)
    return values


def _ask_name(samples, a) -> str:
    order = "better first" if a.chosen_first else "worse first"
    return f"row {samples[a.prompt].name}, response {a.i} against {a.j}, {order}"


def judge_bench_logits(o: JudgeOptions, name: str, t_start: float) -> BenchJudgeRun:
    """Logit verdicts on benchmark `name`'s comparisons; results written when o.output is set."""
    from ..tasks import get
    from .protocols import get_protocol

    check(o)
    protocol = get_protocol(o.protocol, o.template, o.verdict_regex)
    if o.output:
        check_output(o)
    bench = get(name)
    samples, forms = load_rows(o, name, protocol)
    store = Store(store_root(o.cache_dir) if o.cache else None)
    try:
        judge = load_judge(o, protocol, store)
        asks = bench_plan.plan(samples, bench, protocol, o.protocol, judge.key_of, o.orders, o.seed, 1, Sampling())
        if not asks:
            raise UsageError(f"--data {o.data}: no comparison to judge (every row needs a better and a worse response)")
        lp = logit_pass(o, protocol, judge, asks, samples, lambda i: _ask_name(samples, asks[i]), store)
    finally:
        store.close()
    p_chosen = np.where([a.chosen_first for a in asks], lp.p_a, 1.0 - lp.p_a)
    values = credits(asks, p_chosen)
    summary, per, results, scores = summarize(name, samples, asks, values, o.bootstrap)
    subsets = [s.subset for s in samples]
    # a logit verdict is never missing: every rate 0, in summary.json as for text verdicts
    valid = validity.rates(asks, [None] * len(asks), subsets, list(summary["subsets"]))
    summary.update({"n_rows": len(samples), "rules": bench.official, "judge_protocol": o.protocol, **valid})
    if name == "reward-bench-2":
        summary["official"] = False  # RewardBench 2's official judges are rb2-4way and rb2-ratings
    record = lp.record
    run = {
        "options": {**asdict(o), "base_url": safe_url(o.base_url)}, "kind": "judge", "verdict": "logits",
        "benchmark": name, "protocol": protocol.describe(), "verdict_tokens": record["verdict_tokens"],
        "judge": record["judge"], "n_prompts": len(samples), "asks": len(asks), "conversations": forms,
        "pass": record["pass"], **bench_plan.stats(asks, winners(lp.p_a)), **valid, "tokens": record["tokens"],
        "device": record["device"], "dtype": record["dtype"], "tokens_per_s": record["tokens_per_s"],
        "wall_s": time.perf_counter() - t_start, "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    if o.output:
        write_run(Path(o.output), samples, (per, results, scores), summary, run,
                  lambda path: write_judgements(path, samples, asks, lp.logits, p_chosen, values))
    return BenchJudgeRun(samples, results, summary, run)


def write_judgements(path: Path, samples, asks, logits, p_chosen, values) -> None:
    """Every ask: where it belongs (as bench_run writes a text verdict's), what was sent, the two
    verdict tokens' logits, the better response's probability and the comparison's credit."""
    with atomic_open(path, "w") as f:
        for a, x, p, v in zip(asks, logits, p_chosen, values):
            s = samples[a.prompt]
            rec = {"row": s.name, "subset": s.subset, "kind": a.kind, "sample": a.sample, "key": a.request.key,
                   "better": a.i, "worse": a.j, "order": "chosen_first" if a.chosen_first else "rejected_first",
                   "messages": list(a.request.messages), "verdict_logits": x.tolist(), "p_chosen": float(p),
                   "value": float(v)}
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")

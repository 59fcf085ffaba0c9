"""Which questions a judge is asked on another benchmark than RM-Bench (reward-bench, reward-bench-2,
pairs): one BenchAsk per request slot, in row order.

- A pairwise protocol (rmbench, rewardbench, rm-r1, custom, ...): each of the benchmark's comparisons
  (rmbench_fast.tasks' `comparisons(row)`: (better, worse) indices into row.responses) is one pairwise
  judgement, in both A/B orders or one order drawn per comparison with --seed (--orders), --samples
  times each; the same messages and seeds as RM-Bench's asks (judges.plan).
- rb2-4way (reward-bench-2 only): one ask a non-Ties row (a sample), its chosen answer in the slot
  judges.rb2.slot draws from --seed, the row and the sample; Ties rows are rated (as run_generative_v2.py does).
- rb2-ratings (reward-bench-2 only): one ask a response of every row (Ties rows with the Ties prompt).
--samples K makes K asks of each (sample 0..K-1, each with its own seed). A conversational prompt or
response is shown as judges.conversation says (the protocol's own prompt, rewardbench's two-turn
prompt, or a transcript of every turn).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..errors import DataError
from . import conversation, rb2
from .plan import request_seed
from .requests import Request, Sampling

PAIR, FOUR_WAY, RATING = "pair", "4way", "rating"


@dataclass(frozen=True)
class BenchAsk:
    prompt: int  # index into the run's samples (rows)
    kind: str  # PAIR, FOUR_WAY or RATING
    i: int  # pair: the better response's index; rating: the rated response's; 4-way: 0 (the first chosen)
    j: int  # pair: the worse response's index; else -1
    chosen_first: bool  # pair: the better response is shown as A
    sample: int  # 0..K-1
    request: Request
    comparison: int = 0  # pair: its index in comparisons(row)
    slot: int | None = None  # 4-way: the chosen answer's slot (0-3: A-D)

    @property
    def chosen_letter(self) -> str:
        return "A" if self.chosen_first else "B"


def _sampling(sampling: Sampling, k: int, seed: int, messages, n: int) -> Sampling:
    """plan.plan's rule: greedy single answers carry no seed; others a seed from the request."""
    if k == 1 and sampling.temperature == 0:
        return sampling
    return Sampling(sampling.temperature, sampling.top_p, sampling.max_tokens, request_seed(seed, messages, n))


def plan(samples, bench, protocol, protocol_name: str, key_of: Callable, orders: str, seed: int, k: int,
         sampling: Sampling) -> list[BenchAsk]:
    """Every ask of the run. samples: engine.benchmarks.TaskSample (a prompt or response: a string or a
    conversation); protocol: the pairwise Protocol (None for rb2-4way / rb2-ratings)."""
    from ..tasks.rewardbench2 import is_ties

    rng = np.random.default_rng(seed)
    asks: list[BenchAsk] = []

    def add(p, kind, i, j, first, messages, samples=range(k), **extra):
        for n in samples:
            smp = _sampling(sampling, k, seed, messages, n)
            asks.append(BenchAsk(p, kind, i, j, first, n, Request(key_of(messages, smp), messages, smp), **extra))

    for p, s in enumerate(samples):
        responses = s.responses
        if protocol_name not in rb2.PROTOCOLS:
            for c, (better, worse) in enumerate(bench.comparisons(s.row)):
                firsts = (True, False) if orders == "both" else (bool(rng.random() < 0.5),)
                for first in firsts:
                    a, b = (responses[better], responses[worse]) if first else (responses[worse], responses[better])
                    add(p, PAIR, better, worse, first, conversation.pair_messages(protocol, s.prompt, a, b),
                        comparison=c)
        elif protocol_name == rb2.RATINGS or is_ties(s.subset):
            for r, text in enumerate(responses):
                add(p, RATING, r, -1, True, rb2.rating_messages(conversation.question(s.prompt),
                                                                conversation.answer(text), is_ties(s.subset)))
        else:
            if len(s.rejected) < 3:
                raise DataError(s.source, f"--protocol rb2-4way shows the first chosen and three rejected responses; "
                                f"this row has {len(s.rejected)} rejected", index=s.index, key="rejected")
            for n in range(k):  # each sample draws its own slot, as each official run does
                shuffle = rb2.slot(seed, s.subset, s.id, n)
                answers = rb2.four_way_answers(conversation.answer(s.chosen[0]),
                                               tuple(conversation.answer(x) for x in s.rejected), shuffle)
                add(p, FOUR_WAY, 0, -1, True, rb2.four_way_messages(conversation.question(s.prompt), answers),
                    samples=(n,), slot=shuffle)
    return asks


def unused_responses(samples, protocol_name: str) -> int:
    """Responses a 4-way prompt leaves out (past the first chosen and three rejected of a non-Ties row),
    as run_generative_v2.py leaves them: counted in run.json, and said on stderr."""
    from ..tasks.rewardbench2 import is_ties

    if protocol_name != rb2.FOUR_WAY:
        return 0
    return sum(len(s.chosen) - 1 + max(len(s.rejected) - 3, 0) for s in samples if not is_ties(s.subset))


def stats(asks: list[BenchAsk], winners: list) -> dict:
    """Pairwise asks: plan.stats' position bias and order agreement; 4-way asks: how often each slot
    was named (position bias over four slots) and the chosen slots drawn; ratings: the ratings' counts."""
    from .plan import stats as pair_stats

    pairs = [(a, w) for a, w in zip(asks, winners) if a.kind == PAIR]
    out = {"verdicts": len(winners), "invalid": sum(w is None for w in winners)}
    if pairs:
        # plan.stats keys pairs by (prompt, i, j, sample): the comparison's indices here
        out.update({k: v for k, v in pair_stats([a for a, _ in pairs], [w for _, w in pairs]).items()
                    if k in ("ties", "position_bias", "order_agreement")})
    four = [(a, w) for a, w in zip(asks, winners) if a.kind == FOUR_WAY]
    if four:
        out["four_way"] = {"named": {x: sum(w == x for _, w in four) for x in rb2.LETTERS},
                           "chosen_slot": {x: sum(rb2.LETTERS[a.slot] == x for a, _ in four) for x in rb2.LETTERS}}
    rated = [w for a, w in zip(asks, winners) if a.kind == RATING]
    if rated:
        out["ratings"] = {str(r): sum(w == str(r) for w in rated) for r in range(1, 11)}
        out["ratings"]["failed"] = sum(w is None for w in rated)
    return out

"""Which questions a judge is asked, and what its verdicts make of the 3x3 matrix.

Every (chosen_i, rejected_j) pair of every prompt, in both A/B orders (or one order drawn per
pair with the seed), K samples each: an Ask. Asks with identical messages and sampling are one
request (its key, made by the backend from everything the request sends: key_of). A sampled
request's seed is drawn from the run's seed, its messages (the prompt, the pair and its order) and
its sample index (request_seed): requests of different prompts never share a random stream, and a
request keeps its seed from run to run. A verdict gives its ask a value: 1 when the chosen answer wins, 0 when the
rejected one does, the tie value for a tie, the invalid rule for no verdict (a number, or "coin":
a fair coin drawn from the seed and the request's key). A prompt's cell (i, j) is the mean of its
asks' values over orders and samples.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .requests import Request, Sampling


@dataclass(frozen=True)
class Ask:
    prompt: int  # index into the run's samples
    i: int  # chosen style
    j: int  # rejected style
    chosen_first: bool  # the chosen answer is shown as A
    sample: int  # 0..K-1
    request: Request

    @property
    def chosen_letter(self) -> str:
        return "A" if self.chosen_first else "B"


SEED_BITS = 31  # request seeds in [0, 2^31): every server's seed field takes them (some parse a signed int32)


def request_seed(seed: int, messages, sample: int) -> int:
    """The sampling seed of one request: a hash of the run's --seed, the request's messages (which
    hold the prompt, the pair and its order) and its sample index."""
    digest = hashlib.sha256(json.dumps([seed, [dict(m) for m in messages], sample], sort_keys=True,
                                       ensure_ascii=False).encode()).digest()
    return int.from_bytes(digest[:8], "big") >> (64 - SEED_BITS)


def plan(samples, protocol, key_of: Callable, orders: str, seed: int, k: int, sampling: Sampling) -> list[Ask]:
    """Every ask of the run, in prompt order. key_of(messages, sampling) -> a request's store key
    (the backend's: every field it sends, under the judge's identity)."""
    rng = np.random.default_rng(seed)
    asks = []
    for p, s in enumerate(samples):
        for i in range(3):
            for j in range(3):
                firsts = (True, False) if orders == "both" else (bool(rng.random() < 0.5),)
                for first in firsts:
                    a, b = (s.chosen[i], s.rejected[j]) if first else (s.rejected[j], s.chosen[i])
                    messages = tuple(protocol.messages(s.prompt, a, b))
                    for n in range(k):
                        smp = sampling if k == 1 and sampling.temperature == 0 else Sampling(
                            sampling.temperature, sampling.top_p, sampling.max_tokens,
                            request_seed(seed, messages, n))
                        asks.append(Ask(p, i, j, first, n, Request(key_of(messages, smp), messages, smp)))
    return asks


def unique_requests(asks: list[Ask]) -> list[Request]:
    """One request per key, in an order that keeps requests sharing a prompt's text next to each
    other (sorted by their messages): a server's prefix cache then reuses it."""
    seen = {}
    for a in asks:
        seen.setdefault(a.request.key, a.request)
    return sorted(seen.values(), key=lambda r: [m["content"] for m in r.messages])


def shared_prefix_chars(requests: list[Request]) -> tuple[int, int]:
    """(characters of the prompts, of which a prefix cache could reuse): each request's longest
    common prefix with the one sent before it."""
    total = reuse = 0
    prev = ""
    for r in requests:
        text = "\x00".join(f"{m['role']}\x01{m['content']}" for m in r.messages)
        total += len(text)
        reuse += _common_prefix(text, prev)
        prev = text
    return total, reuse


def _common_prefix(a: str, b: str) -> int:
    """Length of the longest common prefix, by bisection over slice comparisons (done in C: a
    character loop in Python took seconds over RM-Bench's 24k requests)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def coin(seed: int, key: str) -> float:
    return float(hashlib.sha256(f"{seed}:{key}".encode()).digest()[0] & 1)


def value(ask: Ask, winner: str | None, tie: float, invalid, seed: int) -> float:
    """What one verdict gives its ask: 1 chosen wins, 0 rejected wins, tie, invalid rule."""
    if winner in ("A", "B"):
        return 1.0 if winner == ask.chosen_letter else 0.0
    if winner == "tie":
        return tie
    return coin(seed, ask.request.key) if invalid == "coin" else float(invalid)


def cells(asks: list[Ask], values: np.ndarray, n_prompts: int) -> np.ndarray:
    """[n_prompts, 3, 3]: each cell the mean of its asks' values."""
    total = np.zeros((n_prompts, 3, 3))
    count = np.zeros((n_prompts, 3, 3))
    idx = (np.array([a.prompt for a in asks]), np.array([a.i for a in asks]), np.array([a.j for a in asks]))
    np.add.at(total, idx, values)
    np.add.at(count, idx, 1.0)
    return total / count


def stats(asks: list[Ask], winners: list) -> dict:
    """Position bias (how often the answer shown first wins, of the verdicts that pick one) and
    order agreement (of pairs asked in both orders with both verdicts valid: how often both name
    the same answer the winner, or both a tie). The invalid rates: judges.validity."""
    picked = [w for w in winners if w in ("A", "B")]
    pairs = {}
    for a, w in zip(asks, winners):
        pairs.setdefault((a.prompt, a.i, a.j, a.sample), {})[a.chosen_first] = w
    both = [(o[True], o[False]) for o in pairs.values() if len(o) == 2 and None not in o.values()]

    def outcome(w, chosen_first):
        return "tie" if w == "tie" else ("chosen" if (w == "A") == chosen_first else "rejected")

    agree = sum(outcome(x, True) == outcome(y, False) for x, y in both)
    return {
        "verdicts": len(winners),
        "invalid": sum(w is None for w in winners),
        "ties": sum(w == "tie" for w in winners),
        "position_bias": {"first_shown_wins": sum(w == "A" for w in picked) / len(picked) if picked else None,
                          "verdicts": len(picked)},
        "order_agreement": {"rate": agree / len(both) if both else None, "pairs": len(both)},
    }

"""The user's own preference pairs, in TRL's preference formats.

- standard: {prompt, chosen, rejected} strings;
- conversational, implicit prompt: {chosen: [messages], rejected: [messages]}: the leading turns both
  share are the prompt, the rest of each (one or more turns) its response;
- conversational, explicit prompt: {prompt: [messages], chosen: [messages], rejected: [messages]};
- several responses: {prompt, chosen: [strings], rejected: [strings]}: every chosen against every
  rejected one.
Optional: subset (else domain, else "default") and id (else the row's index). Files: JSON, JSONL,
Parquet, a `datasets` folder (base.read_items).

A pair is right when chosen scores strictly above rejected; a tie earns `tie_credit` (0 by default:
a tie is wrong, as in rewardbench's scripts). Every pair counts once: a subset's accuracy is its
pairs' mean, and `score` the mean over every pair of every subset.
"""

from __future__ import annotations

from .base import Benchmark, Item, Row, kind, messages, register, row_id

DEFAULT_SUBSET = "default"


class Pairs(Benchmark):
    name = "pairs"
    official = "TRL's preference dataset formats; per-pair accuracy as rewardbench 0.1.4's run_rm.py counts a row"
    priority = 0

    def __init__(self, tie_credit: float = 0.0):
        tie_credit = float(tie_credit)
        if not 0.0 <= tie_credit <= 1.0:
            raise ValueError(f"tie_credit must be between 0 and 1, got {tie_credit}")
        self.tie_credit = tie_credit

    def fits(self, items: list[dict]) -> bool:
        return "chosen" in items[0] and "rejected" in items[0]

    def parse(self, item: Item) -> Row:
        v = item.value
        for key in ("chosen", "rejected"):
            if key not in v:
                raise item.error("missing key", key)
        subset = DEFAULT_SUBSET
        for key in ("subset", "domain"):
            if v.get(key) is not None:
                if not isinstance(v[key], str):
                    raise item.error(f"must be a string, got {kind(v[key])}", key)
                subset = v[key]
                break
        if "prompt" in v and v["prompt"] is not None:
            prompt = v["prompt"]
            if isinstance(prompt, list):
                messages(item, prompt, "prompt")
            elif not isinstance(prompt, str):
                raise item.error(f"must be a string or a list of messages, got {kind(prompt)}", "prompt")
            conversational = isinstance(prompt, list)
            chosen = self._responses(item, "chosen", conversational)
            rejected = self._responses(item, "rejected", conversational)
        else:
            prompt, chosen, rejected = self._split(item)
        return Row(row_id(item), subset, prompt, chosen, rejected, item.source, item.index, v)

    @staticmethod
    def _responses(item: Item, key: str, conversational: bool) -> tuple:
        value = item.value[key]
        if isinstance(value, str):
            return (value,)
        if not isinstance(value, list) or not value:
            raise item.error(f"must be a string, a non-empty list of strings or a list of messages, "
                             f"got {kind(value) if value != [] else 'an empty list'}", key)
        if all(isinstance(x, str) for x in value):
            return tuple(value)  # several responses
        if all(isinstance(x, dict) for x in value):
            if not conversational:
                raise item.error("is a list of messages, but the prompt is a string: give the prompt as "
                                 "messages too, or the responses as strings", key)
            return (messages(item, value, key),)
        raise item.error("must hold only strings (several responses) or only messages (one conversation)", key)

    @staticmethod
    def _split(item: Item):
        """The implicit prompt: the leading turns chosen and rejected share."""
        v = item.value
        if isinstance(v["chosen"], str) or isinstance(v["rejected"], str):
            raise item.error("string responses need a prompt (or give chosen and rejected as conversations)",
                             "prompt")
        chosen = messages(item, v["chosen"], "chosen")
        rejected = messages(item, v["rejected"], "rejected")
        k = 0
        while (k < min(len(chosen), len(rejected))
               and (chosen[k]["role"], chosen[k]["content"]) == (rejected[k]["role"], rejected[k]["content"])):
            k += 1
        if k == len(chosen) or k == len(rejected):
            key = "chosen" if k == len(chosen) else "rejected"
            raise item.error(f"holds no turn after the {k} turns chosen and rejected share: no response to score",
                             key)
        return chosen[:k], (chosen[k:],), (rejected[k:],)

    def comparisons(self, row: Row) -> list[tuple[int, int]]:
        n = len(row.chosen)
        return [(i, n + j) for i in range(n) for j in range(len(row.rejected))]

    def pair(self, chosen: float, rejected: float):
        """1 when chosen scores above rejected, tie_credit on a tie, else 0 (NaN: 0)."""
        return 1 if chosen > rejected else (self.tie_credit if chosen == rejected else 0)

    def _values(self, row: Row, scores) -> list:
        return [self.pair(scores[i], scores[j]) for i, j in self.comparisons(row)]

    def row_result(self, row: Row, scores) -> float:
        """The row's pairs' mean."""
        values = self._values(row, scores)
        return sum(values) / len(values)

    def aggregate(self, rows: list[Row], scores) -> dict:
        scores = self.check(rows, scores)
        values: dict[str, list] = {}
        counts: dict[str, int] = {}
        for row, s in zip(rows, scores):
            values.setdefault(row.subset, []).extend(self._values(row, s))
            counts[row.subset] = counts.get(row.subset, 0) + 1
        names = sorted(values)
        every = [x for name in names for x in values[name]]
        return {"benchmark": self.name, "score": sum(every) / len(every),
                "subsets": {name: sum(values[name]) / len(values[name]) for name in names},
                "counts": {name: counts[name] for name in names},
                "pairs": {name: len(values[name]) for name in names}, "tie_credit": self.tie_credit}


BENCHMARK = register(Pairs())

"""What a judge is asked and what it answers: the types every backend and protocol shares.

A Request is one chat completion: the messages a protocol built for one (prompt, chosen_i,
rejected_j, order) plus the sampling settings and the sample index (K samples of one pair are K
requests, each with its own seed, drawn from the request itself). A Completion is what came back,
or the one-line error that ended it.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Sampling:
    temperature: float = 0.0  # 0: greedy
    top_p: float = 1.0
    max_tokens: int = 4096
    seed: int | None = None  # per request (plan.request_seed: --seed, messages, sample index), where honoured

    def as_dict(self) -> dict:
        return {"temperature": self.temperature, "top_p": self.top_p, "max_tokens": self.max_tokens,
                "seed": self.seed}


@dataclass(frozen=True)
class Request:
    key: str  # the store key: the judge's identity + everything the request sends (unique per request)
    messages: tuple  # ({"role": ..., "content": ...}, ...) as sent
    sampling: Sampling = field(default_factory=Sampling)
    # where it belongs in the run (for progress and judgements.jsonl); backends ignore it
    meta: dict = field(default_factory=dict, compare=False, hash=False)


@dataclass
class Completion:
    text: str | None  # the answer; None when the request failed for good
    reasoning: str | None = None  # a reasoning field the server returns apart (reasoning_content), else None
    finish_reason: str | None = None  # "stop", "length", ...
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    error: str | None = None  # one line: why there is no text (after the retries)
    attempts: int = 1

    def as_dict(self) -> dict:
        return {"text": self.text, "reasoning": self.reasoning, "finish_reason": self.finish_reason,
                "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "error": self.error, "attempts": self.attempts}

    @classmethod
    def from_dict(cls, d: dict) -> "Completion":
        return cls(**{k: d.get(k) for k in ("text", "reasoning", "finish_reason", "prompt_tokens",
                                            "completion_tokens", "error")}, attempts=d.get("attempts", 1))

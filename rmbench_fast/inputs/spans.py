"""`--score-span after:TEXT`: score only what follows the last TEXT (e.g. `</think>`) in each response,
for reasoning models whose responses carry their reasoning before the answer.

- A reward model is given the response with everything up to and including the last TEXT removed
  (exactly that: the whitespace after TEXT stays), formatted through the chat template as any response.
- DPO keeps the whole response in the input (the reasoning is context) and sums log-probs over the
  tokens after the last TEXT only. The span is found by character offsets: the last TEXT in the
  formatted response (the full text less the prompt), then the first token whose characters end after
  it (the tokenizer's offset mapping). A TEXT split over several tokens is context, all of it; a token
  that straddles its end (the last characters of TEXT and the first of the answer, when the tokenizer
  merges them) is scored, so that every character of the answer is scored. The EOS the official flow
  appends, and the template's tokens after the response, follow TEXT: they are scored, as without a
  span.
- A response without TEXT is scored whole, exactly as without --score-span; run.json counts them
  (`score_span.without_text`). A response that holds TEXT but whose formatted text does not (a chat
  template that drops it) is an error naming the prompt.
"""

from __future__ import annotations

from dataclasses import replace

from ..errors import UsageError

PREFIX = "after:"


def parse(value, flag: str | None = "--score-span") -> str | None:
    """The TEXT of `after:TEXT` (None: no span); a UsageError naming `flag` and the value for anything
    else (flag None: the reason alone, for click to name the option)."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.startswith(PREFIX) or len(value) == len(PREFIX):
        said = "" if flag is None else f"{flag} {value!r}: "
        raise UsageError(f"{said}expected after:TEXT with a TEXT that is not empty "
                         "(e.g. after:</think>: score only what follows the last </think> of each response)")
    return value[len(PREFIX):]


def _last_text(response):
    """The text a span is looked for in: a response string, or a conversation's last message's content."""
    if isinstance(response, str):
        return response
    if isinstance(response, (list, tuple)) and response and isinstance(response[-1], dict):
        content = response[-1].get("content")
        return content if isinstance(content, str) else None
    return None


def holds(response, text: str) -> bool:
    """Whether the response (its last message, for a conversation) holds `text`."""
    found = _last_text(response)
    return found is not None and text in found


def after(response, text: str):
    """The response with everything up to and including its last `text` removed (a conversation: its
    last message's content cut so); the response itself when it has no `text`."""
    found = _last_text(response)
    if found is None or text not in found:
        return response
    cut = found[found.rfind(text) + len(text):]
    if isinstance(response, str):
        return cut
    return [*response[:-1], {**response[-1], "content": cut}]


def _cut_one(sample, text: str):
    return replace(sample, chosen=type(sample.chosen)(after(r, text) for r in sample.chosen),
                   rejected=type(sample.rejected)(after(r, text) for r in sample.rejected))


def cut_samples(samples, text: str | None):
    """Samples whose responses are cut after their last `text` (a reward model's inputs); the samples
    themselves without a span."""
    if text is None:
        return samples
    return [_cut_one(s, text) for s in samples]


def marks(samples, text: str | None) -> list[list[str | None]] | None:
    """Per sample, per response in layout order: `text` when the response holds it (its DPO span
    starts after it), else None (scored whole); None without a span."""
    if text is None:
        return None
    from .layout import responses

    return [[text if holds(r, text) else None for r in responses(s)] for s in samples]


def count(samples, text: str | None) -> dict | None:
    """What run.json records of the span: its TEXT, the responses, and those without TEXT (scored whole)."""
    if text is None:
        return None
    from .layout import responses

    flags = [holds(r, text) for s in samples for r in responses(s)]
    return {"after": text, "responses": len(flags), "without_text": int(sum(not f for f in flags)),
            "rule": "responses without TEXT are scored whole"}


def first_token_after(offsets, char: int) -> int:
    """The index of the first token whose characters end after position `char` (len(offsets) when
    none does): a token straddling `char` counts as after it."""
    for k, (_, end) in enumerate(offsets):
        if end > char:
            return k
    return len(offsets)


def span_start(tokenizer, joined: list[str], prompt_len: list[int], answers: list[str],
               after_text: list[str | None], where) -> list[int | None]:
    """For each joined text (prompt + answer), the index among its tokens (add_special_tokens=False)
    of the first token after the answer's last TEXT; None where the response has no TEXT (scored
    whole). where(i): how an error names text i."""
    todo = [i for i, t in enumerate(after_text) if t is not None]
    out: list[int | None] = [None] * len(joined)
    if not todo:
        return out
    if not getattr(tokenizer, "is_fast", True):
        raise UsageError(f"--score-span: tokenizer {type(tokenizer).__name__} gives no offset mapping (a fast "
                         "tokenizer does): the span's tokens cannot be found")
    enc = tokenizer([joined[i] for i in todo], add_special_tokens=False, return_offsets_mapping=True)
    for i, offsets in zip(todo, enc["offset_mapping"]):
        k = answers[i].rfind(after_text[i])
        if k < 0:
            raise UsageError(f"--score-span after:{after_text[i]}: {where(i)} holds it, but its text through the chat "
                             "template does not (the template drops it)")
        out[i] = first_token_after(offsets, prompt_len[i] + k + len(after_text[i]))
    return out

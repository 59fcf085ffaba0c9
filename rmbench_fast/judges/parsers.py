"""Verdict parsers: a judge's answer text -> Verdict (A, B, tie, or invalid with a short reason).

Each preset parser reads the answer the way its published evaluator does:
- boxed (RM-Bench's README template): the LAST \\boxed{...} in the text decides, wherever it is
  (inside <think>...</think> too, so a verdict quoted in the reasoning loses to the final one);
  whitespace inside the box is ignored ("A > > B" reads A>>B), nothing else is: the README shows
  only the five bare forms, so \\boxed{[[A>B]]} or \\boxed{\\text{A>B}} are invalid, and so is a
  last box holding anything but A>>B, A>B, A=B, B>A, B>>A (an earlier valid box does not rescue it).
  Any run of backslashes before "boxed" counts (\\\\boxed, as a model echoing the README's source
  spelling may write it); braces nest; a box never closed is not a box.
- rewardbench (rewardbench 0.1.4 process_judgement, its default branch): "[[A]]" anywhere gives A,
  else "[[B]]" anywhere gives B, else invalid; not the last mention: A wins whenever it appears, so
  a text with both reads A, and "[[C]]" is no verdict (0.1.4's prompt dropped the tie option).
- rm-r1 (RM-R1's fork of that function): as rewardbench, but a text holding both "[[A]]" and "[[B]]"
  is invalid ("Prevent Hacking"); RM-R1 never yields a tie.
- regex (a user's): the LAST match decides, its group "verdict" (else group 1), surrounding
  whitespace ignored: "A" gives A, "B" gives B (capitals only: a lone "a" is more often an article),
  tie / C / A=B / = (any case) a tie, anything else invalid. Flags go inline: (?i), (?s).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rmbench_fast.errors import UsageError, one_line


@dataclass(frozen=True)
class Verdict:
    winner: str | None  # "A", "B", "tie", or None: no usable verdict
    strength: str | None = None  # the verdict as written where it grades (rmbench: "A>>B"), else None
    why: str | None = None  # when winner is None: a short reason ("no verdict", "both A and B", ...)

    @property
    def valid(self) -> bool:
        return self.winner is not None


BOXED = {"A>>B": "A", "A>B": "A", "A=B": "tie", "B>A": "B", "B>>A": "B"}
_BOX_OPEN = re.compile(r"\\+boxed\s*\{")
TIES = {"tie", "c", "a=b", "="}


def _quote(text: str, limit: int = 40) -> str:
    return repr(one_line(text, limit))


def last_box(text: str) -> str | None:
    """The content of the last closed \\boxed{...} in text (braces nest), or None."""
    found = None
    for m in _BOX_OPEN.finditer(text):
        depth, start = 1, m.end()
        for i in range(start, len(text)):
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
                if depth == 0:
                    found = text[start:i]
                    break
    return found


def parse_boxed(text: str) -> Verdict:
    box = last_box(text)
    if box is None:
        return Verdict(None, why="no verdict")
    key = "".join(box.split())
    if key not in BOXED:
        return Verdict(None, why=f"unrecognised verdict {_quote(box)}")
    return Verdict(BOXED[key], strength=key)


def parse_rewardbench(text: str) -> Verdict:
    if "[[A]]" in text:
        return Verdict("A")
    if "[[B]]" in text:
        return Verdict("B")
    if "[[C]]" in text:
        return Verdict(None, why="no verdict ([[C]]: rewardbench 0.1.4 has no tie)")
    return Verdict(None, why="no verdict")


def parse_rm_r1(text: str) -> Verdict:
    a, b = "[[A]]" in text, "[[B]]" in text
    if a and b:
        return Verdict(None, why="both A and B")
    if a:
        return Verdict("A")
    if b:
        return Verdict("B")
    return Verdict(None, why="no verdict")


class RegexParser:
    """A user's verdict regex: the last match decides (see the module docstring). Compiled once; a
    regex that does not compile or has no group to read is a UsageError naming it."""

    def __init__(self, pattern: str):
        self.pattern = pattern
        try:
            self.regex = re.compile(pattern)
        except re.error as e:
            raise UsageError(f"verdict regex {pattern!r}: does not compile: {one_line(e)}") from None
        if "verdict" in self.regex.groupindex:
            self.group = "verdict"
        elif self.regex.groups >= 1:
            self.group = 1
        else:
            raise UsageError(f"verdict regex {pattern!r}: has no group to read the verdict from "
                             f"(name one: (?P<verdict>...))")

    def __call__(self, text: str) -> Verdict:
        last = None
        for last in self.regex.finditer(text):
            pass
        if last is None:
            return Verdict(None, why="no verdict")
        raw = last.group(self.group)
        if raw is None:
            return Verdict(None, why="the verdict group did not take part in the last match")
        value = raw.strip()
        if value in ("A", "B"):
            return Verdict(value, strength=raw)
        if value.lower() in TIES:
            return Verdict("tie", strength=raw)
        return Verdict(None, why=f"unrecognised verdict {_quote(raw)}")

    def __repr__(self) -> str:
        return f"RegexParser({self.pattern!r})"

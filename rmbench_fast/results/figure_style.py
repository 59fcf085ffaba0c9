"""How the pictures (results.plots) look: one colour per meaning, and titles that wrap between words.

On one figure a colour means one thing: the difficulties (with overall and avg) take black and warm
colours, the domains the others, and a label outside RM-Bench's domains one of the colours left.
A title breaks only at spaces, never inside a path or a hyphenated checkpoint name; a path longer
than a line is shortened at its separators (report.md names it whole).
"""

from __future__ import annotations

import colorsys
import textwrap

# One colour per meaning, never two meanings in one colour on a figure: the difficulties (and
# overall / avg) in warm colours and black, the domains in the others; labels outside RM-Bench's
# domains take the colours left.
LEVEL_COLOURS = {"overall": "black", "avg": "dimgray", "hard": "tab:red", "normal": "tab:orange", "easy": "gold"}
DOMAIN_COLOURS = {"chat": "tab:blue", "math": "tab:green", "code": "tab:purple", "safety": "tab:brown"}
SPARE_COLOURS = ("tab:pink", "tab:cyan", "tab:olive", "tab:gray", "navy", "teal")


def domain_colours(domains) -> dict[str, str]:
    """A colour for each domain: RM-Bench's own, then the spare ones, then (past their end) hues
    spread evenly, dark enough to read: never one already taken."""
    others = [d for d in dict.fromkeys(domains) if d not in DOMAIN_COLOURS]
    extra = max(0, len(others) - len(SPARE_COLOURS))
    hues = [colorsys.hsv_to_rgb(k / extra, 0.8, 0.55) for k in range(extra)]
    spare = list(SPARE_COLOURS) + ["#" + "".join(f"{round(255 * c):02x}" for c in rgb) for rgb in hues]
    return {d: DOMAIN_COLOURS.get(d) or spare[others.index(d)] for d in domains}


def _short(word: str, width: int) -> str:
    """A word longer than a line, shortened at a path separator: '.../ckpt/checkpoint-500'."""
    if len(word) <= width or "/" not in word.strip("/"):
        return word
    parts = word.rstrip("/").split("/")
    out = parts[-1]
    for p in reversed(parts[:-1]):
        if len(out) + len(p) + 5 > width:
            break
        out = f"{p}/{out}"
    return f".../{out}"


def wrap(text: str, width: int = 130) -> list[str]:
    """Lines of `text` broken at spaces only, never inside a word, a path or a hyphenated name; a
    path longer than a line is shortened at its separators (the report names it whole)."""
    words = [_short(w, width) for w in text.split(" ")]
    return textwrap.wrap(" ".join(words), width, break_long_words=False, break_on_hyphens=False)

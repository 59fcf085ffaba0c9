"""The installed transformers' version, parsed in one place (its loading and tokenizer rules changed
between 4.51 and 5)."""

from __future__ import annotations

import functools
import re
import sys
from importlib import metadata


def parse_version(text: str) -> tuple[int, ...]:
    """The leading numeric release of a version string: "4.56.0.dev0" -> (4, 56, 0); "5.0rc1" -> (5, 0)."""
    parts = []
    for piece in text.split("."):
        m = re.match(r"\d+", piece)
        if m is None:
            break
        parts.append(int(m.group()))
        if m.end() != len(piece):  # "0rc1": the release ends here
            break
    return tuple(parts)


def transformers_version() -> tuple[int, ...]:
    """Its module's version once imported (a test may set it), else the installed distribution's:
    asking does not import transformers (about 1 s here, which a run whose passes are stored never needs)."""
    module = sys.modules.get("transformers")
    return parse_version(module.__version__ if module is not None else _installed())


@functools.cache
def _installed() -> str:
    return metadata.version("transformers")

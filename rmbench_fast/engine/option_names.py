"""How an error message names an option: the command line's flag (`--max-batch-size 0`) or the Python
API's keyword argument (`max_batch_size=0`). The checks of options (engine.checks) take the naming
of their caller, so that `rmbench_fast.score(limit=0)` is told about `limit=`, not `--limit`.

A naming is a function name(field, value=MISSING) -> str, of a ScoreOptions field: without a value
the option alone (`--limit` / `limit=`), with one the option as it was given (`--limit 0` /
`limit=0`).
"""

from __future__ import annotations

MISSING = object()
# ScoreOptions fields that a CLI flag (and an API keyword) turns off
OFF_FLAGS = {"cache": "--no-cache", "progress": "--quiet"}
OFF_KEYWORDS = {"cache": "no_cache", "progress": "quiet"}


def cli_name(field: str, value=MISSING) -> str:
    """'--max-batch-size'; with a value '--max-batch-size 0' (a flag: '--overwrite' for True,
    '--no-cache' for cache False; a dict as DEVICE=SIZE pairs: '--max-memory 0=70GiB,cpu=1GiB')."""
    dashed = field.replace("_", "-")
    flag = OFF_FLAGS.get(field, "--" + dashed)
    if value is MISSING:
        return flag
    if isinstance(value, bool):
        if field in OFF_FLAGS and not value:
            return flag
        return f"--{dashed}" if value else f"--no-{dashed}"
    if isinstance(value, dict):
        value = ",".join(f"{k}={v}" for k, v in value.items())
    return f"{flag} {value:g}" if isinstance(value, float) else f"{flag} {value}"


def api_name(field: str, value=MISSING) -> str:
    """'max_batch_size='; with a value 'max_batch_size=0' (strings quoted as Python writes them; a
    flag turned off by its own keyword: 'no_cache=True' for cache False)."""
    if value is MISSING:
        return f"{OFF_KEYWORDS.get(field, field)}="
    if field in OFF_KEYWORDS and isinstance(value, bool):
        return f"{OFF_KEYWORDS[field]}={not value}"
    return f"{field}={value:g}" if isinstance(value, float) else f"{field}={value!r}"

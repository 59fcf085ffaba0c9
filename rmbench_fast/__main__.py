"""`python -m rmbench_fast`: the same as the `rmbench-fast` command."""

from .cli.main import entry

entry()

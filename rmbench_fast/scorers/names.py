"""What the command line offers of the scorers, importable without torch (the command line, `--help`
and the commands that only read results never load it): the reference-free DPO variants."""

REF_FREE = ("sum", "avg", "norm")  # DPO without a reference; avg is the official default
DEFAULT_REF_FREE = "avg"

"""rmbench-fast: fast, exact RM-Bench scoring for reward models and DPO models."""

__version__ = "0.1.0"

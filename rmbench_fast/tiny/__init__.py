"""Tiny random-weight models and tokenizers built offline, for the demo, the tests and the benchmarks.
May import: nothing of the package (torch, transformers and tokenizers only)."""

"""The inputs stage: data -> templates -> tokenize -> batches (the sequence layout, shared prefixes).
May import: errors, store (hashing), models (tokenizer classes, config probes); never a later stage."""

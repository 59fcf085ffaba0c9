"""Models: device and dtype, what a config says a model is (kinds), loading configs, tokenizers and weights.
May import: errors, store (the tokenizer files it fetches); never inputs, scorers or a later stage."""

"""Generative judges: protocols (template + verdict parser), backends (an OpenAI-compatible server, transformers in-process), cells.
May import: errors, store, models, inputs, kernels, scorers, results, engine, tasks; never cli or tiny."""

"""The `rmbench-fast` command line: its commands (main), the options score and sweep share, cache, demo.
May import: errors, store, models, inputs, kernels, scorers, adapters, results, engine, tiny (the demo's models)."""

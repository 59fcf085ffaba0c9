"""The `rmbench-fast` command line: its commands (main), the options score and sweep share, cache, data, demo, judge.
May import: errors, store, models, inputs, kernels, scorers, adapters, results, engine, judges, tiny (the demo's models)."""

"""The engine: a run's options, load-then-validate, the batch loop, passes through the store, Ray, sweeps, run.json.
May import: errors, store, models, inputs, kernels, scorers, adapters, results, tasks; never cli or tiny."""

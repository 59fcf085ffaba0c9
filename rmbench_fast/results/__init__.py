"""Results: metrics (the official accuracy), results files in the official format, plots and report.md.
May import: errors, store (atomic writes), inputs (domains, styles); never models, scorers or the engine."""

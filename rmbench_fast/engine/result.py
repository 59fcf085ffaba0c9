"""What the engine's `score` returns (ScoreRun: the samples, their scores, the summary and run.json's
record), and what the Python API's `rmbench_fast.score` returns (Result)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class ScoreRun:
    samples: list | None  # inputs.data.Sample; None for a finished run read back from its files
    chosen: np.ndarray  # [n_prompts, 3]
    rejected: np.ndarray
    summary: dict
    run: dict = field(default_factory=dict)


@dataclass
class Result:
    """A scored run: the summary (summary.json, intervals included), each prompt's id, domain and
    subset in the data's order, its scores (chosen / rejected: [n, 3], one column per style: concise,
    detailed plain, detailed markdown), and run.json's record of how it ran."""
    summary: dict
    ids: list
    domains: list[str]
    subsets: list
    chosen: np.ndarray
    rejected: np.ndarray
    run: dict
    output: str | None = None  # the folder its files went to, if any

    @property
    def names(self) -> list[str]:
        """Each prompt as "domain/id", which identifies it across runs (ids repeat across domains)."""
        return [str(i) if str(i).startswith(f"{d}/") else f"{d}/{i}" for i, d in zip(self.ids, self.domains)]

    @property
    def overall(self) -> float:
        return self.summary["overall"]

    def table(self) -> str:
        """The accuracy table the CLI prints."""
        from ..results.describe import about_line, run_facts
        from ..results.tables import format_table

        return format_table(self.summary, about_line(run_facts(self.run)))

    def __repr__(self) -> str:
        model = self.run.get("options", {}).get("model")
        return f"Result(model={model!r}, prompts={len(self.ids)}, overall={self.overall:.4f})"

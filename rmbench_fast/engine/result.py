"""What `score` returns: the samples, their scores, the summary and run.json's record."""

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

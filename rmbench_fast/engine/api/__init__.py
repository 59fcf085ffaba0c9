"""The Python API (`rmbench_fast.score`, `rmbench_fast.compare`): run (score, build, Result), options
(keyword arguments as ScoreOptions), compare (paired comparisons of results), lent (models and
tokenizers lent in memory, scored as they are); errors name options as keywords (engine.option_names).
Part of the engine: it may import what the engine may."""

from .compare import Comparison, compare
from .run import Result, build, option_values, result_of, score, score_built

__all__ = ["Comparison", "Result", "build", "compare", "option_values", "result_of", "score", "score_built"]

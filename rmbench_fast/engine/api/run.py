"""The Python API, `rmbench_fast.score` and `rmbench_fast.compare`: for training code and notebooks,
where a command line and a round trip through disk get in the way.

`score` takes the command line's options under their Python names (`--max-batch-size 8` is
`max_batch_size=8`, `--no-cache` / `-q` are `no_cache=True` / `quiet=True`) with the same defaults,
and runs the same engine the CLI runs, so for the same options its summary is the CLI's; a bad
option is a one-line exception (errors.UsageError) as on the CLI, naming the keyword argument
(`limit=0`) where the CLI names its flag (engine.option_names). `model`, `ref_model` and
`tokenizer` are paths (local folders or hub ids) or objects already loaded: those are lent to the
run (engine.api.lent) and scored as they are, on their own device and in their own dtype, with no
files written or read for them (a loaded policy and reference share one dtype; a policy or reference
given by its path is loaded where the loaded one is, in its dtype: engine.api.options, which also
checks the options). `compare` (engine.api.compare) wraps results.compare for run folders, results
files, sweep folders and the Results `score` returns.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ...errors import UsageError
from ...inputs.data import HUB_DEFAULT
from ...store.atomic import atomic_write_json
from ..checks import check_options, check_output
from ..option_names import api_name
from ..options import ScoreOptions
from ..result import Result
from .lent import Given, name_of
from .options import option_values, where

__all__ = ["Result", "build", "option_values", "result_of", "score", "score_built"]


def result_of(scored, o: ScoreOptions) -> Result:
    """A Result from the engine's ScoreRun (a run read back from its folder has no samples: its
    results.json has them)."""
    if scored.samples is not None:
        samples = scored.samples
        ids, domains, subsets = [s.id for s in samples], [s.domain for s in samples], [s.subset for s in samples]
    else:
        from ...results.files import read_scores

        items = json.loads((Path(o.output) / "results.json").read_text())
        _, _, domains, subsets, _ = read_scores(Path(o.output) / "results.json")
        ids = [item.get("id", i) for i, item in enumerate(items)]
    return Result(scored.summary, ids, list(domains), list(subsets), scored.chosen, scored.rejected, scored.run,
                  o.output)


def _model(what: str, value):
    """(the name the run records, the loaded model or None) of a model given as a path or an object."""
    if value is None or isinstance(value, (str, os.PathLike)):
        return (None if value is None else os.fspath(value)), None
    import torch

    if not isinstance(value, torch.nn.Module):
        raise UsageError(f"{what}: expected a path, a hub id or a loaded transformers model, got "
                         f"{type(value).__name__}")
    return name_of(value) or f"<{type(value).__name__} in memory>", value


def build(model, ref_model=None, data=HUB_DEFAULT, tokenizer=None, **options) -> tuple[ScoreOptions, Given | None]:
    """score's arguments as the engine's ScoreOptions and the objects lent to the run (None: all paths)."""
    opts = option_values(options)
    name, lent = _model("model", model)
    if name is None:
        raise UsageError("model: give a reward model or DPO policy (a path, a hub id or a loaded model)")
    ref_name, lent_ref = _model("ref_model", ref_model)
    tok = None
    if tokenizer is not None and not isinstance(tokenizer, (str, os.PathLike)):
        if not callable(getattr(tokenizer, "get_vocab", None)):
            raise UsageError(f"tokenizer: expected a path, a hub id or a loaded tokenizer, got "
                             f"{type(tokenizer).__name__}")
        tok, tokenizer = tokenizer, name_of(tokenizer) or f"<{type(tokenizer).__name__} in memory>"
    elif tokenizer is not None:
        tokenizer = os.fspath(tokenizer)
    elif lent is not None:
        tokenizer = name_of(lent)  # the tokenizer of the folder or hub id the model came from
        if tokenizer is None:
            raise UsageError(f"model: a loaded {type(lent).__name__} with no name_or_path to load its tokenizer from: "
                             "pass tokenizer=")
    if lent_ref is not None and lent_ref is lent:
        raise UsageError("ref_model is the model itself: every reward would be 0")
    where(opts, lent, lent_ref)  # the device and dtype of the loaded models (api_options.where)
    if not isinstance(data, (str, os.PathLike)):
        raise UsageError(f"data: expected a folder, a file or a hub dataset id, got {type(data).__name__}")
    o = ScoreOptions(**{**opts, "model": name, "ref_model": ref_name, "data": os.fspath(data), "tokenizer": tokenizer})
    check_options(o, api_name)  # the engine checks them again, naming the CLI's flags: here, the keywords
    if o.output:
        check_output(o, api_name)
    if lent is None and lent_ref is None and tok is None:
        return o, None
    if o.engine != "local":
        raise UsageError(f"{api_name('engine', o.engine)}: models and tokenizers loaded in memory are scored in this "
                         "process; give their paths to score on Ray workers")
    models = {role: m for role, m in (("model", lent), ("ref_model", lent_ref)) if m is not None}
    return o, Given(models, tok)


def score_built(o: ScoreOptions, given: Given | None = None, reuse: dict | None = None):
    """The engine's ScoreRun for built options: the CLI's own path when everything is a path (a run
    finished before is read back), else a run of the lent objects (never read back: engine.api.lent)."""
    from ..score import score as run_score

    scored = run_score(o, reuse=reuse) if given is None else run_score(o, reuse=reuse, read_back=False, given=given)
    if scored.run.get("tokenizer_in_memory") is None:
        # whether the run's tokenizer was an object lent in memory (not loaded from files by
        # models.tokenizer_loading, with their fingerprint); a lent run has no stamp: its run.json
        # is written again with it
        scored.run["tokenizer_in_memory"] = given is not None and given.tokenizer is not None
        if given is not None and o.output:
            atomic_write_json(Path(o.output) / "run.json", scored.run)
    return scored


def score(model, ref_model=None, data=HUB_DEFAULT, tokenizer=None, **options) -> Result:
    """Score `model` on RM-Bench `data`, as `rmbench-fast score` does with the same options.

    model: a reward model (sequence classifier) or a DPO policy: a local folder, a hub id, or a
    loaded transformers model; ref_model: the DPO reference, likewise (without one, DPO rewards are
    reference-free, `ref_free="avg"` by default, as the CLI's); tokenizer: a path or a loaded
    tokenizer (default: the model's, from its folder or hub id). options: the CLI's (`limit=3`,
    `domains=["chat"]`, `output="runs/x"`, `max_batch_size=8`, `quiet=True`, ...). A loaded model is
    scored on its own device and in its own dtype, in eval mode without gradients, and handed back in
    the training mode it had; its scores are not kept in the result store."""
    o, given = build(model, ref_model, data, tokenizer, **options)
    return result_of(score_built(o, given), o)

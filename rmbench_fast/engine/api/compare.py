"""`rmbench_fast.compare` (the Python API, engine.api): results.compare for run folders, results files,
sweep folders and the Results `score` returns.

A sweep folder (`sweep --output DIR`) stands for its checkpoints' run folders in step order
(results.sweep_folder), as on the command line. Results in memory are named by their model; two of
the same model are told apart by what differs between them: their training step (the folder they
were written to, `step-500` or `checkpoint-500`), else their options (`limit=1`), else their order
(`run 2`), never refused as "a run given twice". A bad option is one line naming its keyword
(`level=2`), as engine.option_names names them. Runs of another benchmark (benchmark=, or their
summary.json) go to engine.benchmark_compare.
"""

from __future__ import annotations

import numbers
import os
from pathlib import Path

from ...errors import UsageError
from ..option_names import api_name
from ..options import SCORED_OPTIONS
from ..result import Result

UNLABELLED = ("progress", "overwrite", "output")  # options that say nothing of what a run measured


def _same_run(a, b) -> bool:
    if a is b:
        return True
    paths = (str, os.PathLike)
    return isinstance(a, paths) and isinstance(b, paths) and Path(a).resolve() == Path(b).resolve()


class Comparison(dict):
    """What `rmbench-fast compare --json` writes ("runs", "pairs", "method", "prompts"), with the
    table the CLI prints."""

    def table(self) -> str:
        from ...results.benchmark_compare import format_bench_comparison
        from ...results.compare import format_comparison

        return format_bench_comparison(self) if "benchmark" in self else format_comparison(self)


def _step(r: Result) -> int | None:
    from ..sweep import checkpoint_step

    return checkpoint_step(r.output) if r.output else None


def _options_said(group: list[tuple[int, Result]]) -> list[str] | None:
    """'(limit=1)' per Result of `group` from the options that differ among them (the scored ones
    first), or None when they do not tell them apart."""
    opts = [r.run.get("options") or {} for _, r in group]
    keys = list(dict.fromkeys(k for o in opts for k in o))
    differ = [k for k in keys if k not in UNLABELLED and len({repr(o.get(k)) for o in opts}) > 1]
    scored = [k for k in differ if k in SCORED_OPTIONS]
    for chosen in (scored, differ):
        said = [", ".join(f"{k}={o.get(k)!r}" for k in chosen) for o in opts]
        if chosen and len(set(said)) == len(said):
            return said
    return None


def labels(given: list[tuple[int, Result]]) -> dict[int, str]:
    """Names of Results given without one (position in the arguments -> name): the model, with
    what tells apart Results of the same model (step, else options, else order)."""
    base = {i: str(r.run.get("options", {}).get("model") or f"run {i + 1}") for i, r in given}
    out = dict(base)
    for name in set(base.values()):
        group = [(i, r) for i, r in given if base[i] == name]
        if len(group) < 2:
            continue
        steps = [_step(r) for _, r in group]
        said = _options_said(group)
        for k, (i, _) in enumerate(group):
            if None not in steps and len(set(steps)) == len(steps):
                out[i] = f"{name} (step {steps[k]})"
            elif said is not None:
                out[i] = f"{name} ({said[k]})"
            else:
                out[i] = f"{name} (run {i + 1})"
    return out


def _entries(runs: list, names: list) -> list[tuple[object, str | None, object]]:
    """(run, name, its sweep Checkpoint or None) per run compared: a sweep folder given becomes its
    checkpoints' run folders, named `<name>/<sub-folder>` when it has a name."""
    from ...results.sweep_folder import checkpoints, is_sweep

    for i, r in enumerate(runs):
        if isinstance(r, Result):
            for j in range(i):
                if runs[j] is r:
                    raise UsageError(f"runs {j + 1} and {i + 1} are the same Result: give each run once")
    named = labels([(i, r) for i, r in enumerate(runs) if isinstance(r, Result) and names[i] is None])
    out = []
    for i, (r, name) in enumerate(zip(runs, names)):
        if isinstance(r, (str, os.PathLike)) and is_sweep(r):
            out += [(str(c.folder), None if name is None else f"{name}/{c.dir}", c) for c in checkpoints(r)]
        elif isinstance(r, Result):
            out.append((r, name or named[i], None))
        elif isinstance(r, (str, os.PathLike)):
            out.append((os.fspath(r), name, None))
        else:
            raise UsageError(f"compare: run {i + 1} is a {type(r).__name__}; give a run folder, a results file, a "
                             "sweep folder or a Result of rmbench_fast.score")
    return out


def _baseline(entries, baseline) -> int:
    """baseline= as an index into the runs compared (a sweep counts one run per checkpoint)."""
    from ...results.sweep_folder import matches

    if isinstance(baseline, bool) or not isinstance(baseline, int):
        at = [k for k, (r, _, _) in enumerate(entries) if _same_run(r, baseline)]
        if not at and isinstance(baseline, (str, int)):
            at = [k for k, (_, _, c) in enumerate(entries) if c is not None and matches(c, str(baseline))]
            if len(at) > 1:
                raise UsageError(f"baseline={baseline!r} names several checkpoints: give its path")
        if not at:
            raise UsageError(f"baseline={baseline!r}: not one of the runs compared")
        return at[0]
    if not 0 <= baseline < len(entries):
        raise UsageError(f"baseline={baseline}: not one of the {len(entries)} runs (a sweep counts one per "
                         f"checkpoint)")
    return baseline


def _check(bootstrap, seed, level, top) -> None:
    """The statistics' options, checked as the CLI's click types check theirs, named as keywords."""
    def whole(x) -> bool:
        return isinstance(x, numbers.Integral) and not isinstance(x, bool)

    if not whole(bootstrap) or bootstrap < 0:
        raise UsageError(f"{api_name('bootstrap', bootstrap)}: resamples are a whole number >= 0 (0: no intervals)")
    if not whole(seed):
        raise UsageError(f"{api_name('seed', seed)}: not a valid integer")
    if isinstance(level, bool) or not isinstance(level, numbers.Real) or not 0 < level < 1:
        raise UsageError(f"{api_name('level', level)}: the intervals' level is between 0 and 1 (e.g. 0.95)")
    if not whole(top) or top < 0:
        raise UsageError(f"{api_name('top', top)}: prompts listed per pair, a whole number >= 0")


def _kind(items: list, benchmark) -> tuple[str, list]:
    """The one benchmark of the runs (engine.benchmark_compare.choose) and the runs, a Result of
    another benchmark as its output folder (its results.jsonl holds what is compared)."""
    from ..benchmark_compare import choose
    from ..benchmarks import RM_BENCH

    out = []
    for r, name in items:
        other = isinstance(r, Result) and r.summary.get("benchmark") not in (None, RM_BENCH)
        if other and not r.output:
            raise UsageError(f"compare: {name} is a {r.summary['benchmark']} Result without files: score it with "
                             "output= and compare that folder")
        out.append((r.output if other else r, name))
    paths = [r for r, _ in out if not isinstance(r, Result)]
    kind = choose(paths, benchmark) if paths else RM_BENCH
    if kind != RM_BENCH and len(paths) < len(out):
        raise UsageError(f"compare: RM-Bench Results among {kind} runs: compare runs of one benchmark")
    if benchmark is not None and benchmark != kind:
        raise UsageError(f"{api_name('benchmark', benchmark)}: the runs are RM-Bench runs")
    return kind, out


def compare(*runs, baseline=0, names=None, bootstrap: int = 10_000, seed: int = 0, level: float = 0.95,
            top: int = 10, benchmark: str | None = None) -> Comparison:
    """Runs on the same prompts, as `rmbench-fast compare`: each metric with its interval, each run
    against the baseline with a paired-bootstrap interval and p-value, and the prompts they disagree
    on most. A run is a run folder, a results file, a sweep folder (its checkpoints, in step order)
    or a Result of `score`. baseline: the index of the run the others are compared with (a sweep
    counts one run per checkpoint), that run itself, or a checkpoint's name, sub-folder or step
    (default the first); names: one per run given, in the order given (default: the path, or a
    Result's model, told apart from another Result of the same model by step, options or order; a
    sweep's checkpoints are `<name>/<sub-folder>`); bootstrap, seed, level, top: the CLI's options
    of the same names (resamples, 0 for none; the seed; the intervals' level; prompts listed per pair);
    benchmark: the benchmark the runs are of (default: what their summary.json says). Runs of
    another benchmark than RM-Bench (folders of `score --benchmark`, or Results written to one)
    are compared on the same rows by engine.benchmark_compare (no .table() of RM-Bench's metrics:
    its table is results.benchmark_compare's)."""
    from ...results.compare import Run, compare_runs, load_run
    from ...results.metrics import cells_from_scores

    _check(bootstrap, seed, level, top)
    runs = list(runs)
    names = [None] * len(runs) if names is None else [str(n) for n in names]
    if len(names) != len(runs):
        raise UsageError(f"names: {len(names)} names for {len(runs)} runs")
    entries = _entries(runs, names)
    b = _baseline(entries, baseline)
    kind, ordered = _kind([(r, name) for r, name, _ in [entries[b]] + [e for k, e in enumerate(entries) if k != b]],
                          benchmark)
    if kind != "rm-bench":
        from ..benchmark_compare import compare_bench_runs, load_bench_run

        return Comparison(compare_bench_runs([load_bench_run(r, name) for r, name in ordered], bootstrap, seed, level,
                                             top))
    loaded = []
    for r, name in ordered:
        if isinstance(r, Result):
            loaded.append(Run(name, r.output or name, r.names, list(r.domains), cells_from_scores(r.chosen, r.rejected),
                              r.chosen, r.rejected))
        else:
            loaded.append(load_run(r, name))
    return Comparison(compare_runs(loaded, 0, bootstrap, seed, level, top))

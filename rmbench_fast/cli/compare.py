"""`rmbench-fast compare RUN_A RUN_B ...`: runs on the same prompts, with intervals, paired
differences and the prompts they disagree on most; runs of another benchmark (--benchmark, or
their summary.json) on the same rows, by engine.benchmark_compare."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ..engine.options import BENCHMARK_NAMES
from ..errors import UsageError


def _same(a: str, b: str) -> bool:
    return a.rstrip("/") == b.rstrip("/") or Path(a).resolve() == Path(b).resolve()


@click.command()
@click.argument("runs", nargs=-1, required=True, type=click.Path(), metavar="RUN_A RUN_B [RUN_C ...]")
@click.option("--baseline", default=None, metavar="NAME_OR_PATH",
              help="The run every other run is compared against [default: the first]: one of the RUNs, a "
                   "checkpoint of a sweep folder given (its folder name, sub-folder or step), or another run, "
                   "which is then added first.")
@click.option("--bootstrap", "resamples", default=10_000, show_default=True, type=click.IntRange(min=0),
              help="Bootstrap resamples (0: values only, no intervals or p).")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the resampling.")
@click.option("--level", default=0.95, show_default=True, type=click.FloatRange(0, 1, min_open=True, max_open=True),
              help="Confidence level of the intervals.")
@click.option("--top", default=10, show_default=True, type=click.IntRange(min=0),
              help="Prompts listed per pair: those the two runs disagree on most.")
@click.option("--json", "json_path", default=None, metavar="FILE",
              help="Also write the comparison as JSON to FILE ('-': print it instead of the table).")
@click.option("--benchmark", type=click.Choice(BENCHMARK_NAMES), default=None,
              help="The benchmark the runs are of [default: what their summary.json says]; runs of another "
                   "benchmark are refused.")
def compare(runs, baseline, resamples, seed, level, top, json_path, benchmark):
    """Compare runs on the same prompts: each metric's value with its interval, each run's
    difference from the baseline with a paired-bootstrap interval and p-value, and the prompts on
    which they disagree most.

    Each RUN is a run folder (its results.json, as `score`, `judge` and `sweep` write them), a
    results file: ours, a judge's (per-prompt `cells`), or one of the official RM-Bench scripts (a
    JSON list of items with score_chosen / score_rejected), or a sweep folder (`sweep --output
    DIR`), which stands for its checkpoints' run folders in step order: every checkpoint is
    compared with the first, or with --baseline (a checkpoint's name, sub-folder or step, or a
    path). Prompts are matched by domain and id (an item without id is refused); runs over
    different prompt sets are compared on the prompts they all have (the legend says how many each
    left out, and a note when their overall is not the paper's four-domain number).

    Intervals: a bootstrap over prompts, resampled within each file domain (domain sizes and
    safety's mix of files fixed), percentile intervals; with fewer than 10 prompts in a file domain
    they understate the uncertainty, which a note says (naming the file and its count). With
    --bootstrap 0: values and differences. Differences (run - baseline): the same resampled prompts
    for both runs; p is two-sided, 2 * (1 + the smaller count of resampled differences <= 0 or >=
    0) / (resamples + 1), capped at 1 (so identical runs give 1, and a difference beyond every
    resample 2 / (resamples + 1)). A * marks a difference whose interval excludes 0. Metrics:
    overall, hard, normal, easy, then per domain its average and hard / normal / easy, in percent.
    A judge's run folder adds its share of answers without a verdict (and of failed requests).

    Disagreement of a prompt: the sum over its 9 cells (chosen i beat rejected j: 0/1 for a
    scalar model, win rates for a judge) of |A - B|; --json lists both runs' cells and scores.

    Runs of another benchmark (`score --benchmark`: folders with results.jsonl and summary.json, or
    sweep folders of such runs): rows are matched by subset and id (rows in some runs only are
    counted and named in the legend); the benchmark's score, sections and subsets, recomputed on
    the common rows by its own rules, with intervals (bootstrap over rows within each subset) and
    paired differences; then the rows whose results differ most. See docs/benchmark-sweeps.md.
    """
    from ..engine.benchmark_compare import choose, compare_bench_runs, load_bench_run
    from ..engine.benchmarks import RM_BENCH
    from ..results.benchmark_compare import format_bench_comparison
    from ..results.compare import compare_runs, format_comparison, load_run
    from ..results.sweep_folder import expand, matches

    found = expand([r.rstrip("/") or r for r in runs])  # a sweep folder: its checkpoints' run folders
    runs = [r for r, _ in found]
    if baseline is not None:
        at = [i for i, r in enumerate(runs) if _same(r, baseline)]
        named = [i for i, (_, c) in enumerate(found) if c is not None and matches(c, baseline)]
        if not at and len(named) > 1:
            raise UsageError(f"--baseline {baseline} names several checkpoints "
                             f"({', '.join(runs[i] for i in named)}): give its path")
        if at or named:
            runs.insert(0, runs.pop((at or named)[0]))
        else:
            runs.insert(0, baseline.rstrip("/") or baseline)
    if len(runs) < 2:
        raise UsageError("compare needs at least two runs (RUN_A RUN_B, or RUN_A --baseline RUN_B)")
    seen = []
    for r in runs:
        if any(_same(r, s) for s in seen):
            raise UsageError(f"run {r} is given twice")
        seen.append(r)
    kind = choose(runs, benchmark)  # RM-Bench, or the one other benchmark all the runs are of
    if kind == RM_BENCH:
        result = compare_runs([load_run(r) for r in runs], 0, resamples, seed, level, top)
    else:
        result = compare_bench_runs([load_bench_run(r) for r in runs], resamples, seed, level, top)
    text = json.dumps(result, indent=2)
    if json_path == "-":
        click.echo(text)
        return
    click.echo(format_comparison(result) if kind == RM_BENCH else format_bench_comparison(result))
    if json_path is not None:
        from ..store.atomic import atomic_write_text

        atomic_write_text(json_path, text + "\n")
        click.echo(f"\nwrote {json_path}", err=True)

"""The `rmbench-fast` command line."""

from __future__ import annotations

import json
import os
import sys

import click

from .. import __version__
from ..engine.runtime import pauses_collector, process_age_s, startup_without_collector
from ..errors import RmbenchError, UsageError, one_line
from .adapters import adapters
from .cache import cache
from .compare import compare
from .data import data
from .judge import judge
from .leaderboard import leaderboard
from .options import benchmark_options, default, score_options, scoring_options


def _debug() -> bool:
    return os.environ.get("RMBENCH_DEBUG") not in (None, "", "0")


class _Group(click.Group):
    """Every fault of the user's input (RmbenchError, or a bad option click finds) is one line on
    stderr with exit status 2, no traceback; RMBENCH_DEBUG=1 shows the traceback instead."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except RmbenchError as e:
            if _debug():
                raise
            click.echo(f"rmbench-fast: error: {e.one_line()}", err=True)
            ctx.exit(2)

    def main(self, args=None, prog_name=None, **extra):
        extra.pop("standalone_mode", None)
        try:
            rv = super().main(args=args, prog_name=prog_name, standalone_mode=False, **extra)
        except click.exceptions.Abort:
            click.echo("rmbench-fast: aborted", err=True)
            sys.exit(130)
        except click.ClickException as e:
            if _debug():
                raise
            where = f" ({e.ctx.command_path} --help)" if getattr(e, "ctx", None) is not None else ""
            click.echo(f"rmbench-fast: error: {one_line(e.format_message())}{where}", err=True)
            sys.exit(2 if isinstance(e, click.UsageError) else e.exit_code)
        sys.exit(rv if isinstance(rv, int) else 0)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="rmbench-fast")
def main():
    """Score reward models and DPO models on RM-Bench, fast and with the official accuracies.

    Set RMBENCH_DEBUG=1 to see a traceback instead of the one-line error message.
    """


@main.command()
@click.argument("results", type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON instead of a table.")
@click.option("--bootstrap", type=click.IntRange(min=0), default=default("bootstrap"), show_default=True,
              help="Resamples of the prompts for the 95% intervals (0: none).")
@click.option("--benchmark", default=None, type=click.Choice(["reward-bench", "reward-bench-2", "pairs"]),
              help="Another benchmark's rules for a results.jsonl [default: the one its summary.json names].")
def accuracy(results, as_json, bootstrap, benchmark):
    """Compute RM-Bench accuracy from a RESULTS file.

    RESULTS is a JSON list whose items carry `score_chosen` and `score_rejected` (3 numbers each,
    in style order concise, detailed plain, detailed markdown): the `results.json` that
    `rmbench-fast score` writes (or its run folder), or a results file of the official RM-Bench
    scripts. The domain of each item is its `domain` key, else the prefix of an id such as
    "chat/100", else the file name (chat_filtered_*.json), else all items pool into one domain.

    A generative judge's results (`rmbench-fast judge`) hold `cells` instead: per prompt a 3x3
    matrix of win rates (chosen i against rejected j), summarized by the same formulas. Another
    benchmark's run (`score --benchmark`, `judge --benchmark`): its folder or results.jsonl, by its rules.

    Prints domains x hard/normal/easy/avg and overall, as percentages (a tie counts as wrong,
    as in the official code), with 95% intervals (a bootstrap over prompts within each domain), and
    what the results are of when a run.json lies beside them. For a judge's results, the share of
    answers without a verdict (and of failed requests) comes from the summary.json beside them.
    """
    from ..judges.bench_recompute import accuracy_text
    from ..results.describe import about_line, results_facts
    from ..results.files import read_results
    from ..results.intervals import bootstrap as intervals
    from ..results.metrics import cells_from_scores, format_table, summarize, summarize_cells
    from ..results.verdicts import beside

    if (text := accuracy_text(results, bootstrap, as_json, benchmark)) is not None:  # another benchmark's run
        return click.echo(text)
    kind, *data, domains, subsets, names = read_results(results)
    summary = (summarize if kind == "scores" else summarize_cells)(*data, domains, subsets, names)
    summary.update(beside(results))  # a judge's answers without a verdict: not in its results, in its summary.json
    summary["intervals"] = intervals(cells_from_scores(*data) if kind == "scores" else data[0], domains, bootstrap)
    if as_json:
        click.echo(json.dumps(summary, indent=2))
    else:
        click.echo(format_table(summary, about_line(results_facts(results))))


def _print_run(run, summary, out_dir):
    from ..results.describe import about_line, run_facts
    from ..results.metrics import format_table

    other = summary.get("benchmark") not in (None, "rm-bench")
    if other:
        from ..engine.benchmarks import table

        click.echo(table(summary))
    else:
        click.echo(format_table(summary, about_line(run_facts(run))))
    if run.get("reused"):
        where = f"the result store (computed into {run['reused_from']})" if run.get("read_from") == "store" else out_dir
        return click.echo(f"\nfinished before with the same inputs, options, code and versions: read back from "
                          f"{where} in {run['wall_s']:.2f} s, nothing recomputed (--overwrite scores it again)")
    speed = f"{run['tokens_per_s']:,.0f} tokens/s" if run["tokens_per_s"] else "all from the result store"
    click.echo(f"\n{run['n_sequences']} sequences, {run['real_tokens']:,} tokens "
               f"(padded/real {run['padding_ratio']:.3f}), {run['passes_computed']} of {run['passes']} model "
               f"pass(es) computed in {run['score_s']:.1f} s: {speed}; "
               f"{run['truncated']['sequences']} sequences truncated")
    if out_dir:
        files = f"{out_dir}/results.jsonl" if other else f"{out_dir}/results.json (and .jsonl)"
        click.echo(f"results: {files}, {out_dir}/summary.json, {out_dir}/run.json")


@main.command()
@click.option("--model", required=True, help="Reward model or DPO policy: a local folder or a hub id.")
@click.option("--output", "-o", default=None, help="Folder for results.json, summary.json and run.json.")
@benchmark_options
@scoring_options
def score(model, output, **kw):
    """Score a reward model or DPO model on RM-Bench (or another benchmark: --benchmark) and print its accuracy.

    Writes results.json (the official per-sample format), summary.json and run.json (options,
    versions, model fingerprints, token counts, throughput, truncation) into --output; without it
    no results file is saved, which stderr says. Finished model passes are kept in the result
    store (unless --no-cache), so the same command again recomputes nothing, and an interrupted
    run resumes where it stopped.
    """
    with startup_without_collector() as resume:
        from ..engine.finished import finished_run, stored_run

        o = score_options(model, output, kw)
        if not pauses_collector(o.engine, o.tp):
            resume()
        started = (click.get_current_context().obj or {}).get("started")  # the console command's start
        # the same run finished before, here or into another folder: read back, without loading anything
        result = finished_run(o) or stored_run(o, started=started)
        if result is None:
            from ..engine.score import score as run_score
            result = run_score(o, read_back=False, started=started)
    _print_run(result.run, result.summary, output)
    if not output:
        click.echo("rmbench-fast: nothing saved: no --output given; pass --output DIR to write results.json, "
                   "summary.json and run.json there", err=True)


@main.command()
@click.option("--model", "models", multiple=True, help="A checkpoint (repeat for several).")
@click.option("--checkpoints", default=None, help="A glob of checkpoint folders, e.g. 'runs/dpo/checkpoint-*'.")
@click.option("--output", "-o", required=True, help="Folder for the sweep: one sub-folder per checkpoint, "
              "sweep.csv, sweep.json, sweep.png, report.md.")
@click.option("--no-plots", is_flag=True, help="Skip the pictures and report at the end.")
@click.option("--baseline", default=None, metavar="CHECKPOINT", help="The checkpoint every other is compared with "
              "(paired bootstrap; sweep.json's vs_baseline): a folder name, path or step [default: the first].")
@benchmark_options
@scoring_options
def sweep(models, checkpoints, output, no_plots, baseline, **kw):
    """Score every checkpoint of a training run, ordered by step.

    The step of a checkpoint is trainer_state.json's global_step, else the number ending its folder
    name. The reference model's log-probs and the tokenization are computed once and reused by
    every checkpoint (and by later runs, through the result store): K DPO checkpoints cost K + 1
    model passes, which the last line counts ("4 model passes (3 checkpoints + 1 reference): 4
    computed, 0 from the result store"). sweep.csv / sweep.json are updated after every
    checkpoint; a rerun of the same command after a crash recomputes nothing that finished, and a
    checkpoint whose files changed is scored again. Other benchmarks (--benchmark): docs/benchmark-sweeps.md.
    """
    from ..engine.sweep import find_checkpoints, passes_line, run_sweep, sweep_text

    found = find_checkpoints(models, checkpoints)
    result = run_sweep(score_options(None, None, kw), found, output, plots=not no_plots, echo=click.echo,
                       baseline=baseline)
    click.echo("\n" + sweep_text(result, output))
    click.echo(f"\n{passes_line(result, len(found))}; tables in {output}/sweep.csv and {output}/sweep.json")


@main.command()
@click.argument("run_dir", type=click.Path())
def plot(run_dir):
    """Draw a run's accuracy matrices (heatmaps per domain), its scores with their 95% intervals and,
    for a sweep, accuracy against step (or against model); write report.md (what was scored, the
    tables and pictures, ready for a model card or PR)."""
    from ..results.benchmark_plots import plot_folder

    for path in plot_folder(run_dir):
        click.echo(f"wrote {path}")


@main.command()
@click.option("--output", "-o", default="rmbench-demo", show_default=True, help="Folder for the demo's runs.")
@click.option("--cache-dir", default=None, help="Where the demo models are built once "
              "[default: $RMBENCH_CACHE or ~/.cache/rmbench-fast].")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
def demo(output, cache_dir, quiet):
    """Score the bundled sample with tiny random-weight models, offline.

    Builds (once, cached) a small reward model and a DPO policy/reference pair with random
    weights, scores the 12-prompt sample that ships with the package in RM mode and DPO mode, and
    prints the accuracy tables and throughput. Random weights score near chance (50%).
    """
    from .demo import run_demo

    run_demo(output, cache_dir, progress=not quiet, echo=click.echo, print_run=_print_run)


@main.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True}, add_help_option=False)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def bench(args):
    """Throughput against the official flow (runs benchmarks/throughput.py; `bench --help` lists its
    options). Needs a source checkout and `bash benchmarks/peer/setup.sh` once."""
    import runpy
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "throughput.py"
    if not script.is_file():
        raise UsageError("bench runs benchmarks/throughput.py of a source checkout (git clone the project, then "
                         "pip install -e .); this installation has no benchmarks folder")
    sys.argv = [str(script), *args]
    runpy.run_path(str(script), run_name="__main__")


main.add_command(adapters)
main.add_command(cache)
main.add_command(data)
main.add_command(judge)
main.add_command(leaderboard)
main.add_command(compare)


def entry():
    """The console command: the CLI, then, once everything is written and flushed, an exit that
    skips the interpreter's teardown, which spends about a second freeing torch and transformers
    modules and holds nothing of ours (results are written atomically, the store is closed).
    Ray's shutdown must run, so with Ray loaded the exit is the ordinary one."""
    import time

    age = process_age_s()
    try:
        main(obj={"started": None if age is None else time.perf_counter() - age})  # run.json's timing counts it
        code = 0
    except SystemExit as e:
        code = e.code
    if isinstance(code, str):
        print(code, file=sys.stderr)
        code = 1
    code = 0 if code is None else int(code)
    if "ray" in sys.modules:
        sys.exit(code)
    import logging

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, OSError):  # a reader that went away (`| head`)
            pass
    os._exit(code)


if __name__ == "__main__":  # pragma: no cover
    entry()

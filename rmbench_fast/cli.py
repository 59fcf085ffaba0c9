"""The `rmbench-fast` command line."""

from __future__ import annotations

import json
import os
import sys

import click

from . import __version__
from .errors import RmbenchError


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
            click.echo(f"rmbench-fast: error: {' '.join(e.format_message().split())}{where}", err=True)
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
def accuracy(results, as_json):
    """Compute RM-Bench accuracy from a RESULTS file.

    RESULTS is a JSON list whose items carry `score_chosen` and `score_rejected` (3 numbers each,
    in style order concise, detailed plain, detailed markdown): the `results.json` that
    `rmbench-fast score` writes (or its run folder), or a results file of the official RM-Bench
    scripts. The domain of each item is its `domain` key, else the prefix of an id such as
    "chat/100", else the file name (chat_filtered_*.json), else all items pool into one domain.

    Prints domains x hard/normal/easy/avg and overall, as percentages (a tie counts as wrong,
    as in the official code).
    """
    from .metrics import format_table, summarize
    from .results import read_scores

    chosen, rejected, domains, subsets, names = read_scores(results)
    summary = summarize(chosen, rejected, domains, subsets, names)
    if as_json:
        click.echo(json.dumps(summary, indent=2))
    else:
        click.echo(format_table(summary))


@main.group()
def data():
    """Inspect RM-Bench data: `stats` and `validate`.

    PATH is a folder (its *_filtered.json files, or its total_dataset.json), one .json list or
    .jsonl file, or a hub dataset id such as THU-KEG/RM-Bench (downloaded when online).
    """


@data.command()
@click.argument("path")
@click.option("--domains", multiple=True, help="Only these domains (chat, code, math, safety-refuse, "
              "safety-response, or safety for both); repeat or separate with commas.")
@click.option("--limit", type=int, default=None, help="Only the first N prompts of each domain.")
@click.option("--json", "as_json", is_flag=True, help="Print the statistics as JSON.")
def stats(path, domains, limit, as_json):
    """Prompts per domain and subset, and length statistics (characters) of prompts and responses."""
    from .data import STYLES, dataset_stats, load_dataset

    st = dataset_stats(load_dataset(path, domains=domains, limit=limit))
    if as_json:
        click.echo(json.dumps(st, indent=2))
        return
    click.echo(f"{st['n_prompts']} prompts, {6 * st['n_prompts']} responses")
    for domain, d in st["domains"].items():
        subsets = ", ".join(f"{k} {v}" for k, v in d["subsets"].items())
        click.echo(f"\n{domain}: {d['n_prompts']} prompts ({subsets})")
        click.echo(f"  {'characters':<28}{'mean':>9}{'median':>9}{'p95':>9}{'max':>9}")
        for key in ["prompt"] + [f"{side}_{s}" for side in ("chosen", "rejected") for s in STYLES]:
            c = d["chars"][key]
            click.echo(f"  {key:<28}{c['mean']:>9.0f}{c['median']:>9}{c['p95']:>9}{c['max']:>9}")


@data.command()
@click.argument("path")
def validate(path):
    """Check every item of PATH; print a one-line summary, or the first fault (file, item, key)
    with exit status 2."""
    from .data import load_dataset

    samples = load_dataset(path)
    per_domain = {}
    for s in samples:
        per_domain[s.domain] = per_domain.get(s.domain, 0) + 1
    click.echo(f"ok: {len(samples)} prompts ({', '.join(f'{d} {n}' for d, n in per_domain.items())})")


def _print_run(run, summary, out_dir):
    from .metrics import format_table

    click.echo(format_table(summary))
    speed = f"{run['tokens_per_s']:,.0f} tokens/s" if run["tokens_per_s"] else "all from the result store"
    click.echo(f"\n{run['n_sequences']} sequences, {run['real_tokens']:,} tokens "
               f"(padded/real {run['padding_ratio']:.3f}), {run['passes_computed']} of {run['passes']} model "
               f"pass(es) computed in {run['score_s']:.1f} s: {speed}; "
               f"{run['truncated']['sequences']} sequences truncated")
    if out_dir:
        click.echo(f"results: {out_dir}/results.json, {out_dir}/summary.json, {out_dir}/run.json")


def _scoring_options(f):
    """The data, template, batching and model options that score and sweep share."""
    opts = [
        click.option("--ref-model", default=None, help="DPO reference model (reward = sum log p_policy - log p_ref)."),
        click.option("--mode", type=click.Choice(["auto", "rm", "dpo"]), default="auto", show_default=True,
                     help="auto: *ForSequenceClassification -> rm, causal LM -> dpo."),
        click.option("--ref-free", type=click.Choice(["sum", "avg", "norm"]), default=None,
                     help="DPO without a reference: sum, avg (per token; the official default) or norm "
                          "(minus the L2 norm of the token log-probs)."),
        click.option("--data", default="THU-KEG/RM-Bench", show_default=True,
                     help="RM-Bench data: folder, .json/.jsonl file, or hub dataset id."),
        click.option("--tokenizer", default=None, help="Tokenizer to use instead of the model's."),
        click.option("--chat-template", default=None,
                     help="Built-in template name (tulu) or a Jinja file. Default: the tokenizer's own chat "
                          "template, else tulu, as the official scripts."),
        click.option("--dtype", type=click.Choice(["float32", "bfloat16", "float16"]), default=None,
                     help="Model dtype [default: float32 on CPU, bfloat16 on GPU]."),
        click.option("--device", default=None, help="cpu, cuda, cuda:1, ... [default: cuda when available]."),
        click.option("--max-tokens-per-batch", type=int, default=None,
                     help="Padded tokens (rows x longest row) per batch [default: 16384 on GPU, 2048 on CPU, "
                          "where larger batches only add page faults]."),
        click.option("--max-batch-size", type=int, default=None, help="At most this many sequences per batch."),
        click.option("--compat", type=click.Choice(["official"]), default=None,
                     help="Reproduce the official pipeline's truncation (RM: left, 2048 tokens; DPO: prompt "
                          "to its last 128 tokens, responses to 1920) and its top-label RM score."),
        click.option("--label-index", type=int, default=None, help="Logit column of a multi-label reward head."),
        click.option("--logprob-impl", type=click.Choice(["auto", "triton", "torch", "plain"]), default="auto",
                     show_default=True, help="DPO log-prob path: the fused Triton kernel (GPU), its chunked "
                     "torch twin (CPU), or plain (the model's full logits). auto: triton on CUDA, torch otherwise."),
        click.option("--share-prefix/--no-share-prefix", default=False, show_default=True,
                     help="Causal decoders: run each prompt's shared prefix (its six sequences start with the "
                          "same templated prompt) once, and the responses on top of its KV cache. Saves the "
                          "prompt tokens (13-16% on RM-Bench) at the cost of masked attention over the cache; "
                          "on CPU at RM-Bench's prompt lengths the two about cancel (see README)."),
        click.option("--prefix-cache-mb", type=int, default=None,
                     help="Memory for shared-prefix KV caches at a time; prompts are taken in waves that fit "
                          "[default: 1024 on CPU, a tenth of the GPU's memory]."),
        click.option("--trust-remote-code", is_flag=True,
                     help="Allow code shipped with the model to run (off by default)."),
        click.option("--limit", type=int, default=None, help="Only the first N prompts of each domain."),
        click.option("--domains", multiple=True, help="Only these domains (chat, code, math, safety-refuse, "
                     "safety-response, safety); repeat or separate with commas."),
        click.option("--cache-dir", default=None, help="The result store: finished work is reused and "
                     "interrupted work resumed [default: $RMBENCH_CACHE/store, ~/.cache/rmbench-fast/store]."),
        click.option("--no-cache", is_flag=True, help="Turn the result store off: compute everything."),
        click.option("--engine", type=click.Choice(["local", "ray"]), default="local", show_default=True,
                     help="ray: spread the work over Ray workers (pip install -e '.[ray]')."),
        click.option("--ray-address", default=None, help="Ray cluster to join [default: RAY_ADDRESS, else start "
                     "a local Ray instance]."),
        click.option("--num-workers", type=int, default=2, show_default=True, help="Ray workers (one model each)."),
        click.option("--gpus-per-worker", type=float, default=0.0, show_default=True,
                     help="GPUs per Ray worker (0: CPU workers)."),
        click.option("--allow-pickle-weights", is_flag=True, help="Load pickle-format weights (.bin), which can "
                     "run code; without it only safetensors load."),
        click.option("--overwrite", is_flag=True, help="Replace another run's results in the output folder."),
        click.option("--quiet", "-q", is_flag=True, help="No progress bar."),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


def _options(model, output, kw):
    """ScoreOptions from the shared options: same names, except --no-cache, --quiet and --domains."""
    from dataclasses import fields

    from .options import ScoreOptions

    names = {f.name for f in fields(ScoreOptions)}
    given = {k: v for k, v in kw.items() if k in names}
    given.update(model=model, output=output, domains=tuple(kw["domains"]), cache=not kw["no_cache"],
                 progress=not kw["quiet"])
    return ScoreOptions(**given)


@main.command()
@click.option("--model", required=True, help="Reward model or DPO policy: a local folder or a hub id.")
@click.option("--output", "-o", default=None, help="Folder for results.json, summary.json and run.json.")
@_scoring_options
def score(model, output, **kw):
    """Score a reward model or DPO model on RM-Bench and print its accuracy.

    Writes results.json (the official per-sample format), summary.json and run.json (options,
    versions, model fingerprints, token counts, throughput, truncation) into --output. Finished
    model passes are kept in the result store, so the same command again recomputes nothing, and
    an interrupted run resumes where it stopped.
    """
    from .engine import score as run_score

    result = run_score(_options(model, output, kw))
    _print_run(result.run, result.summary, output)


@main.command()
@click.option("--model", "models", multiple=True, help="A checkpoint (repeat for several).")
@click.option("--checkpoints", default=None, help="A glob of checkpoint folders, e.g. 'runs/dpo/checkpoint-*'.")
@click.option("--output", "-o", required=True, help="Folder for the sweep: one sub-folder per checkpoint, "
              "sweep.csv, sweep.json, sweep.png, report.md.")
@click.option("--no-plots", is_flag=True, help="Skip the pictures and report at the end.")
@_scoring_options
def sweep(models, checkpoints, output, no_plots, **kw):
    """Score every checkpoint of a training run, ordered by step.

    The step of a checkpoint is trainer_state.json's global_step, else the number ending its folder
    name. The reference model's log-probs and the tokenization are computed once and reused by
    every checkpoint (and by later runs, through the result store): K DPO checkpoints cost K + 1
    model passes. sweep.csv / sweep.json are updated after every checkpoint; a rerun of the same
    command after a crash recomputes nothing that finished, and a checkpoint whose files changed
    is scored again.
    """
    from .sweep import find_checkpoints, run_sweep

    found = find_checkpoints(models, checkpoints)
    result = run_sweep(_options(None, None, kw), found, output, plots=not no_plots, echo=click.echo)
    from .plots import _table

    click.echo("\n" + _table(result["checkpoints"]))
    click.echo(f"\n{result['model_passes_computed']} model passes computed, {result['model_passes_cached']} from "
               f"the result store; tables in {output}/sweep.csv and {output}/sweep.json")


@main.command()
@click.argument("run_dir", type=click.Path())
def plot(run_dir):
    """Draw a run's accuracy matrices (heatmaps per domain) and, for a sweep, accuracy against step;
    write report.md (table and pictures, ready for a model card or PR)."""
    from .plots import plot_run

    for path in plot_run(run_dir):
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


@main.command()
@click.option("--data", default="../shared/rm-bench", show_default=True, help="RM-Bench folder both flows read.")
@click.option("--limit", type=int, default=8, show_default=True, help="Prompts per domain.")
@click.option("--rounds", type=int, default=3, show_default=True, help="Alternating rounds; medians are reported.")
@click.option("--modes", multiple=True, type=click.Choice(["rm", "dpo", "dpo-ref-free"]),
              default=("rm", "dpo", "dpo-ref-free"), show_default=True)
@click.option("--out", default=None, help="JSON file [default: benchmarks/results/throughput-cpu.json].")
@click.option("--model-dir", default=None, help="Where the random-weight models are built once.")
@click.option("--vocab", type=int, default=32000, show_default=True)
@click.option("--hidden", type=int, default=512, show_default=True)
@click.option("--layers", type=int, default=4, show_default=True)
@click.option("--heads", type=int, default=8, show_default=True)
@click.option("--peer-python", default=None, help="Python of the official flow's environment "
              "[default: benchmarks/peer/.venv, made by benchmarks/peer/setup.sh].")
@click.option("--share-prefix", is_flag=True, help="Run rmbench-fast with --share-prefix.")
def bench(data, limit, rounds, modes, out, model_dir, vocab, hidden, layers, heads, peer_python, share_prefix):
    """Throughput against the official RM-Bench flow (allenai's rewardbench), same model and data.

    Builds random-weight Llama-style models (fp32, CPU), runs rmbench-fast and the official flow
    alternately as subprocesses for RM, DPO with a reference and DPO reference-free, and reports
    tokens/s, speedup, peak RSS, padded/real tokens, model-FLOP efficiency, score parity, and the
    speedup bound: the official wall time over the model's FLOPs at the measured matmul rate (what
    any implementation doing those FLOPs could reach at best).
    Needs a source checkout (benchmarks/peer) and `bash benchmarks/peer/setup.sh` once.
    """
    from .bench import main as run_bench

    run_bench(data, limit, rounds, list(modes), out, model_dir, vocab, hidden, layers, heads, peer_python,
              echo=click.echo, share_prefix=share_prefix)


def entry():
    """The console command: the CLI, then, once everything is written and flushed, an exit that
    skips the interpreter's teardown, which spends about a second freeing torch and transformers
    modules and holds nothing of ours (results are written atomically, the store is closed).
    Ray's shutdown must run, so with Ray loaded the exit is the ordinary one."""
    try:
        main()
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

"""The `rmbench-fast` command line."""

from __future__ import annotations

import json
import os
import sys

import click

from . import __version__
from .errors import RmbenchError


class _Group(click.Group):
    """Reports an RmbenchError as one line on stderr with exit status 2; RMBENCH_DEBUG=1 shows the
    traceback instead."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except RmbenchError as e:
            if os.environ.get("RMBENCH_DEBUG") not in (None, "", "0"):
                raise
            click.echo(f"rmbench-fast: error: {e.one_line()}", err=True)
            ctx.exit(2)


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


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

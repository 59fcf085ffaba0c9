"""`rmbench-fast data stats|validate`: look at RM-Bench data before scoring it."""

from __future__ import annotations

import json

import click


@click.group()
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
    from ..inputs.data import STYLES, dataset_stats, load_dataset
    from ..inputs.layout import PER_PROMPT

    st = dataset_stats(load_dataset(path, domains=domains, limit=limit))
    if as_json:
        click.echo(json.dumps(st, indent=2))
        return
    click.echo(f"{st['n_prompts']} prompts, {PER_PROMPT * st['n_prompts']} responses")
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
    from ..inputs.data import load_dataset

    samples = load_dataset(path)
    per_domain = {}
    for s in samples:
        per_domain[s.domain] = per_domain.get(s.domain, 0) + 1
    click.echo(f"ok: {len(samples)} prompts ({', '.join(f'{d} {n}' for d, n in per_domain.items())})")

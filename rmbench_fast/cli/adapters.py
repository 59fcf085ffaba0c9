"""`rmbench-fast adapters`: the reward-model families scored otherwise than as a plain classifier."""

from __future__ import annotations

import json

import click


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the adapters as JSON.")
def adapters(as_json):
    """The reward-model adapters: families of reward models that are not a plain sequence classifier
    with one logit, each scored as the official flow scores it. `score` picks one from the model's
    name (the official REWARD_MODEL_CONFIG names), else its architecture or auto_map; --adapter NAME
    picks one by hand."""
    from ..adapters import ADAPTERS

    rows = [{"name": a.name, "summary": a.summary, "official_names": list(a.official_names),
             "architectures": list(a.architectures), "auto_map": list(a.auto_map), "weights": list(a.weights),
             "files": list(a.files), "notes": list(a.notes)}
            for a in ADAPTERS]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    for r in rows:
        click.echo(f"{r['name']}: {r['summary']}")
        for key in ("official_names", "architectures", "auto_map", "weights", "files"):
            if r[key]:
                click.echo(f"  {key.replace('_', ' ')}: {', '.join(r[key])}")
        for n in r["notes"]:
            click.echo(f"  note: {n}")

"""`rmbench-fast cache info|clear`: see and reclaim the result store's disk."""

from __future__ import annotations

import json

import click


@click.group()
def cache():
    """The result store: `info` shows what it holds, `clear` empties it.

    The store keeps every finished model pass and tokenization (see `score --help`), under
    --cache-dir, else $RMBENCH_CACHE/store, else ~/.cache/rmbench-fast/store.
    """


@cache.command()
@click.option("--cache-dir", default=None, help="The store [default: $RMBENCH_CACHE/store].")
@click.option("--json", "as_json", is_flag=True, help="Print the numbers as JSON.")
def info(cache_dir, as_json):
    """Size, entries (finished and partial) and the oldest and newest entry of the store."""
    from ..store.entries import store_usage
    from ..store.paths import store_root

    u = store_usage(store_root(cache_dir))
    if as_json:
        click.echo(json.dumps(u, indent=2))
        return
    click.echo(f"{u['root']}: {u['entries']} entries, {u['partial']} partial, {u['judge_journals']} judge journals, "
               f"{u['bytes'] / 2**20:,.1f} MiB")
    if u["oldest"]:
        click.echo(f"oldest {u['oldest']}, newest {u['newest']}")


@cache.command()
@click.option("--cache-dir", default=None, help="The store [default: $RMBENCH_CACHE/store].")
def clear(cache_dir):
    """Delete every entry of the store (finished, partial, judge journals, and the cached file hashes)."""
    from ..store.entries import clear_store
    from ..store.paths import store_root

    root = store_root(cache_dir)
    u = clear_store(root)
    click.echo(f"removed {u['entries']} entries, {u['partial']} partial and {u['judge_journals']} judge journals "
               f"({u['bytes'] / 2**20:,.1f} MiB) "
               f"from {root}")

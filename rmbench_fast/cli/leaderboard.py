"""`rmbench-fast leaderboard RUN ...`: rows for the RM-Bench leaderboard, as Markdown, CSV or JSON."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ..errors import DataError, UsageError


def _read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(path, "no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(path, f"cannot be read ({e})") from None
    except json.JSONDecodeError as e:
        raise DataError(path, f"not JSON ({e.msg} at line {e.lineno}, column {e.colno})") from None


def _model_name(path: Path) -> str:
    """run.json's options.model (a local path shortened to its folder's name), else the run
    folder's or results file's name."""
    folder = path if path.is_dir() else path.parent if path.name == "results.json" else None
    if folder is not None and (folder / "run.json").is_file():
        run = _read_json(folder / "run.json")
        model = (run.get("options") or {}).get("model") if isinstance(run, dict) else None
        if isinstance(model, str) and model.strip():
            model = model.strip().rstrip("/")
            return Path(model).name if model.startswith(("/", "./", "../", "~")) or model.count("/") > 1 else model
    if folder is not None:
        return folder.resolve().name
    return path.stem


def load_summary(run: str) -> tuple[dict, str]:
    """(summary, model name) of RUN: a run folder's summary.json, else its results.json summarized
    again; or a results file (ours, a judge's, or the official scripts')."""
    path = Path(run)
    if path.is_dir() and (path / "summary.json").is_file():
        summary = _read_json(path / "summary.json")
        if not isinstance(summary, dict):
            raise DataError(path / "summary.json", "top level must be a JSON object (a run's summary)")
        return summary, _model_name(path)
    if path.is_dir() and not (path / "results.json").is_file():
        raise DataError(path, "is a folder without summary.json or results.json (a run) or sweep.json (a sweep)")
    from ..results.files import read_results
    from ..results.metrics import summarize, summarize_cells

    kind, *data, domains, subsets, names = read_results(path)
    summary = (summarize if kind == "scores" else summarize_cells)(*data, domains, subsets, names)
    return summary, _model_name(path)


def load_summaries(run: str) -> list[tuple[dict, str]]:
    """[(summary, model name)] of RUN: one for a run folder or results file (load_summary), one per
    checkpoint in step order for a sweep folder, each named as its run folder is (its sub-folder's
    name where two checkpoints' names are the same)."""
    from ..results.sweep_folder import checkpoints, is_sweep

    if not is_sweep(run):
        return [load_summary(run)]
    found = [(c, *load_summary(str(c.folder))) for c in checkpoints(run)]
    names = [name for _, _, name in found]
    return [(summary, name if names.count(name) == 1 else c.dir) for c, summary, name in found]


@click.command()
@click.argument("runs", nargs=-1, required=True, type=click.Path())
@click.option("--output", "-o", "prefix", default=None, metavar="FILE_PREFIX",
              help="Also write FILE_PREFIX.md and FILE_PREFIX.csv.")
@click.option("--json", "as_json", is_flag=True, help="Print the rows as JSON, keyed by column name.")
@click.option("--benchmark", default=None, type=click.Choice(["rm-bench", "reward-bench", "reward-bench-2", "pairs"]),
              help="The benchmark the runs must be of (a run of another is an error naming it) "
                   "[default: what their summary.json says].")
def leaderboard(runs, prefix, as_json, benchmark):
    """Rows for the RM-Bench leaderboard: Chat, Math, Code, Safety, Easy, Normal, Hard, Overall.

    Each RUN is a run folder (its summary.json, else its results.json), a results file (ours, a
    judge's, or the official scripts'), or a sweep folder (`sweep --output DIR`: a row per
    checkpoint, in step order). The model's name is run.json's --model, else the folder's or
    file's name. Percentages with one decimal, by the leaderboard's formulas: a domain is the mean
    of its hard, normal and easy accuracy; Easy, Normal and Hard are the means over the four
    domains; Overall = (Chat + Math + Code + Safety) / 4 = (Easy + Normal + Hard) / 3. A judge's
    rows add No verdict and Failed: its share of answers without a verdict and of failed requests.

    Prints a Markdown table (--json: the rows as JSON, with the unrounded percentages under
    "unrounded"). A domain missing or partial (fewer prompts than the benchmark's: chat 129,
    math 529, code 228, safety 441), or a safety whose two files hold other counts than the
    benchmark's 284 and 157, is a warning on stderr: such a row is not comparable with the
    leaderboard's ("complete": false, the rule of summary.json's `complete`).

    Runs of another benchmark (score --benchmark) get that benchmark's published columns: Score and
    RewardBench's sections (Chat, Chat Hard, Safety, Reasoning, Prior Sets), RewardBench 2's
    subsets, or your pairs' subsets.
    """
    from ..results.leaderboard import row, to_csv, to_markdown, warnings
    from ..store.atomic import atomic_write_text

    found = [pair for run in runs for pair in load_summaries(run)]
    if benchmark is not None:
        wrong = [(name, s.get("benchmark") or "rm-bench") for s, name in found
                 if (s.get("benchmark") or "rm-bench") != benchmark]
        if wrong:
            raise UsageError(f"leaderboard --benchmark {benchmark}: {wrong[0][0]} is a run of {wrong[0][1]}")
    other = [s.get("benchmark") not in (None, "rm-bench") for s, _ in found]
    if any(other):
        from ..results.benchmark_board import rows as benchmark_rows

        if not all(other):
            raise UsageError("leaderboard: RM-Bench runs and another benchmark's in one table; one table each")
        rows = benchmark_rows(found)
    else:
        rows = []
        for summary, name in found:
            rows.append(row(summary, name, None))
            for w in warnings(summary, name):
                click.echo(f"rmbench-fast: warning: {w}", err=True)
    if prefix is not None:
        for ext, text in ((".md", to_markdown(rows)), (".csv", to_csv(rows))):
            atomic_write_text(prefix + ext, text)
        click.echo(f"wrote {prefix}.md and {prefix}.csv", err=True)
    click.echo(json.dumps(rows, indent=2) if as_json else to_markdown(rows), nl=as_json)

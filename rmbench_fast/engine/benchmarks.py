"""Scoring another preference benchmark than RM-Bench (`score --benchmark NAME`, or detected from the
data): its rows (rmbench_fast.tasks) become samples that every scorer encodes as it encodes
RM-Bench's (the prompt through the chat format, each response after it), each response gets one
score, and the benchmark turns the scores into its own numbers: summary.json holds `benchmark`,
`score`, `subsets` and (RewardBench) `sections`, as fractions; results.jsonl holds every response's
score, so that each number can be recomputed from them.

A prompt or response may be a conversation (a list of {role, content} messages: RewardBench's prior
sets, conversational pairs): the benchmark's `formatted` says how its turns go to the chat format
(RewardBench: roles by position, as rewardbench's prepare_dialogue), which renders every turn.

The engine's options apply as on RM-Bench: --share-prefix (a row's responses share its prompt),
--tp, --engine ray, --limit (the first N rows of each subset), --domains (subset names), and a known
hub id as --data (tasks.hub: the split the official scripts read).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import UsageError
from ..inputs.data import HUB_DEFAULT
from ..store.atomic import atomic_write_json, atomic_write_text
from .options import BENCHMARK_NAMES, RM_BENCH

log = logging.getLogger("rmbench_fast")

@dataclass
class TaskSample:
    """A benchmark's row as the scorers see a sample: `responses` is its scoring order (chosen, then
    rejected); `domain` is its subset, which --limit counts. `prompt` and each response: a string,
    or a list of {role, content} messages (the benchmark's `formatted` row)."""
    domain: str
    id: object
    prompt: object
    chosen: tuple
    rejected: tuple
    subset: str
    source: str
    index: int
    row: object = field(repr=False, compare=False)

    @property
    def responses(self) -> list:
        return list(self.chosen) + list(self.rejected)

    @property
    def key(self) -> tuple:
        return (self.subset, self.id)

    @property
    def name(self) -> str:
        return f"{self.subset}/{self.id}"


def benchmark_of(o) -> str:
    """--benchmark, else the one the data names: a known hub id, RM-Bench's files, or the schema of its
    rows (one line on stderr says which, when it is not RM-Bench)."""
    from ..tasks import detect, detect_hub_id, read_items

    if o.benchmark:
        return o.benchmark
    if str(o.data) == HUB_DEFAULT:
        return RM_BENCH
    name = detect_hub_id(o.data)
    path = Path(o.data).expanduser()
    if name is None:
        if not path.exists() or _rm_bench_files(path):
            return RM_BENCH  # a hub id (RM-Bench's loader fetches it) or RM-Bench's own files
        try:
            name = detect(read_items(path)[:1])
        except ValueError:  # RM-Bench's loader says what is wrong with it, as it always has
            return RM_BENCH
    if name != RM_BENCH:
        log.warning("--data %s: scored as %s (detected from its %s; --benchmark names another)", o.data, name,
                    "hub id" if detect_hub_id(o.data) else "rows' keys")
    return name


def _rm_bench_files(path: Path) -> bool:
    """RM-Bench's own file names: <domain>_filtered.json, total_dataset.json (or a folder of them)."""
    names = [p.name for p in path.iterdir()] if path.is_dir() else [path.name]
    return any(n.endswith("_filtered.json") or n == "total_dataset.json" for n in names)


def check(o, name: str) -> None:
    """The options this benchmark's runs take (one line each for those they do not take yet)."""
    if name not in BENCHMARK_NAMES:
        raise UsageError(f"--benchmark {name}: expected one of {', '.join(BENCHMARK_NAMES)}")
    if name == RM_BENCH:
        if o.tie_credit:
            raise UsageError("--tie-credit: only for --benchmark pairs (RM-Bench counts a tie as wrong)")
        return
    if o.tie_credit and name != "pairs":
        raise UsageError(f"--tie-credit: only for --benchmark pairs ({name} counts a tie as wrong)")


def load_samples(o, name: str) -> list[TaskSample]:
    """The benchmark's rows as samples, the first --limit of each subset."""
    from ..tasks import get

    from ..tasks.hub import hub_id, hub_items

    bench = get(name, **({"tie_credit": o.tie_credit} if name == "pairs" and o.tie_credit else {}))
    repo = hub_id(o.data)
    if repo is not None:  # a known hub id, asked for by name: its official split(s), fetched
        items, notes = hub_items(repo)
        if notes["skipped"]:
            log.warning("--data %s: %s left out, as rewardbench leaves them out", repo,
                        ", ".join(f"{k} ({n} rows)" for k, n in notes["skipped"].items()))
        rows = bench.rows(items, repo)
    else:
        rows = bench.load(o.data)
    rows = _only_subsets(rows, subsets_of(getattr(o, "domains", ())), o.data)
    taken: dict[str, int] = {}
    out = []
    for row in rows:
        if o.limit is not None and taken.get(row.subset, 0) >= o.limit:
            continue
        taken[row.subset] = taken.get(row.subset, 0) + 1
        prompt, chosen, rejected = bench.formatted(row)  # a conversation: rendered turn by turn
        out.append(TaskSample(row.subset, row.id, prompt, tuple(chosen), tuple(rejected), row.subset,
                              row.source, row.index, row))
    return out


def subsets_of(domains) -> tuple:
    """--domains for another benchmark: its subset names (repeated, or separated by commas)."""
    return tuple(d.strip() for part in domains or () for d in str(part).split(",") if d.strip())


def _only_subsets(rows: list, wanted: tuple, data) -> list:
    """The rows of the subsets --domains names (all without it); a name no row has is an error listing
    the data's subsets."""
    if not wanted:
        return rows
    have = list(dict.fromkeys(r.subset for r in rows))
    missing = [w for w in wanted if w not in have]
    if missing:
        raise UsageError(f"--domains {','.join(missing)}: no such subset in {data} (its subsets: {', '.join(have)})")
    return [r for r in rows if r.subset in wanted]


def per_row(samples: list[TaskSample], scores: np.ndarray) -> list[list[float]]:
    """The flat per-sequence scores cut into each row's (chosen, then rejected)."""
    ends = np.cumsum([len(s.responses) for s in samples])
    return [scores[a:b].astype(float).tolist() for a, b in zip(np.concatenate([[0], ends[:-1]]), ends)]


def summarize(o, name: str, samples: list[TaskSample], scores: np.ndarray, scorer: dict) -> dict:
    """The benchmark's numbers; scorer: the scorer's describe(). RewardBench 2 has no official DPO
    mode (run_v2.py scores reward models only): a DPO run on it says "official": false."""
    from ..tasks import get

    bench = get(name, **({"tie_credit": o.tie_credit} if name == "pairs" and o.tie_credit else {}))
    from .benchmark_intervals import intervals

    rows, row_scores = [s.row for s in samples], per_row(samples, scores)
    out = {**bench.aggregate(rows, row_scores), "benchmark": name, "n_rows": len(rows), "rules": bench.official}
    if name == "reward-bench-2" and scorer.get("mode") == "dpo":
        out["official"] = False
    out["intervals"] = intervals(name, bench, rows, row_scores, out, o.bootstrap)  # None: --bootstrap 0
    return out


def write(out_dir: str, name: str, samples: list[TaskSample], scores: np.ndarray, summary: dict) -> None:
    """results.jsonl (every row: id, subset, its responses' scores and its result) and summary.json."""
    from ..tasks import get

    bench = get(name)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    lines = []
    for s, row_scores in zip(samples, per_row(samples, scores)):
        lines.append(json.dumps({"id": s.id, "subset": s.subset, "chosen_scores": row_scores[:len(s.chosen)],
                                 "rejected_scores": row_scores[len(s.chosen):],
                                 "result": bench.row_result(s.row, row_scores)}, ensure_ascii=False))
    atomic_write_text(out / "results.jsonl", "\n".join(lines) + "\n")
    atomic_write_json(out / "summary.json", summary)


def table(summary: dict) -> str:
    """The printed numbers: each subset, each section, the score (percent)."""
    lines = [f"{summary['benchmark']}: {summary.get('n_rows', '?')} rows"]
    width = max([len(k) for k in list(summary["subsets"]) + list(summary.get("sections") or {})] + [5])
    for title, part in (("subsets", summary["subsets"]), ("sections", summary.get("sections") or {})):
        if part:
            lines.append(f"  {title}:")
            lines += [f"    {k.ljust(width)}  {100 * v:6.2f}" for k, v in part.items()]
    lines.append(f"  {'score'.ljust(width + 2)}  {100 * summary['score']:6.2f}")
    return "\n".join(lines)


def results_file(path) -> Path | None:
    """The results.jsonl of another benchmark's run (a run folder, or the file), else None."""
    p = Path(path).expanduser()
    p = p / "results.jsonl" if p.is_dir() else p
    if p.name != "results.jsonl" or not p.is_file():
        return None
    first = p.read_text(encoding="utf-8").split("\n", 1)[0]
    try:
        return p if "chosen_scores" in json.loads(first) else None
    except ValueError:
        return None


def recompute(path: Path, resamples: int, tie_credit: float | None = None, name: str | None = None) -> dict:
    """The numbers of a run from its results.jsonl (every response's score) and the benchmark `name`,
    else the one its summary.json or run.json names: what `accuracy` prints for such a run."""
    from ..errors import DataError
    from ..tasks import get
    from ..tasks.base import Row
    from .benchmark_intervals import intervals

    for beside in ("summary.json", "run.json"):
        try:
            name = name or json.loads((path.parent / beside).read_text()).get("benchmark")
        except (OSError, ValueError):
            pass
    if name is None:
        raise DataError(path, "no summary.json or run.json beside it names its benchmark: give --benchmark NAME")
    rows, scores = [], []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
            c, j = list(map(float, r["chosen_scores"])), list(map(float, r["rejected_scores"]))
            rows.append(Row(r["id"], r["subset"], "", ("",) * len(c), ("",) * len(j), str(path), n, r))
        except (ValueError, KeyError, TypeError) as e:
            raise DataError(path, f"not a row of scores ({type(e).__name__}: {e})", index=n) from None
        scores.append(c + j)
    if tie_credit is None and name == "pairs":
        try:
            tie_credit = json.loads((path.parent / "summary.json").read_text()).get("tie_credit")
        except (OSError, ValueError):
            pass
    bench = get(name, **({"tie_credit": tie_credit} if name == "pairs" and tie_credit else {}))
    out = {**bench.aggregate(rows, scores), "benchmark": name, "n_rows": len(rows), "rules": bench.official}
    out["intervals"] = intervals(name, bench, rows, scores, out, resamples)
    return out


def judged_run(path) -> tuple[Path, str] | None:
    """(its results.jsonl, its benchmark) for a judge run on another benchmark (its run.json says kind judge),
    else None: its rows hold the verdicts' credits, not response scores (judges.bench_recompute reads them)."""
    folder = Path(path).expanduser()
    folder = folder if folder.is_dir() else folder.parent
    try:
        run = json.loads((folder / "run.json").read_text())
    except (OSError, ValueError):
        return None
    ok = isinstance(run, dict) and run.get("kind") == "judge" and run.get("benchmark") not in (None, RM_BENCH)
    return (folder / "results.jsonl", run["benchmark"]) if ok and (folder / "results.jsonl").is_file() else None


def accuracy_text(path, resamples: int, as_json: bool, name: str | None = None) -> str | None:
    """What `accuracy` prints for another benchmark's scored run (None: not such a run): its numbers from
    its results.jsonl, with --bootstrap's intervals (a judge run's: judged_run, judges.bench_recompute)."""
    found = results_file(path)
    if found is None:
        return None
    summary = recompute(found, resamples, name=name)
    return json.dumps(summary, indent=2) if as_json else table(summary)

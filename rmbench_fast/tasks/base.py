"""The Benchmark interface, the data readers and schema detection.

A benchmark turns raw items into validated `Row`s (`load` / `rows`), says which of a row's responses
are compared with which (`comparisons`, indices into `row.responses`), and aggregates every row's
response scores into its published numbers (`aggregate`): `score`, `subsets` {name: fraction} and,
where the benchmark has them, `sections`. A bad item raises `TaskDataError` (a ValueError, and the
package's DataError, so the command line reports it as one line) naming the file, the item and the key.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import DataError

BENCHMARKS: dict[str, "Benchmark"] = {}  # name -> the default instance; each module registers its own
# Hub ids whose benchmark is known without reading their rows.
KNOWN_HUB_IDS = {
    "allenai/reward-bench": "reward-bench",
    "allenai/pref-test-sets": "reward-bench",
    "allenai/reward-bench-2": "reward-bench-2",
    "THU-KEG/RM-Bench": "rm-bench",
}
DATA_SUFFIXES = (".json", ".jsonl", ".parquet")


class TaskDataError(DataError, ValueError):
    """A bad data file or item: names the file, the item index (and line) and the key."""


@dataclass(frozen=True)
class Item:
    """One raw item as read: the file it came from, its index there (and line, for JSONL)."""
    source: str
    index: int
    line: int | None
    value: object

    def error(self, message: str, key: str | None = None) -> TaskDataError:
        return TaskDataError(self.source, message, index=self.index, key=key, line=self.line)


@dataclass(frozen=True)
class Row:
    """One validated row. `responses` = chosen + rejected, the order comparisons and scores use.
    A prompt or response is a string, or (conversational data) a list of {role, content} messages."""
    id: int | str
    subset: str
    prompt: object
    chosen: tuple
    rejected: tuple
    source: str
    index: int
    item: dict = field(repr=False, compare=False)  # the original object

    @property
    def responses(self) -> tuple:
        return self.chosen + self.rejected


class Benchmark:
    """The interface every benchmark module implements (`parse`, `comparisons`, `row_result`, `aggregate`)."""
    name = ""
    official = ""  # where its rules come from
    priority = 0  # detection order: the highest whose `fits` says yes names the data

    def fits(self, items: list[dict]) -> bool:
        raise NotImplementedError

    def parse(self, item: Item) -> Row:
        raise NotImplementedError

    def comparisons(self, row: Row) -> list[tuple[int, int]]:
        """(better, worse) pairs of indices into row.responses: what a pairwise judge is asked."""
        raise NotImplementedError

    def row_result(self, row: Row, scores) -> float | None:
        """The row's own result from its responses' scores (None where only the subset has one)."""
        raise NotImplementedError

    def aggregate(self, rows: list[Row], scores) -> dict:
        """{benchmark, score, subsets, counts[, sections]} from each row's response scores."""
        raise NotImplementedError

    def formatted(self, row: Row) -> tuple:
        """(prompt, chosen, rejected) as the chat format renders them: strings, or lists of
        {role, content} messages (a conversation, rendered turn by turn). By default the row's own."""
        return row.prompt, row.chosen, row.rejected

    def load(self, path) -> list[Row]:
        return self.rows(read_items(path), str(path))

    def rows(self, items: list[Item], source: str = "data") -> list[Row]:
        if not items:
            raise TaskDataError(source, "holds no items")
        out = []
        for item in items:
            if not isinstance(item.value, dict):
                raise item.error(f"item must be an object, got {kind(item.value)}")
            out.append(self.parse(item))
        return out

    def check(self, rows: list[Row], scores) -> list[list[float]]:
        """Scores as lists of floats, one list a row and one score a response."""
        scores = [list(map(float, s)) for s in scores]
        if len(scores) != len(rows):
            raise ValueError(f"{len(scores)} rows of scores for {len(rows)} rows")
        for row, s in zip(rows, scores):
            if len(s) != len(row.responses):
                raise ValueError(f"row {row.index} ({row.source}, id {row.id!r}): {len(s)} scores for "
                                 f"{len(row.responses)} responses")
        return scores


def register(benchmark: Benchmark) -> Benchmark:
    BENCHMARKS[benchmark.name] = benchmark
    return benchmark


def kind(value) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null",
            int: "a number", float: "a number"}.get(type(value), type(value).__name__)


def need(item: Item, key: str, types, what: str):
    """item.value[key], which must exist and be of `types` (bools are never numbers)."""
    value = item.value
    if key not in value:
        raise item.error("missing key", key)
    v = value[key]
    if not isinstance(v, types) or (isinstance(v, bool) and bool not in _tuple(types)):
        raise item.error(f"must be {what}, got {kind(v)}", key)
    return v


def _tuple(types):
    return types if isinstance(types, tuple) else (types,)


def row_id(item: Item, key: str = "id"):
    """The item's id (an integer or a string), or its index where it has none."""
    if key not in item.value:
        return item.index
    v = item.value[key]
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise item.error(f"id must be an integer or a string, got {kind(v)}", key)
    return v


def messages(item: Item, value, key: str) -> list:
    """A list of {role, content} messages with string values, checked."""
    if not isinstance(value, list) or not value:
        raise item.error(f"must be a non-empty list of messages, got {kind(value)}", key)
    for j, m in enumerate(value):
        if not isinstance(m, dict):
            raise item.error(f"a message must be an object with role and content, got {kind(m)}", f"{key}[{j}]")
        for part in ("role", "content"):
            if not isinstance(m.get(part), str):
                raise item.error(f"must be a string, got {kind(m.get(part))}", f"{key}[{j}].{part}")
    return value


def finite(scores) -> bool:
    return all(not math.isnan(s) for s in scores)


# ----------------------------------------------------------------------------- reading


def read_items(path) -> list[Item]:
    """Every item of a .json list, a .jsonl file, a .parquet file, a `datasets` folder saved with
    save_to_disk, or a folder of such files (read in sorted order, e.g. a hub snapshot's data/)."""
    path = Path(path).expanduser()
    if path.is_dir():
        if any((path / n).is_file() for n in ("dataset_info.json", "state.json", "dataset_dict.json")):
            return _read_saved_dataset(path)
        files = sorted(p for p in path.rglob("*") if p.suffix in DATA_SUFFIXES and p.is_file())
        if not files:
            raise TaskDataError(path, "holds no .json, .jsonl or .parquet files and is no `datasets` folder")
        return [item for f in files for item in read_items(f)]
    if not path.exists():
        raise TaskDataError(path, "no such file or folder")
    if path.suffix == ".parquet":
        return _read_parquet(path)
    from ..inputs.data import read_items as read_json

    try:
        return [Item(str(path), i, line, v) for i, line, v in read_json(path, allow_empty=True)]
    except DataError as e:  # the same reader as RM-Bench's files: its message, as this package's error
        raise TaskDataError(e.path, e.message, e.index, e.key, e.line) from None


def _read_parquet(path: Path) -> list[Item]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        try:
            import pandas as pd
        except ImportError:
            raise TaskDataError(path, "reading Parquet needs pyarrow (pip install pyarrow)") from None
        records = [_plain(r) for r in pd.read_parquet(path).to_dict("records")]
    else:
        try:
            records = pq.read_table(path).to_pylist()
        except Exception as e:  # not Parquet, truncated, ...
            raise TaskDataError(path, f"not a readable Parquet file ({type(e).__name__}: {e})") from None
    return [Item(str(path), i, None, v) for i, v in enumerate(records)]


def _read_saved_dataset(path: Path) -> list[Item]:
    try:
        import datasets
    except ImportError:
        raise TaskDataError(path, "a folder saved with save_to_disk needs `datasets` (pip install datasets)") from None
    data = datasets.load_from_disk(str(path))
    if isinstance(data, datasets.DatasetDict):
        splits = list(data)
        chosen = splits[0] if len(splits) == 1 else next((s for s in ("test", "filtered") if s in data), None)
        if chosen is None:
            raise TaskDataError(path, f"holds the splits {', '.join(splits)}: save one split, or one named test")
        data, path = data[chosen], path / chosen
    return [Item(str(path), i, None, v) for i, v in enumerate(data)]


def _plain(value):
    """pandas' numpy arrays and scalars as plain Python values."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


# ----------------------------------------------------------------------------- detection


def detect_hub_id(source: str) -> str | None:
    """The benchmark of a known hub dataset id, else None."""
    return KNOWN_HUB_IDS.get(str(source).strip().rstrip("/"))


def detect(data) -> str:
    """The benchmark a data set's schema fits: its rows (dicts or Items) or its first row."""
    if isinstance(data, (dict, Item)):
        data = [data]
    items = [d.value if isinstance(d, Item) else d for d in data]
    if not items or not isinstance(items[0], dict):
        raise ValueError("no rows to detect a benchmark from" if not items else f"a row is {kind(items[0])}")
    first = items[0]
    if "chosen" not in first or "rejected" not in first:
        raise ValueError(f"no benchmark's schema fits rows with the keys {', '.join(sorted(map(str, first)))} "
                         "(every benchmark needs chosen and rejected)")
    if _rm_bench(first):
        return "rm-bench"
    for b in sorted(BENCHMARKS.values(), key=lambda b: -b.priority):
        if b.fits(items):
            return b.name
    raise ValueError(f"no benchmark's schema fits rows with the keys {', '.join(sorted(map(str, first)))}")


def _rm_bench(first: dict) -> bool:
    """RM-Bench's layout: three chosen and three rejected strings (one a style) and a known domain."""
    from ..inputs.data import DOMAINS

    return (first.get("domain") in DOMAINS and "num_correct" not in first
            and all(isinstance(first[k], list) and len(first[k]) == 3 and all(isinstance(v, str) for v in first[k])
                    for k in ("chosen", "rejected")))

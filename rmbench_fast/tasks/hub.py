"""The other benchmarks' hub datasets, when --data names one: fetched (the one network call, which the
user asked for by naming it, as RM-Bench's own hub id is) and read as the official scripts read them.

- allenai/reward-bench: the `filtered` split (rewardbench's load_eval_dataset, core set);
- allenai/reward-bench-2: the `test` split (load_eval_dataset_multi);
- allenai/pref-test-sets (RewardBench v1's prior sets): every split, each split's name becoming its
  rows' `subset` (a `subset` column of its own moves to `subsubset`), less pku_safer and pku_better,
  which rewardbench leaves out too: the rows left out are counted (`skipped`), never silently.

A hub snapshot holds each split as data/<split>-NNNNN-of-NNNNN.parquet; only the split's files are
downloaded. Offline (HF_HUB_OFFLINE) or unknown, the error says to pass a local copy instead.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from .base import Item, TaskDataError, read_items

SPLITS = {"allenai/reward-bench": ("filtered",), "allenai/reward-bench-2": ("test",), "allenai/pref-test-sets": None}
PRIOR_SETS_LEFT_OUT = ("pku_safer", "pku_better")  # rewardbench's load_eval_dataset skips them
_SPLIT_FILE = re.compile(r"^(?P<split>[A-Za-z0-9_.]+?)-\d{5}-of-\d{5}\.parquet$")


def hub_id(source) -> str | None:
    """The known hub id `source` names (and no local path of that name exists), else None."""
    name = str(source).strip().rstrip("/")
    return name if name in SPLITS and not Path(name).expanduser().exists() else None


def _download(repo_id: str, patterns: list[str]) -> Path:
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(repo_id, repo_type="dataset", allow_patterns=patterns))


def hub_items(repo_id: str, download=None) -> tuple[list[Item], dict]:
    """(items, notes) of a known hub dataset; notes: the splits read and the rows `skipped` per split.
    download(repo_id, allow_patterns) -> the snapshot's folder (injected in tests: no network)."""
    download = download or _download
    splits = SPLITS[repo_id]
    patterns = ["data/*.parquet"] if splits is None else [f"data/{s}-*.parquet" for s in splits]
    try:
        root = download(repo_id, patterns)
    except Exception as e:  # offline, gated, unreachable
        offline = os.environ.get("HF_HUB_OFFLINE") not in (None, "", "0")
        raise TaskDataError(repo_id, f"downloading this hub dataset failed ({'HF_HUB_OFFLINE is set' if offline else type(e).__name__}: "
                                     f"{e}); save it to a folder (datasets' save_to_disk, or its parquet files) and pass "
                                     "that folder") from e
    by_split: dict[str, list[Path]] = {}
    for f in sorted((Path(root) / "data").glob("*.parquet")):
        m = _SPLIT_FILE.match(f.name)
        if m and (splits is None or m["split"] in splits):
            by_split.setdefault(m["split"], []).append(f)
    if not by_split:
        raise TaskDataError(repo_id, f"the snapshot at {root} holds no data/<split>-*.parquet files"
                                     + ("" if splits is None else f" of the split {', '.join(splits)}"))
    items, skipped = [], {}
    for split, files in by_split.items():
        rows = [it for f in files for it in read_items(f)]
        if splits is not None:
            items += rows
        elif split in PRIOR_SETS_LEFT_OUT:
            skipped[split] = len(rows)
        else:
            items += [_as_subset(it, split) for it in rows]
    return items, {"hub_id": repo_id, "splits": sorted(set(by_split) - set(skipped)), "skipped": skipped}


def _as_subset(item: Item, split: str) -> Item:
    """A prior set's row with its split as `subset` (its own subset column kept as `subsubset`)."""
    value = dict(item.value) if isinstance(item.value, dict) else item.value
    if isinstance(value, dict):
        if "subset" in value:
            value["subsubset"] = value.pop("subset")
        value["subset"] = split
    return Item(item.source, item.index, item.line, value)

"""Results files: the per-sample file in the official format and summary.json, written and read back.

The per-sample file is a JSON list: each input item plus `score_chosen: [3 floats]`,
`score_rejected: [3 floats]` and `domain`. The official scripts write the same shape (with or
without `domain`), so `read_scores` reads both. A generative judge's file holds `cells` (3x3 win
rates) instead of scores; `read_results` reads either kind.

Beside it, results.jsonl holds the same per-sample numbers one JSON object a line (id, domain, subset
when the item has one, and score_chosen / score_rejected or cells, without the texts): what
streaming tools, pandas.read_json(lines=True) and `jq` read without loading every response text.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from ..errors import DataError
from ..inputs.data import DOMAINS, Sample, file_domain
from ..store.atomic import atomic_open, atomic_write_json

JSONL_KEYS = ("id", "domain", "subset", "score_chosen", "score_rejected", "cells")


def results_items(samples: list[Sample], chosen: np.ndarray, rejected: np.ndarray) -> list[dict]:
    """Each input item plus its scores and domain, in the official results format."""
    out = []
    for s, c, r in zip(samples, chosen, rejected):
        item = dict(s.item)
        item["domain"] = s.domain
        item["score_chosen"] = c.tolist()  # floats, or lists of floats for whole logits vectors
        item["score_rejected"] = r.tolist()
        out.append(item)
    return out


def write_results(out_dir, samples, chosen, rejected, summary: dict) -> tuple[Path, Path]:
    """results.json, results.jsonl and summary.json; returns the first and the last's paths."""
    return _write(out_dir, results_items(samples, chosen, rejected), summary)


def jsonl_line(item: dict) -> dict:
    """An item of results.json as results.jsonl holds it: its id, domain, subset and numbers."""
    return {k: item[k] for k in JSONL_KEYS if k in item and not (k == "subset" and item[k] is None)}


def _write(out_dir, items: list[dict], summary: dict) -> tuple[Path, Path]:
    out_dir = Path(out_dir)
    results_path, summary_path = out_dir / "results.json", out_dir / "summary.json"
    atomic_write_json(results_path, items)
    with atomic_open(out_dir / "results.jsonl", "w") as f:
        for item in items:
            f.write(json.dumps(jsonl_line(item), ensure_ascii=False, allow_nan=False) + "\n")
    atomic_write_json(summary_path, summary)
    return results_path, summary_path


def cell_items(samples: list[Sample], cells: np.ndarray) -> list[dict]:
    """A judge's results: each input item plus its domain and `cells` (3x3: cells[i][j] is how far
    chosen i beat rejected j, the mean verdict over orders and samples)."""
    out = []
    for s, c in zip(samples, cells):
        item = dict(s.item)
        item["domain"] = s.domain
        item["cells"] = c.tolist()
        out.append(item)
    return out


def write_cell_results(out_dir, samples, cells, summary: dict) -> tuple[Path, Path]:
    """A judge's results.json, results.jsonl (cells for scores) and summary.json."""
    return _write(out_dir, cell_items(samples, cells), summary)


def read_results(path, require_id: bool = False):
    """A results file of either kind: ("scores", chosen, rejected, domains, subsets, names) as
    read_scores, or for a judge's ("cells", cells [n,3,3], domains, subsets, names). require_id: an
    item without `id` is a DataError (see read_scores)."""
    path, items = _read_items(path)
    if not (isinstance(items[0], dict) and "cells" in items[0]):
        return ("scores", *read_scores(path, require_id))
    cells, domains, subsets, names = [], [], [], []
    stem_domain = file_domain(path)
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise DataError(path, "result must be an object", index=i)
        m = item.get("cells")
        if not (isinstance(m, list) and len(m) == 3 and all(isinstance(r, list) and len(r) == 3 for r in m)):
            raise DataError(path, "must be a 3x3 list of numbers (chosen i x rejected j)", index=i, key="cells")
        row = [[_score(path, i, f"cells[{a}][{b}]", x, False) for b, x in enumerate(r)] for a, r in enumerate(m)]
        if not all(0 <= x <= 1 for r in row for x in r):
            raise DataError(path, "a cell is a win rate in [0, 1]", index=i, key="cells")
        cells.append(row)
        _names_of(path, i, item, stem_domain, domains, subsets, names, require_id)
    return "cells", np.array(cells, dtype=np.float64), domains, subsets, names


def _read_items(path):
    """(the results file's path, its items): a non-empty JSON list."""
    path = Path(path)
    if path.is_dir():
        if not (path / "results.json").is_file():
            raise DataError(path, "is a folder without results.json")
        path = path / "results.json"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataError(path, "no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(path, f"cannot be read ({e})") from None
    if not text.strip():
        raise DataError(path, "file is empty")
    try:
        # Python's json writes NaN / Infinity; read them so that they are reported, not hidden.
        items = json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(path, f"not JSON ({e.msg} at line {e.lineno}, column {e.colno})") from None
    if not isinstance(items, list):
        raise DataError(path, "top level must be a JSON list of results")
    if not items:
        raise DataError(path, "holds an empty list: no results")
    return path, items


def read_scores(path, require_id: bool = False):
    """Read a results file (ours, or the official scripts'). Returns (chosen [n,3], rejected [n,3],
    domains, subsets, names); where the scores are lists (the official flow keeps a multi-label
    head's whole logits vector), [n,3,k]. `path` may also be a run folder holding results.json.
    An item without `id` is named by its position; with require_id (runs matched by their prompts:
    positions of different selections name different prompts) it is a DataError."""
    path, items = _read_items(path)
    stem_domain = file_domain(path)
    scores = {"score_chosen": [], "score_rejected": []}
    width = None  # None: plain scores; k: every score a list of k numbers (the official multi-label form)
    domains, subsets, names = [], [], []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise DataError(path, "result must be an object", index=i)
        for key, out in scores.items():
            if key not in item:
                raise DataError(path, "missing key", index=i, key=key)
            v = item[key]
            if not isinstance(v, list) or len(v) != 3:
                raise DataError(path, "must be a list of 3 scores", index=i, key=key)
            row = [_score(path, i, f"{key}[{j}]", x) for j, x in enumerate(v)]
            for j, x in enumerate(row):
                k = len(x) if isinstance(x, list) else None
                if i == 0 and key == "score_chosen" and j == 0:
                    width = k
                elif k != width:
                    raise DataError(path, f"mixes plain scores and lists of scores (or lists of other lengths): "
                                    f"expected {'a number' if width is None else f'a list of {width}'}", index=i,
                                    key=f"{key}[{j}]")
            out.append(row)
        _names_of(path, i, item, stem_domain, domains, subsets, names, require_id)
    return (np.array(scores["score_chosen"], dtype=np.float64), np.array(scores["score_rejected"], dtype=np.float64),
            domains, subsets, names)


def _names_of(path, i, item, stem_domain, domains, subsets, names, require_id=False) -> None:
    """Append item i's domain, subset and name (require_id: an item without id is refused)."""
    if require_id and item.get("id") is None:
        raise DataError(path, "has no id: runs are compared prompt by prompt, matched by domain and id (a position "
                              "would pair different prompts of runs over different selections)", index=i, key="id")
    domains.append(_result_domain(path, i, item, stem_domain))
    subset = item.get("subset")
    subsets.append(subset if isinstance(subset, str) else None)
    sid = item.get("id", i)
    names.append(str(sid) if str(sid).startswith(f"{domains[-1]}/") else f"{domains[-1]}/{sid}")


def _score(path, index, key, x, top=True):
    """A finite number, or (at the top) a non-empty list of them."""
    if isinstance(x, list):
        if not top:
            raise DataError(path, "a score is a number or a list of numbers, not a deeper list", index=index, key=key)
        if not x:
            raise DataError(path, "an empty list is not a score", index=index, key=key)
        return [_score(path, index, f"{key}[{j}]", y, False) for j, y in enumerate(x)]
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise DataError(path, f"must be a number, got {x!r}", index=index, key=key)
    if not math.isfinite(x):
        raise DataError(path, f"score is {x} (not a finite number)", index=index, key=key)
    return float(x)


def _result_domain(path, index, item, stem_domain) -> str:
    """`domain` when present; else the prefix of an id such as "chat/100"; else the file's name
    (chat_filtered_<model>.json -> chat); else one pooled domain, "all"."""
    if "domain" in item:
        d = item["domain"]
        if not isinstance(d, str) or d not in DOMAINS:
            raise DataError(path, f"unknown domain {d!r} (expected one of {', '.join(DOMAINS)})", index=index,
                            key="domain")
        return d
    sid = item.get("id")
    if isinstance(sid, str) and "/" in sid and sid.split("/")[0] in DOMAINS:
        return sid.split("/")[0]
    return stem_domain or "all"

"""Load and validate RM-Bench data: per-domain `*_filtered.json` files, `total_dataset.json`,
any `.json` list or `.jsonl` file, or a hub dataset id.

Every fault raises `DataError` naming the file, the item index (or line) and the key.
Samples are keyed by (domain, id): ids are unique only within a domain.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import DataError

# File domains, in the order runs and tables list them.
DOMAINS = ("chat", "code", "math", "safety-refuse", "safety-response")
# Scoring domains: both safety files pool into "safety".
SCORE_DOMAIN = {
    "chat": "chat",
    "code": "code",
    "math": "math",
    "safety-refuse": "safety",
    "safety-response": "safety",
}
SCORE_DOMAINS = ("chat", "math", "code", "safety")
STYLES = ("concise", "detailed_plain", "detailed_markdown")
HUB_DEFAULT = "THU-KEG/RM-Bench"


@dataclass(frozen=True)
class Sample:
    domain: str  # file domain: one of DOMAINS
    id: int | str
    prompt: str
    chosen: tuple[str, str, str]
    rejected: tuple[str, str, str]
    subset: str | None
    source: str  # the file it came from
    index: int  # its position in that file
    item: dict = field(repr=False, compare=False)  # the original object, written back to results

    @property
    def key(self) -> tuple[str, int | str]:
        return (self.domain, self.id)

    @property
    def name(self) -> str:
        """How errors and reports name this sample."""
        return f"{self.domain}/{self.id}" if not str(self.id).startswith(f"{self.domain}/") else str(self.id)


def expand_domains(domains) -> tuple[str, ...] | None:
    """Turn a user's domain list (names from DOMAINS, or 'safety' for both safety files) into
    file domains. None or empty means all."""
    if not domains:
        return None
    out = []
    for d in domains:
        for part in str(d).split(","):
            part = part.strip()
            if not part:
                continue
            if part == "safety":
                out += ["safety-refuse", "safety-response"]
            elif part in DOMAINS:
                out.append(part)
            else:
                raise DataError("--domains", f"unknown domain '{part}' (expected {', '.join(DOMAINS)} or safety)")
    return tuple(d for d in DOMAINS if d in out)


def load_dataset(source, domains=None, limit: int | None = None) -> list[Sample]:
    """Load every sample from `source`, validated, optionally filtered to `domains` and cut to the
    first `limit` prompts of each file domain. Order: file order, domains in DOMAINS order."""
    files = resolve_files(source)
    samples: list[Sample] = []
    seen: dict[tuple, tuple[str, int]] = {}
    for path in files:
        for s in _load_file(path):
            if s.key in seen:
                first_path, first_index = seen[s.key]
                raise DataError(
                    path, f"duplicate id {s.id!r} in domain '{s.domain}' (first seen in {first_path}, item {first_index})",
                    index=s.index, key="id")
            seen[s.key] = (str(path), s.index)
            samples.append(s)
    wanted = expand_domains(domains)
    if wanted is not None:
        present = sorted({s.domain for s in samples}, key=DOMAINS.index)
        samples = [s for s in samples if s.domain in wanted]
        if not samples:
            raise DataError(source, f"no items in --domains {', '.join(wanted)}: it holds {', '.join(present)}")
    if limit is not None:
        if limit < 1:
            raise DataError("--limit", f"must be at least 1, got {limit}")
        taken: dict[str, int] = {}
        kept = []
        for s in samples:
            if taken.get(s.domain, 0) < limit:
                taken[s.domain] = taken.get(s.domain, 0) + 1
                kept.append(s)
        samples = kept
    order = {d: i for i, d in enumerate(DOMAINS)}
    samples.sort(key=lambda s: order[s.domain])  # stable: file order within a domain
    return samples


def resolve_files(source) -> list[Path]:
    """The data files behind `source`: a folder, a file, or a hub dataset id."""
    source = str(source)
    path = Path(source).expanduser()
    if path.is_dir():
        return _files_in_dir(path, recursive=False)
    if path.is_file():
        return [path]
    if _looks_like_hub_id(source):
        return _files_in_dir(_download_hub(source), recursive=True)
    raise DataError(source, "no such file or folder")


def _looks_like_hub_id(source: str) -> bool:
    parts = source.split("/")
    return (len(parts) == 2 and all(parts) and not source.startswith((".", "~"))
            and not source.endswith((".json", ".jsonl")))


def _download_hub(repo_id: str) -> Path:
    try:
        from huggingface_hub import snapshot_download
    except ImportError as e:  # pragma: no cover - huggingface_hub comes with transformers
        raise DataError(repo_id, f"huggingface_hub is needed to fetch a hub dataset ({e})") from e
    try:
        return Path(snapshot_download(repo_id, repo_type="dataset", allow_patterns=["*.json", "*.jsonl"]))
    except Exception as e:  # offline, unknown repo, gated, ...
        offline = os.environ.get("HF_HUB_OFFLINE") not in (None, "", "0")
        why = "HF_HUB_OFFLINE is set" if offline else type(e).__name__
        raise DataError(
            repo_id, f"not a local path, and downloading it as a hub dataset failed ({why}); "
                     f"pass a local folder or file, e.g. --data ../shared/rm-bench") from e


def _files_in_dir(folder: Path, recursive: bool) -> list[Path]:
    glob = folder.rglob if recursive else folder.glob
    per_domain = sorted(glob("*_filtered.json"))
    if per_domain:
        return per_domain
    total = sorted(glob("total_dataset.json"))
    if total:
        return total[:1]
    raise DataError(folder, "holds no *_filtered.json files and no total_dataset.json")


def read_items(path: Path, allow_empty: bool = False) -> list[tuple[int, int | None, object]]:
    """(index, line or None, item) for every item of a .json list or .jsonl file (also the readers
    of rmbench_fast.tasks); a DataError names what is wrong. allow_empty: an empty list is no error."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataError(path, "no such file") from None
    except IsADirectoryError:
        raise DataError(path, "is a folder, not a data file") from None
    except UnicodeDecodeError as e:
        raise DataError(path, f"not UTF-8 text ({e.reason} at byte {e.start})") from None
    except OSError as e:
        raise DataError(path, f"cannot be read ({e.strerror})") from None
    if not text.strip():
        raise DataError(path, "file is empty")
    if path.suffix == ".jsonl":
        items = []
        for lineno, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                items.append((len(items), lineno, json.loads(line)))
            except json.JSONDecodeError as e:
                raise DataError(path, f"not JSON ({e.msg}, column {e.colno})", line=lineno) from None
        return items
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(path, f"not JSON ({e.msg} at line {e.lineno}, column {e.colno})") from None
    if not isinstance(data, list):
        raise DataError(path, f"top level must be a JSON list of items, got {_kind(data)}")
    if not data and not allow_empty:
        raise DataError(path, "holds an empty list: no items")
    return [(i, None, item) for i, item in enumerate(data)]


def _kind(value) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
            type(None): "null", int: "a number", float: "a number"}.get(type(value), type(value).__name__)


def file_domain(path: Path) -> str | None:
    """The domain a per-domain file's name gives: `chat_filtered.json` -> chat."""
    stem = path.name.split(".")[0]
    stem = stem.split("_filtered")[0] if "_filtered" in stem else stem
    return stem if stem in DOMAINS else None


def _load_file(path: Path) -> list[Sample]:
    default_domain = file_domain(path)
    samples = []
    for index, line, item in read_items(path):
        def err(message, key=None):
            return DataError(path, message, index=index, key=key, line=line)

        if not isinstance(item, dict):
            raise err(f"item must be an object, got {_kind(item)}")
        if "domain" in item:
            domain = item["domain"]
            if not isinstance(domain, str) or domain not in DOMAINS:
                raise err(f"unknown domain {domain!r} (expected one of {', '.join(DOMAINS)})", "domain")
        elif default_domain is not None:
            domain = default_domain
        else:
            raise err(f"no 'domain' key, and the file name '{path.name}' is not <domain>_filtered.json "
                      f"with a domain from {', '.join(DOMAINS)}", "domain")
        if "id" not in item:
            raise err("missing key", "id")
        sid = item["id"]
        if isinstance(sid, bool) or not isinstance(sid, (int, str)):
            raise err(f"id must be an integer or a string, got {_kind(sid)}", "id")
        if "prompt" not in item:
            raise err("missing key", "prompt")
        if not isinstance(item["prompt"], str):
            raise err(f"prompt must be a string, got {_kind(item['prompt'])}", "prompt")
        responses = {}
        for key in ("chosen", "rejected"):
            if key not in item:
                raise err("missing key", key)
            value = item[key]
            if not isinstance(value, list):
                raise err(f"must be a list of 3 strings, got {_kind(value)}", key)
            if len(value) != 3:
                raise err(f"must hold exactly 3 responses (concise, detailed plain, detailed markdown), "
                          f"got {len(value)}", key)
            for j, v in enumerate(value):
                if not isinstance(v, str):
                    raise err(f"must be a string, got {_kind(v)}", f"{key}[{j}]")
            responses[key] = tuple(value)
        subset = item.get("subset")
        samples.append(Sample(
            domain=domain, id=sid, prompt=item["prompt"], chosen=responses["chosen"],
            rejected=responses["rejected"], subset=subset if isinstance(subset, str) else None,
            source=str(path), index=index, item=item))
    return samples


def dataset_stats(samples: list[Sample]) -> dict:
    """Prompts per domain and subset, and character lengths of prompts and responses per style."""
    def summary(values):
        values = sorted(values)
        if not values:
            return {"n": 0}
        n = len(values)
        return {"n": n, "mean": sum(values) / n, "median": values[n // 2], "p95": values[min(n - 1, int(0.95 * n))],
                "max": values[-1]}

    out = {"n_prompts": len(samples), "domains": {}}
    for domain in DOMAINS:
        ds = [s for s in samples if s.domain == domain]
        if not ds:
            continue
        subsets: dict[str, int] = {}
        for s in ds:
            subsets[s.subset or "-"] = subsets.get(s.subset or "-", 0) + 1
        lengths = {"prompt": summary([len(s.prompt) for s in ds])}
        for k, style in enumerate(STYLES):
            lengths[f"chosen_{style}"] = summary([len(s.chosen[k]) for s in ds])
            lengths[f"rejected_{style}"] = summary([len(s.rejected[k]) for s in ds])
        out["domains"][domain] = {"n_prompts": len(ds), "subsets": subsets, "chars": lengths}
    return out

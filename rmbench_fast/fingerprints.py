"""Fingerprints: what identifies a model, a tokenizer, a data selection, so that cached work is
reused exactly when the inputs are the same, and never when a file changed.

A model folder's fingerprint hashes its config and every weight file's name, size and content
(sha256, read incrementally). Content hashes are cached by (path, size, mtime) in a small JSON file
beside the store, so a checkpoint's gigabytes are read once, not on every run.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from .atomic import atomic_write_json

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                   "chat_template.json", "vocab.json", "merges.txt", "tokenizer.model", "added_tokens.json")


def sha256_text(*parts) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(json.dumps(p, sort_keys=True, ensure_ascii=False, default=str).encode())
        h.update(b"\0")
    return h.hexdigest()


class HashCache:
    """sha256 of files, remembered by (path, size, mtime_ns) in a JSON file (None: in memory only)."""

    def __init__(self, path: Path | None = None):
        self.path = Path(path) if path else None
        self.entries: dict = {}
        if self.path and self.path.is_file():
            try:
                self.entries = json.loads(self.path.read_text())
            except (OSError, ValueError):
                self.entries = {}  # a damaged cache only costs re-hashing
        self.dirty = False

    def file_sha256(self, path: Path) -> str:
        st = path.stat()
        key = str(path.resolve())
        stamp = [st.st_size, st.st_mtime_ns]
        hit = self.entries.get(key)
        if hit and hit[:2] == stamp:
            return hit[2]
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                h.update(block)
        self.entries[key] = stamp + [h.hexdigest()]
        self.dirty = True
        return h.hexdigest()

    def save(self) -> None:
        if self.path and self.dirty:
            atomic_write_json(self.path, self.entries, indent=None)
            self.dirty = False


def local_model_dir(path: str) -> Path | None:
    """The folder holding a model's files: the path itself, or a hub id's cached snapshot (no
    network: only what is already downloaded)."""
    p = Path(path).expanduser()
    if p.is_dir():
        return p
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(path, local_files_only=True))
    except Exception:
        return None


def model_fingerprint(path: str, hashes: HashCache) -> dict:
    """{"sha256", "path", "files"}: config content plus each weight file's name, size and content
    hash. sha256 is None when the files cannot be found locally (nothing is then cached)."""
    folder = local_model_dir(path)
    if folder is None:
        return {"path": path, "sha256": None, "files": []}
    # weights, shard indexes, and the model's own code (remote-code models compute with it)
    files = sorted(p for p in folder.iterdir() if p.is_file() and (p.name.endswith(WEIGHT_SUFFIXES + (".py",))
                                                                     or p.name.endswith(".index.json")))
    cfg = folder / "config.json"
    config = json.loads(cfg.read_text()) if cfg.is_file() else None
    listing = [[p.name, p.stat().st_size, hashes.file_sha256(p)] for p in files]
    return {"path": str(folder.resolve()), "sha256": sha256_text(config, listing), "files": [f[0] for f in listing]}


def tokenizer_fingerprint(path: str, hashes: HashCache) -> str | None:
    folder = local_model_dir(path)
    if folder is None:
        return None
    listing = [[name, hashes.file_sha256(folder / name)] for name in TOKENIZER_FILES if (folder / name).is_file()]
    return sha256_text(listing)


def data_fingerprint(samples) -> str:
    """The selected samples' content (domain, id, prompt, responses), in order."""
    h = hashlib.sha256()
    for s in samples:
        h.update(json.dumps([s.domain, s.id, s.prompt, s.chosen, s.rejected], ensure_ascii=False).encode())
        h.update(b"\n")
    return h.hexdigest()

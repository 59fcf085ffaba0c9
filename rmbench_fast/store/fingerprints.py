"""Fingerprints: what identifies a model, a tokenizer, a data selection, so that cached work is
reused exactly when the inputs are the same, and never when a file changed.

A model folder's fingerprint hashes every file in it: the weight files by name, size and content,
and every other file by name and content (config, tokenizer files of any format, the model's own
code, generation_config.json, chat templates, whatever a future format adds: no list of names
decides what counts). A tokenizer's fingerprint is the same listing without the weights.
A file's content hash is a sha256 tree: the sha256 of each 64 MiB chunk, computed in parallel
threads (hashlib releases the GIL; one thread hashes about 1 GiB/s), then one sha256 over the
file's size and the chunk digests. Content hashes are cached by (path, size, mtime) in a small JSON
file beside the store, so a checkpoint's gigabytes are read once, not on every run. Without a store
(--no-cache) results live only in this process's memory, so the weights are not read at all: a
file is then named by its path, size and mtime, the same stamp the hash cache trusts.
"""

from __future__ import annotations

import hashlib
import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .atomic import atomic_write_json

# Weights (and a trainer's optimizer states beside them): named by size and content hash, or without a
# store by their stat, so that gigabytes are not read on every run. Every other file is content-hashed.
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".ckpt", ".msgpack", ".h5")
CHUNK_BYTES = 64 << 20
TREE_SCHEME = f"sha256-tree-{CHUNK_BYTES}"  # in every cached entry: entries of another scheme are recomputed


def sha256_text(*parts) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(json.dumps(p, sort_keys=True, ensure_ascii=False, default=str).encode())
        h.update(b"\0")
    return h.hexdigest()


def hash_threads() -> int:
    """One per core, at most 16; RMBENCH_HASH_THREADS overrides (1 for a disk that reads best in
    one sequential stream: a spinning disk, some network file systems)."""
    if os.environ.get("RMBENCH_HASH_THREADS"):
        return max(1, int(os.environ["RMBENCH_HASH_THREADS"]))
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, min(16, cpus))


def tree_sha256(path: Path, size: int, threads: int | None = None, chunk: int = CHUNK_BYTES) -> str:
    """sha256 over "sha256-tree:{chunk}:{size}:", then the sha256 of each `chunk`-byte piece of the
    file in order; the pieces are hashed by `threads` threads at once (the digest does not depend on
    how many)."""
    n = max(1, -(-size // chunk))

    def piece(i: int) -> bytes:
        h = hashlib.sha256()
        left = min(chunk, size - i * chunk)
        with open(path, "rb", buffering=0) as f:
            f.seek(i * chunk)
            while left > 0:
                block = f.read(min(1 << 22, left))
                if not block:
                    raise OSError(f"{path}: file shorter than its {size} bytes while hashing (changed on disk?)")
                h.update(block)
                left -= len(block)
        return h.digest()

    with ThreadPoolExecutor(max(1, min(threads or hash_threads(), n))) as pool:
        digests = list(pool.map(piece, range(n)))
    top = hashlib.sha256(f"sha256-tree:{chunk}:{size}:".encode())
    for d in digests:
        top.update(d)
    return top.hexdigest()


class HashCache:
    """Content hashes of files (tree_sha256), remembered by (path, size, mtime_ns, scheme) in a JSON
    file (None: in memory only). `bytes_hashed` counts what this process read."""

    def __init__(self, path: Path | None = None):
        self.path = Path(path) if path else None
        self.entries: dict = {}
        if self.path and self.path.is_file():
            try:
                self.entries = json.loads(self.path.read_text())
            except (OSError, ValueError):
                self.entries = {}  # a damaged cache only costs re-hashing
        self.dirty = False
        self.bytes_hashed = 0

    def file_sha256(self, path: Path) -> str:
        st = path.stat()
        key = str(path.resolve())
        # a file replaced in place with its size and mtime kept still has a new ctime (and mostly inode)
        stamp = [st.st_size, st.st_mtime_ns, TREE_SCHEME, st.st_ctime_ns, st.st_ino]
        hit = self.entries.get(key)
        if isinstance(hit, list) and hit[:5] == stamp:
            return hit[5]
        digest = tree_sha256(path, st.st_size)
        self.bytes_hashed += st.st_size
        self.entries[key] = stamp + [digest]
        self.dirty = True
        return digest

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


def folder_files(folder: Path) -> tuple[list[Path], list[Path]]:
    """(weight files, every other file) at the top of a model folder, each sorted by name: the files
    from_pretrained can read. Hidden files (.gitattributes, editor swap files) are left out."""
    files = sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))
    weights = [p for p in files if p.name.endswith(WEIGHT_SUFFIXES)]
    return weights, [p for p in files if not p.name.endswith(WEIGHT_SUFFIXES)]


def _other_files(files: list[Path], hashes: HashCache) -> list:
    return [[p.name, hashes.file_sha256(p)] for p in files]


def model_fingerprint(path: str, hashes: HashCache, content: bool = True) -> dict:
    """{"sha256", "path", "files"}: every non-weight file's name and content hash, plus each weight
    file's name, size and content hash. Without `content` (no store on disk: results live in this
    process only) the weights are not read: sha256 is None, "weights_hashed" False, and "stat_key"
    hashes the other files' contents and each weight file's path, device, inode, size, mtime and
    ctime instead. Both None when the files cannot be found locally (nothing is then cached)."""
    folder = local_model_dir(path)
    if folder is None:
        return {"path": path, "sha256": None, "files": []}
    weights, others = folder_files(folder)
    listing = _other_files(others, hashes)
    if not content:
        stats = [(p, p.stat()) for p in weights]
        stamps = [[str(p.resolve()), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
                  for p, st in stats]
        return {"path": str(folder.resolve()), "sha256": None, "stat_key": sha256_text("stat", listing, stamps),
                "files": [p.name for p in weights], "weights_hashed": False}
    weighed = [[p.name, p.stat().st_size, hashes.file_sha256(p)] for p in weights]
    return {"path": str(folder.resolve()), "sha256": sha256_text(listing, weighed), "files": [p.name for p in weights]}


def tokenizer_fingerprint(path: str, hashes: HashCache) -> str | None:
    """Every non-weight file of the folder, by name and content: whichever of them a tokenizer class
    reads (vocab.txt, *.model, *.tiktoken, its own tokenization_*.py, ...), an edit changes this."""
    folder = local_model_dir(path)
    if folder is None:
        return None
    return sha256_text("files", _other_files(folder_files(folder)[1], hashes))


def data_fingerprint(samples) -> str:
    """The selected samples' content (domain, id, prompt, responses), in order."""
    h = hashlib.sha256()
    for s in samples:
        h.update(json.dumps([s.domain, s.id, s.prompt, s.chosen, s.rejected], ensure_ascii=False).encode())
        h.update(b"\n")
    return h.hexdigest()

"""A model folder's weight files, read as far as a run needs before loading them: which they are,
their safetensors headers, and one line for each that cannot be weights (a git-lfs pointer that
was never pulled, a safetensors file cut short, a header that does not parse, a shard the index
names that is missing, pickle files where only safetensors may load). Every path that reads
weights (the pre-flight, --tp's, the adapters' weight names, model loading itself) asks here, so
the same fault is the same line wherever it is met.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

from ..errors import UsageError

LFS_POINTER = b"version https://git-lfs.github.com/spec/"
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt")
INDEX = "model.safetensors.index.json"


class WeightFileError(UsageError):
    """A weight file that cannot be what it is named: the message names the file and what it is."""


def _pointer(file: Path, head: bytes) -> WeightFileError | None:
    if head.startswith(LFS_POINTER):
        return WeightFileError(f"weight file {file} is a git-lfs pointer ({file.stat().st_size} bytes), not the "
                               f"weights: run `git lfs pull` in {file.parent} (or download the file again)")
    return None


def read_header(file: Path) -> dict:
    """{name: (dtype, shape)} of a safetensors file, from its header alone; a WeightFileError when
    the file is a git-lfs pointer, is cut short of the data its header describes, or has no header."""
    file = Path(file)
    with open(file, "rb") as fh:
        lead = fh.read(len(LFS_POINTER))
        pointer = _pointer(file, lead)
        if pointer is not None:
            raise pointer
        fh.seek(8)
        total = file.stat().st_size
        (size,) = struct.unpack("<Q", lead[:8]) if len(lead) >= 8 else (-1,)
        if not 0 < size <= total - 8:
            raise WeightFileError(f"weight file {file} is not a safetensors file: its header length ({size} bytes) "
                                  f"does not fit in its {total} bytes (cut short, or another format?)")
        try:
            meta = json.loads(fh.read(size))
            ends = [int(v["data_offsets"][1]) for k, v in meta.items() if k != "__metadata__"]
        except (ValueError, KeyError, TypeError, IndexError):
            raise WeightFileError(f"weight file {file} is not a safetensors file: its header does not parse") from None
    need = 8 + size + max(ends, default=0)
    if need > total:
        raise WeightFileError(f"weight file {file} is cut short: {total} bytes of the {need} its header describes "
                              "(an interrupted download or copy? download it again)")
    return {k: (v["dtype"], v["shape"]) for k, v in meta.items() if k != "__metadata__"}


def safetensors_files(folder: Path) -> list[Path]:
    """The folder's safetensors shards: those its index names (each must be there), else every one."""
    folder = Path(folder)
    index = folder / INDEX
    if index.is_file():
        try:
            names = sorted(set(json.loads(index.read_text()).get("weight_map", {}).values()))
        except (ValueError, AttributeError):
            raise WeightFileError(f"weight index {index} does not parse as a safetensors index") from None
        missing = [n for n in names if not (folder / n).is_file()]
        if missing:
            raise WeightFileError(f"weight index {index} names {missing[0]}"
                                  f"{f' and {len(missing) - 1} more' if len(missing) > 1 else ''}, "
                                  "missing from the folder (an incomplete download?)")
        return [folder / n for n in names]
    return sorted(folder.glob("*.safetensors"))


def check_weights(path: str, what: str = "model", allow_pickle: bool = False) -> None:
    """Every weight file of a local folder is readable as what it is named (headers only; nothing is
    loaded), and pickle files load only with allow_pickle: else one line naming the file. A hub id
    (not a folder) is left to loading."""
    folder = Path(path).expanduser()
    if not folder.is_dir():
        return
    files = safetensors_files(folder)
    for f in files:
        read_header(f)
    if files:
        return
    pickled = sorted(p for p in folder.iterdir() if p.is_file() and p.name.endswith(PICKLE_SUFFIXES))
    for p in pickled:
        with open(p, "rb") as fh:
            pointer = _pointer(p, fh.read(len(LFS_POINTER)))
        if pointer is not None:
            raise pointer
    if pickled and not allow_pickle:
        raise UsageError(f"{what} {path}: weights are pickle files ({pickled[0].name}), which can run code when "
                         "loaded; pass --allow-pickle-weights if you trust them, or convert them to safetensors")

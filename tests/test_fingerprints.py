"""Weight fingerprints: the parallel sha256 tree against a plain one-thread computation of its
definition; the hash cache reuses a digest only for the same path, size, mtime and scheme; a
changed weight file recomputes its pass; without a store the weights are never read."""

import hashlib
import os
from dataclasses import replace

import pytest

from rmbench_fast.store import fingerprints as fingerprints
from rmbench_fast.engine.score import ScoreOptions, score
from rmbench_fast.store.fingerprints import HashCache, tree_sha256


def plain_tree(data: bytes, chunk: int) -> str:
    """The definition, written plainly: sha256(scheme:size:) then each chunk's sha256 digest."""
    top = hashlib.sha256(f"sha256-tree:{chunk}:{len(data)}:".encode())
    for i in range(0, max(1, len(data)), chunk):
        top.update(hashlib.sha256(data[i:i + chunk]).digest())
    return top.hexdigest()


@pytest.mark.parametrize("size", [0, 1, 999, 1000, 1001, 10_500])
@pytest.mark.parametrize("threads", [1, 3, 16])
def test_tree_matches_its_definition(tmp_path, size, threads):
    data = os.urandom(size)
    path = tmp_path / "w.bin"
    path.write_bytes(data)
    assert tree_sha256(path, size, threads=threads, chunk=1000) == plain_tree(data, 1000)


def test_tree_sees_every_byte(tmp_path):
    data = bytearray(os.urandom(5000))
    path = tmp_path / "w.bin"
    path.write_bytes(data)
    before = tree_sha256(path, len(data), threads=4, chunk=1000)
    data[4321] ^= 1
    path.write_bytes(data)
    assert tree_sha256(path, len(data), threads=4, chunk=1000) != before


def test_a_file_cut_short_while_hashing_is_an_error(tmp_path):
    path = tmp_path / "w.bin"
    path.write_bytes(b"x" * 100)
    with pytest.raises(OSError, match="shorter than its 200 bytes"):
        tree_sha256(path, 200, chunk=64)


def test_the_piece_size_is_part_of_the_digest(tmp_path):
    """One piece either way (the same bytes hashed the same): only the header tells them apart."""
    path = tmp_path / "w.bin"
    path.write_bytes(b"z" * 300)
    assert tree_sha256(path, 300, chunk=1000) != tree_sha256(path, 300, chunk=2000)


def test_cache_reuses_only_the_same_stamp(tmp_path, monkeypatch):
    path = tmp_path / "w.bin"
    path.write_bytes(b"a" * 3000)
    cache = HashCache(tmp_path / "hashes.json")
    first = cache.file_sha256(path)
    assert cache.bytes_hashed == 3000
    cache.save()
    reloaded = HashCache(tmp_path / "hashes.json")
    calls = []
    monkeypatch.setattr(fingerprints, "tree_sha256", lambda *a, **k: calls.append(a) or "recomputed")
    assert reloaded.file_sha256(path) == first and not calls  # same path, size, mtime: not read
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    assert reloaded.file_sha256(path) == "recomputed" and len(calls) == 1
    # an entry of the old scheme (plain sha256: [size, mtime, digest]) is not taken for a tree digest
    st = path.stat()
    reloaded.entries[str(path.resolve())] = [st.st_size, st.st_mtime_ns, "f" * 64]
    assert reloaded.file_sha256(path) == "recomputed" and len(calls) == 2


@pytest.fixture
def opts(world, tmp_path):
    return ScoreOptions(model=world["policy"], ref_model=world["ref"], data=world["data"], progress=False,
                        cache_dir=str(tmp_path / "store"))


def test_a_changed_weight_file_recomputes(opts, tmp_path):
    import shutil

    policy = tmp_path / "policy"
    shutil.copytree(opts.model, policy)
    o = replace(opts, model=str(policy))
    first = score(o).run
    assert first["passes_computed"] == 2 and first["models"]["model"]["bytes_hashed"] > 0
    again = score(o).run
    assert again["passes_computed"] == 0 and again["models"]["model"]["bytes_hashed"] == 0
    weights = next(policy.glob("*.safetensors"))
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1  # the last byte of the last tensor: same size, other content
    weights.write_bytes(data)
    changed = score(o).run
    assert changed["passes_computed"] == 1  # the policy again, the reference from the store
    assert changed["models"]["model"]["sha256"] != first["models"]["model"]["sha256"]


def test_no_store_reads_no_weights(opts, monkeypatch):
    calls = []
    real = fingerprints.tree_sha256
    monkeypatch.setattr(fingerprints, "tree_sha256", lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    run = score(replace(opts, cache=False)).run
    assert not [p for p in calls if str(p).endswith(fingerprints.WEIGHT_SUFFIXES)]
    model = run["models"]["model"]
    assert model["weights_hashed"] is False and model["bytes_hashed"] == 0
    assert model["sha256"] is None and model["stat_key"]  # no content hash claimed
    assert model["load_s"] > 0 and model["batches_s"] > model["first_batch_s"] > 0 and model["fingerprint_s"] >= 0

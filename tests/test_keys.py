"""Store keys cover what can change the numbers: the same command twice reuses the store; another
package version, another source of a module a pass imports, or another transformers / tokenizers /
torch version recomputes, and an edit to a module no pass imports does not; sweeps find the entries
a score run left."""

from dataclasses import replace

import sys

import pytest
import tokenizers
import torch
import transformers

import rmbench_fast
from rmbench_fast.store import keys as keys
from rmbench_fast.engine.score import ScoreOptions, score
from rmbench_fast.engine.sweep import find_checkpoints, run_sweep

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


@pytest.fixture
def opts(world, tmp_path):
    return ScoreOptions(model=world["policy"], ref_model=world["ref"], data=world["data"], progress=False,
                        cache_dir=str(tmp_path / "store"))


def computed(o):
    run = score(o).run
    return run["passes_computed"], run["cache"]["tokenized_from_cache"]


def test_same_command_reuses_the_store(opts):
    assert computed(opts) == (2, False)
    assert computed(opts) == (0, True)


@pytest.mark.parametrize("change", ["package version", "scoring module source", "transformers", "tokenizers",
                                    "torch"])
def test_a_change_recomputes(opts, monkeypatch, change):
    assert computed(opts) == (2, False)
    if change == "package version":
        monkeypatch.setattr(rmbench_fast, "__version__", rmbench_fast.__version__ + ".post1")
    elif change == "scoring module source":
        edited(monkeypatch, "rmbench_fast/scorers/dpo.py")
    else:
        module = {"transformers": transformers, "tokenizers": tokenizers, "torch": torch}[change]
        # transformers 5 replaces its module object in sys.modules when some model classes load: the
        # installed version changes for both (keys read it from the one loaded now)
        other = module.__version__ + "+other"
        for m in {id(module): module, id(sys.modules[change]): sys.modules[change]}.values():
            monkeypatch.setattr(m, "__version__", other)
    try:
        assert computed(opts) == (2, False)  # tokenization and both passes again
        assert computed(opts) == (0, True)  # and reused under the new key
    finally:
        keys.code_fingerprint.cache_clear()


def edited(monkeypatch, *files):
    """Every source of `files` (paths under the repository) read with a line added, as an edit would."""
    real = keys.read_source
    targets = {(ROOT / f).resolve() for f in files}
    monkeypatch.setattr(keys, "read_source", lambda path: real(path) + (b"# edited\n" if path.resolve() in targets
                                                                         else b""))
    keys.code_fingerprint.cache_clear()


# (edited files, DPO passes computed again, tokenized inputs reused). Tokenization is keyed on the
# scorer's modules too (its encode lives there), so an edit to what the scorer imports redoes both.
EDITS = {
    "no pass imports it": (("rmbench_fast/cli/main.py", "rmbench_fast/results/plots.py", "rmbench_fast/engine/sweep.py",
                            "rmbench_fast/adapters/grm.py", "rmbench_fast/scorers/rm.py"), 0, True),
    "the batch loop": (("rmbench_fast/engine/runner.py",), 2, True),
    "batching, which the scorer imports": (("rmbench_fast/inputs/batching.py",), 2, False),
    "a kernel the DPO scorer imports": (("kernels/logprob_torch.py",), 2, False),
    "the chat format": (("rmbench_fast/inputs/templates.py",), 2, False),
}


@pytest.mark.parametrize("what", list(EDITS))
def test_an_edit_recomputes_only_what_imports_it(opts, monkeypatch, what):
    files, passes, tokenized_reused = EDITS[what]
    assert computed(opts) == (2, False)
    try:
        edited(monkeypatch, *files)
        assert computed(opts) == (passes, tokenized_reused)
    finally:
        keys.code_fingerprint.cache_clear()


def test_the_key_names_what_the_scorer_imports():
    from rmbench_fast.store.code import closure

    rm = set(closure(("rmbench_fast.scorers.rm",)))
    assert {"rmbench_fast.inputs.batching", "rmbench_fast.models.loading", "rmbench_fast.scorers.base"} <= rm
    assert not rm & {"rmbench_fast.scorers.dpo", "rmbench_fast.kernels", "rmbench_fast.cli.main",
                     "rmbench_fast.results.metrics", "rmbench_fast.adapters.grm"}
    assert "rmbench_fast.kernels.logprob_triton" in closure(("rmbench_fast.scorers.dpo",))


def test_gpu_name_and_8bit_libraries_in_pass_keys():
    args = (("rmbench_fast.scorers.rm",), "model", "tokenized")
    cpu = keys.pass_key(*args, None, False, False)
    assert keys.device_versions(None) == {}
    assert set(keys.device_versions(None, int8=True)) == {"bitsandbytes", "accelerate"}
    assert keys.pass_key(*args, None, True, False) != cpu  # 8-bit: its libraries' versions
    h200 = keys.pass_key(*args, "NVIDIA H200", False, False)
    assert keys.pass_key(*args, "NVIDIA A100-SXM4-80GB", False, False) != h200 != cpu


def test_sweep_reuses_what_score_stored(opts, tmp_path):
    score(opts)  # the reference and this checkpoint's passes, stored
    found = find_checkpoints((opts.model,))
    result = run_sweep(replace(opts, model=None), found, str(tmp_path / "sweep"), plots=False, echo=lambda *a: None)
    assert result["model_passes_computed"] == 0 and result["model_passes_cached"] == 2


def _dist(tmp_path, version, editable=False, record=True):
    """A distribution 'fakelib' whose package lies in tmp_path/src (found with find_spec, not imported)."""
    import json
    from importlib.metadata import PathDistribution

    pkg = tmp_path / "src" / "fakelib"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text("X = 1\n")
    info = tmp_path / "site" / f"fakelib-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: fakelib\nVersion: {version}\n")
    (info / "top_level.txt").write_text("fakelib\n")
    if editable:
        (info / "direct_url.json").write_text(json.dumps({"url": "file:///src", "dir_info": {"editable": True}}))
    if record:
        (info / "RECORD").write_text("fakelib/__init__.py,sha256=abc,6\n")
    return PathDistribution(info), pkg, info


def test_a_development_install_is_named_by_its_sources(tmp_path, monkeypatch):
    from rmbench_fast.store.installs import distribution_sources

    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    release, _, _ = _dist(tmp_path / "a", "1.0")
    assert distribution_sources(release) is None  # a release: its version names it
    editable, pkg, _ = _dist(tmp_path / "b", "1.0", editable=True)
    monkeypatch.syspath_prepend(str(tmp_path / "b" / "src"))
    first = distribution_sources(editable)
    assert first.startswith("sources:")
    (pkg / "__init__.py").write_text("X = 2\n")  # an edit that keeps the version
    assert distribution_sources(editable) not in (first, None)
    built, _, info = _dist(tmp_path / "c", "1.1.dev0")  # a wheel built from a checkout: its RECORD's hashes
    rec = distribution_sources(built)
    assert rec.startswith("record:")
    (info / "RECORD").write_text("fakelib/__init__.py,sha256=def,6\n")
    assert distribution_sources(built) != rec
    no_record, _, _ = _dist(tmp_path / "d", "1.0", record=False)  # a plain setup.py develop: no RECORD
    assert distribution_sources(no_record).startswith("sources:")


def test_store_keys_name_a_development_transformers(monkeypatch):
    before = keys.tokenized_key(("rmbench_fast.scorers.rm",), "tok")
    monkeypatch.setattr(keys, "install_sources", lambda name: "sources:abc" if name == "transformers" else None)
    assert keys.library_versions()["transformers_sources"] == "sources:abc"
    assert keys.tokenized_key(("rmbench_fast.scorers.rm",), "tok") != before


def test_keys_of_entries_kept_in_memory_only(monkeypatch):
    """Without a result store (--no-cache) entries live in this process, computed and read by the
    same code and libraries: their keys leave those out (no source is read for them), and still
    tell apart every other input."""
    cpu = keys.pass_key(("rmbench_fast.scorers.rm",), "model", "tok", None, False, False, "float32")
    tok = keys.tokenized_key(("rmbench_fast.scorers.rm",), "tok", "tulu")
    monkeypatch.setattr(keys, "code_fingerprint", lambda roots: (_ for _ in ()).throw(AssertionError(roots)))
    monkeypatch.setattr(keys, "library_versions", lambda: (_ for _ in ()).throw(AssertionError()))
    memory = keys.pass_key(("rmbench_fast.scorers.rm",), "model", "tok", None, False, False, "float32",
                           in_memory=True)
    assert memory != cpu
    others = [keys.pass_key(("rmbench_fast.scorers.rm",), *args, in_memory=True) for args in [
        ("model2", "tok", None, False, False, "float32"), ("model", "tok2", None, False, False, "float32"),
        ("model", "tok", "NVIDIA H200", False, False, "float32"), ("model", "tok", None, True, False, "float32"),
        ("model", "tok", None, False, True, "float32"), ("model", "tok", None, False, False, "bfloat16")]]
    assert len({memory, *others}) == 7
    in_memory = keys.tokenized_key(("rmbench_fast.scorers.rm",), "tok", "tulu", in_memory=True)
    assert in_memory != tok
    assert len({in_memory, keys.tokenized_key((), "tok2", "tulu", in_memory=True),
                keys.tokenized_key((), "tok", "zephyr", in_memory=True)}) == 3

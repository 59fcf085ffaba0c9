"""Store keys cover what can change the numbers: the same command twice reuses the store; another
package version, another source of a scoring module, or another transformers / tokenizers / torch
version recomputes; sweeps find the entries a score run left."""

from dataclasses import replace

import pytest
import tokenizers
import torch
import transformers

import rmbench_fast
from rmbench_fast import keys
from rmbench_fast.engine import ScoreOptions, score
from rmbench_fast.sweep import find_checkpoints, run_sweep


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
        real = keys.read_source
        monkeypatch.setattr(keys, "read_source",
                            lambda path: real(path) + (b"# edited\n" if path.name == "dpo.py" else b""))
        keys.code_fingerprint.cache_clear()
    else:
        module = {"transformers": transformers, "tokenizers": tokenizers, "torch": torch}[change]
        monkeypatch.setattr(module, "__version__", module.__version__ + "+other")
    try:
        assert computed(opts) == (2, False)  # tokenization and both passes again
        assert computed(opts) == (0, True)  # and reused under the new key
    finally:
        keys.code_fingerprint.cache_clear()


def test_presentation_modules_do_not_count(monkeypatch):
    before = keys.code_fingerprint()
    real = keys.read_source
    monkeypatch.setattr(keys, "read_source", lambda path: real(path) + (b"# edited\n" if path.name == "plots.py" else b""))
    keys.code_fingerprint.cache_clear()
    try:
        assert keys.code_fingerprint() == before
    finally:
        keys.code_fingerprint.cache_clear()


def test_sweep_reuses_what_score_stored(opts, tmp_path):
    score(opts)  # the reference and this checkpoint's passes, stored
    found = find_checkpoints((opts.model,))
    result = run_sweep(replace(opts, model=None), found, str(tmp_path / "sweep"), plots=False, echo=lambda *a: None)
    assert result["model_passes_computed"] == 0 and result["model_passes_cached"] == 2

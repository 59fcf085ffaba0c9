"""Sweeps, the result store and resume: tiny checkpoints, counted forward calls, injected failures."""

import json
from dataclasses import replace

import numpy as np
import pytest

from conftest import make_item
from rmbench_fast.engine.score import ScoreOptions, score
from rmbench_fast.engine.sweep import checkpoint_step, find_checkpoints, run_sweep
from rmbench_fast.tiny.models import build_model, llama_config, save_model, train_tokenizer

DOMAINS = ["chat", "code", "math", "safety-refuse", "safety-response"]


class Calls:
    """hooks(role, batch): counts forward batches per role; raises after `fail_after` batches."""

    def __init__(self, fail_after=None):
        self.n = {}
        self.fail_after = fail_after

    def __call__(self, role, batch):
        self.n[role] = self.n.get(role, 0) + 1
        if self.fail_after is not None and self.total == self.fail_after:
            raise KeyboardInterrupt("injected failure")

    @property
    def total(self):
        return sum(self.n.values())


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep")
    data = root / "data.json"
    data.write_text(json.dumps([make_item(i, d) for d in DOMAINS for i in range(2)]))
    tok = train_tokenizer([json.dumps(make_item(i)) for i in range(30)], vocab_size=300)
    cfg = dict(vocab_size=len(tok), hidden=32, layers=1, heads=4)
    ckpts = {}
    for step, seed in ((10, 1), (2, 2), (30, 3)):
        ckpts[step] = str(save_model(build_model("lm", llama_config(**cfg), seed), tok, root / "run" / f"checkpoint-{step}"))
    ref = str(save_model(build_model("lm", llama_config(**cfg), 9), tok, root / "ref"))
    return {"root": root, "data": str(data), "ckpts": ckpts, "ref": ref, "tok": tok, "cfg": cfg}


def opts(run_dir, tmp_path, **kw):
    return ScoreOptions(model=None, data=run_dir["data"], ref_model=run_dir["ref"], progress=False,
                        cache_dir=str(tmp_path / "store"), max_tokens_per_batch=600, **kw)


def test_checkpoint_order(run_dir, tmp_path):
    found = find_checkpoints((), str(run_dir["root"] / "run" / "checkpoint-*"))
    assert [s for s, _ in found] == [2, 10, 30]
    d = tmp_path / "final"
    d.mkdir()
    (d / "trainer_state.json").write_text(json.dumps({"global_step": 77}))
    assert checkpoint_step(str(d)) == 77


def test_sweep_runs_reference_once_and_equals_separate_scores(run_dir, tmp_path):
    calls = Calls()
    found = find_checkpoints((), str(run_dir["root"] / "run" / "checkpoint-*"))
    result = run_sweep(opts(run_dir, tmp_path), found, str(tmp_path / "sweep"), hooks=calls, echo=lambda *a: None)
    batches = calls.n["model"] // 3
    assert calls.n["ref_model"] == batches  # one reference pass for three checkpoints
    # K + 1 distinct passes: the reference's computed once and counted once, not once per checkpoint
    assert result["model_passes"] == 4 and result["reference_passes"] == 1
    assert result["model_passes_computed"] == 4 and result["model_passes_cached"] == 0
    rows = json.loads((tmp_path / "sweep" / "sweep.json").read_text())["checkpoints"]
    assert [r["step"] for r in rows] == [2, 10, 30]
    assert (tmp_path / "sweep" / "sweep.csv").read_text().count("\n") == 4
    for r in rows:
        alone = score(ScoreOptions(model=r["path"], data=run_dir["data"], ref_model=run_dir["ref"], progress=False,
                                   cache=False))
        mine = json.loads((tmp_path / "sweep" / r["dir"] / "results.json").read_text())
        np.testing.assert_allclose([x["score_chosen"] for x in mine], alone.chosen, rtol=0, atol=1e-9)
        np.testing.assert_allclose([x["score_rejected"] for x in mine], alone.rejected, rtol=0, atol=1e-9)
        assert r["overall"] == alone.summary["overall"]
    # pictures and report
    for png in [tmp_path / "sweep" / "sweep.png"] + [tmp_path / "sweep" / r["dir"] / "matrices.png" for r in rows]:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "sweep.png" in (tmp_path / "sweep" / "report.md").read_text()


def test_sweep_resumes_after_a_crash(run_dir, tmp_path):
    found = find_checkpoints(tuple(run_dir["ckpts"].values()))
    full = Calls()
    run_sweep(opts(run_dir, tmp_path / "a"), found, str(tmp_path / "full"), hooks=full, plots=False,
              echo=lambda *a: None)
    fail_at = full.total // 2 + 1  # inside the second checkpoint
    first = Calls(fail_after=fail_at)
    o = opts(run_dir, tmp_path / "b")
    with pytest.raises(KeyboardInterrupt):
        run_sweep(o, found, str(tmp_path / "crashed"), hooks=first, plots=False, echo=lambda *a: None)
    again = Calls()
    run_sweep(o, found, str(tmp_path / "crashed"), hooks=again, plots=False, echo=lambda *a: None)
    assert again.total == full.total - fail_at  # every finished batch was kept
    a = json.loads((tmp_path / "full" / "sweep.json").read_text())["checkpoints"]
    b = json.loads((tmp_path / "crashed" / "sweep.json").read_text())["checkpoints"]
    assert [{k: v for k, v in r.items() if k != "dir"} for r in a] == [{k: v for k, v in r.items() if k != "dir"}
                                                                      for r in b]
    for r in a:
        assert (tmp_path / "full" / r["dir"] / "results.json").read_bytes() == \
            (tmp_path / "crashed" / r["dir"] / "results.json").read_bytes()


def test_changed_checkpoint_is_recomputed_alone(run_dir, tmp_path):
    import shutil

    root = tmp_path / "ckpts"
    paths = [str(shutil.copytree(p, root / f"checkpoint-{s}")) for s, p in sorted(run_dir["ckpts"].items())]
    found = find_checkpoints(tuple(paths))
    o = opts(run_dir, tmp_path)
    first = Calls()
    run_sweep(o, found, str(tmp_path / "s"), hooks=first, plots=False, echo=lambda *a: None)
    batches = first.n["ref_model"]
    # new weights in the middle checkpoint
    save_model(build_model("lm", llama_config(**run_dir["cfg"]), seed=42), run_dir["tok"], paths[1])
    second = Calls()
    run_sweep(o, found, str(tmp_path / "s"), hooks=second, plots=False, echo=lambda *a: None)
    assert second.n == {"model": batches}  # only that checkpoint, once; the reference from the store


def test_score_resume_and_corrupt_entry(run_dir, tmp_path):
    o = replace(opts(run_dir, tmp_path), model=run_dir["ckpts"][2], output=str(tmp_path / "out"))
    full = Calls()
    clean = score(replace(o, cache=False), hooks=full)
    crash = Calls(fail_after=3)
    with pytest.raises(KeyboardInterrupt):
        score(o, hooks=crash)
    rest = Calls()
    resumed = score(o, hooks=rest)
    assert crash.total == 3 and rest.total == full.total - 3  # the 3 finished batches are not redone
    np.testing.assert_array_equal(resumed.chosen, clean.chosen)
    # everything cached now: no forward call
    none = Calls()
    score(o, hooks=none)
    assert none.total == 0
    # a truncated entry is detected and recomputed
    entries = sorted((tmp_path / "store" / "entries").rglob("*.npz"), key=lambda p: p.stat().st_size)
    for p in entries:
        p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2])
    redo = Calls()
    again = score(o, hooks=redo)
    assert redo.total > 0
    np.testing.assert_array_equal(again.chosen, clean.chosen)


def test_sweep_loads_the_shared_data_and_tokenizer_once(run_dir, tmp_path, monkeypatch):
    """Three checkpoints and a reference with byte-identical tokenizer files: one tokenizer load and
    one data load for the whole sweep (a no-op rerun spent most of its time loading them again), and
    the same scores as the first test's separate runs check."""
    import rmbench_fast.engine.prepare as prep_mod

    counts = {"tokenizer": 0, "data": 0}
    real_tok, real_data = prep_mod.load_tokenizer, prep_mod.load_dataset

    def tok(*a, **kw):
        counts["tokenizer"] += 1
        return real_tok(*a, **kw)

    def data(*a, **kw):
        counts["data"] += 1
        return real_data(*a, **kw)

    monkeypatch.setattr(prep_mod, "load_tokenizer", tok)
    monkeypatch.setattr(prep_mod, "load_dataset", data)
    found = find_checkpoints((), str(run_dir["root"] / "run" / "checkpoint-*"))
    result = run_sweep(opts(run_dir, tmp_path), found, str(tmp_path / "sweep"), plots=False, echo=lambda *a: None)
    assert counts == {"tokenizer": 1, "data": 1}
    assert len(result["checkpoints"]) == 3
    alone = score(ScoreOptions(model=found[1][1], data=run_dir["data"], ref_model=run_dir["ref"], progress=False,
                               cache=False))
    assert result["checkpoints"][1]["overall"] == alone.summary["overall"]


def test_ray_path_counts_checkpoints_its_workers_read_back(run_dir, tmp_path, monkeypatch):
    """--engine ray, its Ray calls replaced by this process (tests/test_ray.py runs the real thing
    where Ray is installed): a rerun's workers read every finished checkpoint back, and the sweep
    counts them as read back, as the local engine does, not as passes found in the store."""
    import rmbench_fast.engine.scaleout.distributed as distributed
    import rmbench_fast.engine.prepare as prepare

    real_target = prepare.run_target
    monkeypatch.setattr(prepare, "run_target", lambda o, reuse: real_target(replace(o, engine="local"), reuse))
    monkeypatch.setattr(distributed, "run_checkpoints_on_ray",
                        lambda cfg, jobs, store_dir, task: ((k, task(o, store_dir)) for k, o in jobs))
    found = find_checkpoints(tuple(run_dir["ckpts"].values()))[:2]
    o = replace(opts(run_dir, tmp_path), ref_model=None, ref_free="sum", engine="ray")
    first = run_sweep(o, found, str(tmp_path / "s"), plots=False, echo=lambda *a: None)
    assert first["checkpoints_read_back"] == 0 and first["model_passes_computed"] == 2
    again = run_sweep(o, found, str(tmp_path / "s"), plots=False, echo=lambda *a: None)
    assert again["checkpoints_read_back"] == 2
    assert again["model_passes_computed"] == 0 and again["model_passes_cached"] == 0
    meta = json.loads((tmp_path / "s" / "sweep.json").read_text())
    assert meta["checkpoints_read_back"] == 2 and meta["model_passes_cached"] == 0
    assert [r["overall"] for r in again["checkpoints"]] == [r["overall"] for r in first["checkpoints"]]
    base = again["checkpoints"][0]["dir"]
    assert again["checkpoints"][1]["vs_baseline"]["baseline"] == base

"""Runs again, as a user sees them: a pass served from the store closes its progress bar; a run
resumed after an out-of-memory halving and an interruption counts each sequence once; pictures are
drawn again only when their numbers change."""

import re
from dataclasses import replace

import pytest
import torch

import rmbench_fast.engine.score as score_mod
from rmbench_fast.engine.progress import Progress
from rmbench_fast.engine.score import ScoreOptions, score
from rmbench_fast.scorers import RewardModelScorer


def test_a_pass_from_the_store_closes_its_bar(world, tmp_path, monkeypatch):
    o = ScoreOptions(model=world["policy"], ref_model=world["ref"], data=world["data"], cache_dir=str(tmp_path))
    score(o)
    made = []

    class Recorded(Progress):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            self.closed = False
            made.append(self)

        def close(self):
            self.closed = True
            super().close()

    monkeypatch.setattr(score_mod, "Progress", Recorded)
    assert score(o).run["passes_computed"] == 0
    assert len(made) == 2 and all(p.closed and p.done == p.total for p in made)


def test_resume_after_halving_and_interruption_counts_each_sequence_once(world, tmp_path, monkeypatch, capsys):
    """Batches over 4 rows run out of memory (halved); the run is interrupted after a half; the
    resumed run's progress ends at the total, never past it."""
    monkeypatch.setenv("RMBENCH_PROGRESS_SECONDS", "0")  # a line per batch
    monkeypatch.setenv("RMBENCH_FLUSH_SECONDS", "0")  # progress saved after every batch
    real = RewardModelScorer.batch_fn

    def batch_fn(self, model, device):
        run = real(self, model, device)

        def wrapped(seqs, batch, prefix=None):
            if len(batch.indices) > 4:
                raise torch.cuda.OutOfMemoryError("CUDA out of memory (injected)")
            return run(seqs, batch, prefix)

        return wrapped

    monkeypatch.setattr(RewardModelScorer, "batch_fn", batch_fn)
    o = ScoreOptions(model=world["rm"], data=world["data"], cache_dir=str(tmp_path), max_batch_size=8)
    seen = []

    def interrupt(role, batch):
        seen.append(len(batch.indices))
        if len(seen) == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        score(o, hooks=interrupt)
    capsys.readouterr()
    run = score(o)
    assert run.run["models"]["model"]["resumed_sequences"] > 0
    counts = [tuple(map(int, m.groups())) for m in re.finditer(r"model: ([\d,]+)/([\d,]+) sequences",
                                                               capsys.readouterr().err.replace(",", ""))]
    assert counts and all(done <= total for done, total in counts), counts
    assert counts[-1][0] == counts[-1][1] == run.run["n_sequences"]


def test_pictures_are_drawn_only_when_their_inputs_change(world, tmp_path, monkeypatch):
    """A rerun keeps pictures whose numbers did not change (drawing them was most of a no-op
    sweep rerun); other numbers draw them again."""
    import json

    import rmbench_fast.results.plots as plots

    out = tmp_path / "run"
    score(ScoreOptions(model=world["rm"], data=world["data"], output=str(out), cache=False, progress=False))
    plots.plot_run(out)
    drawn = []
    real = plots._save
    monkeypatch.setattr(plots, "_save", lambda fig, path, want: drawn.append(path) or real(fig, path, want))
    before = (out / "matrices.png").read_bytes()
    plots.plot_run(out)
    assert drawn == [] and (out / "matrices.png").read_bytes() == before
    summary = json.loads((out / "summary.json").read_text())
    summary["matrices"]["chat"][0][0] = 1 - summary["matrices"]["chat"][0][0]
    (out / "summary.json").write_text(json.dumps(summary))
    plots.plot_run(out)
    assert drawn == [out / "matrices.png"] and (out / "matrices.png").read_bytes() != before


def test_a_finished_run_is_read_back_without_loading_anything(world, tmp_path):
    """The same command again, in a fresh interpreter: the results come back from the output folder
    (bit-identical), and neither transformers nor numba is imported, nor the data read."""
    import json
    import subprocess
    import sys

    out = tmp_path / "out"
    args = ["score", "--model", world["policy"], "--ref-model", world["ref"], "--data", world["data"],
            "--cache-dir", str(tmp_path / "store"), "--output", str(out), "-q"]
    code = ("import sys; from rmbench_fast.cli.main import main\n"
            "try:\n    main(sys.argv[1:])\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
            "print('LOADED', sorted(m for m in ('transformers', 'numba', 'tokenizers') if m in sys.modules))")
    first = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "'transformers'" in first.stdout.splitlines()[-1]
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    again = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "read back" in again.stdout and again.stdout.splitlines()[-1] == "LOADED []"
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # run.json too: it describes the run that computed
    assert json.loads(before["run.json"])["stamp"]


def test_what_a_finished_run_depends_on_is_checked(world, tmp_path):
    import json
    import os
    import shutil

    import numpy as np

    policy = tmp_path / "policy"
    shutil.copytree(world["policy"], policy)
    o = ScoreOptions(model=str(policy), ref_model=world["ref"], data=world["data"], cache_dir=str(tmp_path / "s"),
                     output=str(tmp_path / "out"), progress=False)
    first = score(o)
    assert not first.run.get("reused")
    again = score(o)
    assert again.run["reused"] and again.run["passes_computed"] == 0 and again.samples is None
    np.testing.assert_array_equal(again.chosen, first.chosen)
    assert again.summary == first.summary
    # each of these makes the run load, check and look up its passes again (the store still serves them)
    weights = policy / "model.safetensors"
    st = weights.stat()
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns + 1))  # a checkpoint rewritten in place
    assert not score(o).run.get("reused")
    assert score(o).run.get("reused")  # ... and stamped again
    assert not score(replace(o, max_batch_size=3)).run.get("reused")  # an option that changes the batches
    results = (tmp_path / "out" / "results.json").read_bytes()
    with open(tmp_path / "out" / "results.json", "a") as f:  # result files edited after the run
        f.write(" ")
    run = score(replace(o, max_batch_size=3))  # not this folder's run any more: the store's copy restores it
    assert run.run["reused_from"] == str(tmp_path / "out") and (tmp_path / "out" / "results.json").read_bytes() == results
    assert json.loads((tmp_path / "out" / "run.json").read_text())["options"]["max_batch_size"] == 3
    assert score(replace(o, max_batch_size=3)).run.get("reused")  # results.json rewritten, stamped again
    run = score(replace(o, max_batch_size=3, overwrite=True))
    assert not run.run.get("reused") and run.run["passes_computed"] == 0  # the passes still come from the store


def test_data_edited_during_a_sweep_is_loaded_again(world, tmp_path):
    """A sweep keeps its data across checkpoints (reuse); data edited in between is read again, so
    no checkpoint is stamped (engine.finished) with files it did not score."""
    import json
    import shutil

    data = tmp_path / "data.json"
    shutil.copy(world["data"], data)
    reuse = {}
    o = ScoreOptions(model=world["rm"], data=str(data), progress=False, cache_dir=str(tmp_path / "s"))
    first = score(replace(o, output=str(tmp_path / "a")), reuse=reuse)
    items = json.loads(data.read_text())
    items[0]["prompt"] += " (edited)"
    data.write_text(json.dumps(items))
    second = score(replace(o, output=str(tmp_path / "b")), reuse=reuse)
    assert second.samples[0].prompt.endswith("(edited)") and not first.samples[0].prompt.endswith("(edited)")


def test_run_json_says_where_the_time_went(world, tmp_path):
    """timing: fixed_s is the whole run but model loading and forwards; from the library (no process
    start known) it counts from the run's start; a run served from the store loads no model."""
    o = ScoreOptions(model=world["policy"], ref_model=world["ref"], data=world["data"], cache_dir=str(tmp_path),
                     output=str(tmp_path / "a"))
    t = score(o).run["timing"]
    assert t["startup_s"] is None and t["model_load_s"] > 0 and t["forward_s"] > 0
    assert t["fixed_s"] == pytest.approx(t["total_s"] - t["model_load_s"] - t["forward_s"])
    assert t["total_s"] >= t["load_s"] + t["tokenize_s"] + t["passes_s"] + t["finish_s"]
    t = score(replace(o, output=str(tmp_path / "b"))).run["timing"]
    assert t["model_load_s"] == t["forward_s"] == t["passes_s"] == 0 and t["fixed_s"] == t["total_s"]
    # the console command counts its process from the start
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "rmbench_fast", "score", "--model", world["policy"], "--ref-model", world["ref"],
           "--data", world["data"], "--cache-dir", str(tmp_path), "--output", str(tmp_path / "c"), "-q"]
    subprocess.run(cmd, check=True, capture_output=True)
    t = __import__("json").loads((tmp_path / "c" / "run.json").read_text())["timing"]
    assert t["startup_s"] > 0.02 and t["total_s"] > t["startup_s"]  # at least the interpreter and click


def test_the_same_run_into_another_folder_comes_from_the_store(world, tmp_path):
    """A finished run is kept in the store under its stamp: the same command with another --output,
    in a fresh interpreter, writes byte-identical result files without importing transformers or
    numba, and its run.json says where the run was computed; an interrupted run keeps nothing."""
    import json
    import subprocess
    import sys

    args = ["score", "--model", world["policy"], "--ref-model", world["ref"], "--data", world["data"],
            "--cache-dir", str(tmp_path / "store"), "-q"]
    code = ("import sys; from rmbench_fast.cli.main import main\n"
            "try:\n    main(sys.argv[1:])\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
            "print('LOADED', sorted(m for m in ('transformers', 'numba', 'tokenizers') if m in sys.modules))")
    for out in ("a", "b"):
        done = subprocess.run([sys.executable, "-c", code, *args, "--output", str(tmp_path / out)], capture_output=True,
                              text=True)
        assert done.returncode == 0, done.stderr[-3000:]
    assert "read back from the result store" in done.stdout and done.stdout.splitlines()[-1] == "LOADED []"
    for name in ("results.json", "summary.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    run_a, run_b = (json.loads((tmp_path / d / "run.json").read_text()) for d in "ab")
    assert run_b["reused"] and run_b["reused_from"] == str(tmp_path / "a") and run_b["passes_computed"] == 0
    assert run_b["options"]["output"] == str(tmp_path / "b") and run_b["stamp"] == run_a["stamp"]
    assert run_b["timing"]["fixed_s"] == run_b["timing"]["total_s"] > 0
    # the same command again in b: b's own files, read back as they are
    again = subprocess.run([sys.executable, "-c", code, *args, "--output", str(tmp_path / "b")], capture_output=True,
                           text=True)
    assert "read back from " + str(tmp_path / "b") in again.stdout

    o = ScoreOptions(model=world["policy"], ref_model=world["ref"], data=world["data"], progress=False,
                     cache_dir=str(tmp_path / "store"), max_batch_size=3, output=str(tmp_path / "c"))

    import rmbench_fast.engine.score as score_mod

    real = score_mod.atomic_write_json

    def interrupted(path, obj):  # the results files are written; the run ends before run.json
        raise KeyboardInterrupt

    score_mod.atomic_write_json = interrupted
    try:
        with pytest.raises(KeyboardInterrupt):
            score(o)
    finally:
        score_mod.atomic_write_json = real
    assert (tmp_path / "c" / "results.json").is_file() and not (tmp_path / "c" / "run.json").exists()
    run = score(replace(o, output=str(tmp_path / "d")))
    assert not run.run.get("reused") and run.run["passes_computed"] == 0  # its passes were finished and kept
    assert score(replace(o, output=str(tmp_path / "e"))).run["reused_from"] == str(tmp_path / "d")
    for name in ("results.json", "results.jsonl", "summary.json"):
        assert (tmp_path / "d" / name).read_bytes() == (tmp_path / "e" / name).read_bytes()

"""Resilience: out-of-memory retries, the same command giving the same bytes, and a real process
killed with SIGKILL resuming to the same bytes."""

import json
import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from conftest import make_item

from rmbench_fast.engine.score import ScoreOptions, score
from rmbench_fast.errors import UsageError
from rmbench_fast.scorers import RewardModelScorer
from rmbench_fast.tiny.models import build_model, llama_config, save_model, train_tokenizer


def _flaky(monkeypatch, fail, sizes):
    """Wrap the RM scorer's batch function: batches for which fail(batch) is true raise an
    out-of-memory error; the others are recorded in `sizes` and scored."""
    real = RewardModelScorer.batch_fn

    def batch_fn(self, model, device):
        run = real(self, model, device)

        def wrapped(seqs, batch, prefix=None):
            if fail(batch):
                raise torch.cuda.OutOfMemoryError("CUDA out of memory (injected)")
            sizes.append(len(batch.indices))
            return run(seqs, batch, prefix)

        return wrapped

    monkeypatch.setattr(RewardModelScorer, "batch_fn", batch_fn)


def test_out_of_memory_halves_the_batch(world, monkeypatch):
    o = ScoreOptions(model=world["rm"], data=world["data"], progress=False, cache=False)
    clean = score(o)
    sizes = []
    _flaky(monkeypatch, lambda b: len(b.indices) > 4, sizes)
    retried = score(o)
    assert max(sizes) <= 4 and sum(sizes) == 60
    np.testing.assert_allclose(retried.chosen, clean.chosen, atol=1e-5, rtol=0)
    _flaky(monkeypatch, lambda b: True, [])
    with pytest.raises(UsageError, match=r"out of memory scoring sample \S+, (chosen|rejected) \w+ \(\d+ tokens\)"):
        score(o)


def test_same_command_same_bytes(world, tmp_path):
    for d in ("a", "b"):
        score(ScoreOptions(model=world["policy"], ref_model=world["ref"], data=world["data"], output=str(tmp_path / d),
                           progress=False, cache=False))
    for f in ("results.json", "summary.json"):
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes()
    ra, rb = (json.loads((tmp_path / d / "run.json").read_text()) for d in ("a", "b"))
    timing = {"wall_s", "load_s", "tokenize_s", "score_s", "tokens_per_s", "options", "models", "finished", "timing",
              "memory"}  # the machine's free memory and measured peaks, as the timings vary
    assert {k: v for k, v in ra.items() if k not in timing} == {k: v for k, v in rb.items() if k not in timing}


@pytest.mark.slow
def test_sigkill_at_random_points_then_resume(world, tmp_path):
    """A real process killed with SIGKILL mid-run; the same command again ends with the same bytes
    as an uninterrupted run."""
    big = build_model("lm", llama_config(vocab_size=300, hidden=256, layers=4, heads=4), 11)  # a few seconds of work
    tok = train_tokenizer([json.dumps(make_item(i)) for i in range(30)], vocab_size=300)
    model = str(save_model(big, tok, tmp_path / "model"))
    env = {**os.environ, "RMBENCH_FLUSH_SECONDS": "0", "RMBENCH_CACHE": str(tmp_path / "cache")}
    cmd = [sys.executable, "-m", "rmbench_fast.cli.main", "score", "--model", model, "--data", world["data"], "-q",
           "--max-tokens-per-batch", "200", "--ref-free", "sum"]
    clean = subprocess.run(cmd + ["--output", str(tmp_path / "clean"), "--no-cache"], env=env, capture_output=True)
    assert clean.returncode == 0, clean.stderr
    rng = random.Random(7)
    partial = tmp_path / "cache" / "store" / "partial"
    killed_mid_run = 0
    for attempt in range(2):
        proc = subprocess.Popen(cmd + ["--output", str(tmp_path / "killed")], env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        deadline = time.time() + 120
        # wait until the run has saved some progress (a partial entry), then a random moment more
        while proc.poll() is None and time.time() < deadline and not any(partial.rglob("*.npz")):
            time.sleep(0.02)
        time.sleep(rng.uniform(0.0, 0.2))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            killed_mid_run += 1
        proc.wait()
    assert killed_mid_run >= 1
    again = subprocess.run(cmd + ["--output", str(tmp_path / "killed")], env=env, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    for f in ("results.json", "summary.json"):
        assert (tmp_path / "clean" / f).read_bytes() == (tmp_path / "killed" / f).read_bytes()

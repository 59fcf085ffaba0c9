"""--tp: two gloo ranks on CPU against one process (fp32: per-sample |diff| <= 1e-5 and the same
accuracies) for a reward model, DPO with a reference and reference-free; one rank's out-of-memory
error halves that batch for every rank; a rank killed in the middle of a pass is one line, and the
same command resumes from what the store kept."""

from dataclasses import replace

import numpy as np
import pytest

from rmbench_fast.engine.score import ScoreOptions, score
from rmbench_fast.errors import UsageError

pytestmark = pytest.mark.slow  # each --tp pass starts two processes that import torch and transformers


def _pair(o: ScoreOptions):
    one = score(replace(o, cache=False))
    two = score(replace(o, cache=False, tp=2))
    return one, two


@pytest.mark.parametrize("kind", ["rm", "dpo", "ref-free"])
def test_two_ranks_score_as_one_process(world, kind):
    models = {"rm": dict(model=world["rm"]), "dpo": dict(model=world["policy"], ref_model=world["ref"]),
              "ref-free": dict(model=world["policy"], ref_free="norm")}[kind]
    o = ScoreOptions(data=world["data"], progress=False, dtype="float32", max_batch_size=4, **models)
    one, two = _pair(o)
    np.testing.assert_allclose(two.chosen, one.chosen, rtol=0, atol=1e-5)
    np.testing.assert_allclose(two.rejected, one.rejected, rtol=0, atol=1e-5)
    assert two.summary["domains"] == one.summary["domains"]  # the same accuracies, domain by domain
    assert all(info["tp"] == 2 and info["tp_backend"] == "gloo" for info in two.run["models"].values())
    if kind != "rm":  # the vocabulary-sharded head through the fused op, its self-check passed (no fallback)
        assert all(info["logprob_head"] == "fused" for info in two.run["models"].values()), two.run["models"]


def test_a_killed_rank_is_one_line_and_the_run_resumes(world, tmp_path, monkeypatch):
    o = ScoreOptions(model=world["policy"], ref_model=world["ref"], data=world["data"], progress=False,
                     dtype="float32", max_batch_size=2, cache_dir=str(tmp_path / "store"), tp=2)
    monkeypatch.setenv("RMBENCH_FLUSH_SECONDS", "0")  # progress kept after every batch
    monkeypatch.setenv("RMBENCH_FAULT_KILL_RANK", "1:3")  # rank 1 SIGKILLs itself before its fourth batch
    with pytest.raises(UsageError, match=r"--tp 2: rank 1 ended .* the same command resumes") as e:
        score(o)
    assert "\n" not in str(e.value)
    monkeypatch.delenv("RMBENCH_FAULT_KILL_RANK")
    again = score(o)
    assert again.run["models"]["model"]["resumed_sequences"] >= 3 * 2  # three batches of two kept
    plain = score(replace(o, tp=1, cache=False))
    np.testing.assert_allclose(again.chosen, plain.chosen, rtol=0, atol=1e-5)
    np.testing.assert_allclose(again.rejected, plain.rejected, rtol=0, atol=1e-5)


def test_tp_refuses_what_it_cannot_split(world):
    o = ScoreOptions(model=world["rm"], data=world["data"], progress=False, tp=2)
    with pytest.raises(UsageError, match="--tp 2 with --share-prefix"):
        score(replace(o, share_prefix=True))
    with pytest.raises(UsageError, match="--device-map and --tp both split the model"):
        score(replace(o, device_map="auto"))


def test_one_ranks_out_of_memory_halves_the_batch_for_every_rank(world, monkeypatch):
    """Rank 1 alone runs out of memory at its third batch: the group stops, that batch is cut in two
    and every rank runs the rest again; the scores are those of one process."""
    o = ScoreOptions(model=world["policy"], ref_model=world["ref"], data=world["data"], progress=False,
                     dtype="float32", max_batch_size=4, cache=False, tp=2)
    monkeypatch.setenv("RMBENCH_FAULT_OOM_RANK", "1:2")
    two = score(o)
    assert all(info["out_of_memory_halvings"] == 1 for info in two.run["models"].values())
    one = score(replace(o, tp=1))
    np.testing.assert_allclose(two.chosen, one.chosen, rtol=0, atol=1e-5)
    np.testing.assert_allclose(two.rejected, one.rejected, rtol=0, atol=1e-5)


def test_the_preflight_counts_what_each_rank_holds(world):
    """Before any rank loads: on the CPU the ranks share its memory (all the weights, and each rank's
    activations); a --max-memory under that is one line naming what would fit, and a run that fits
    records the estimate."""
    from rmbench_fast.models.memory import weights_from_files
    from pathlib import Path

    o = ScoreOptions(model=world["rm"], data=world["data"], progress=False, dtype="float32", cache=False, tp=2)
    weights = weights_from_files(Path(world["rm"]), 4).bytes
    with pytest.raises(UsageError) as e:
        score(replace(o, max_memory={"cpu": str(weights)}))  # the weights alone: no room for activations
    line = str(e.value)
    assert "\n" not in line and line.startswith(f"model {world['rm']}: under --tp 2 its 2 ranks share the CPU's memory")
    assert "--device-map auto" in line and "--no-preflight" in line
    run = score(o)
    estimate = run.run["models"]["model"]["memory"]["estimate"]
    assert estimate["weights_bytes"] == weights and estimate["rank_weights_bytes"] == weights // 2
    assert estimate["fits"] and estimate["tp"] == 2


def test_a_rank_that_cannot_load_says_why_in_one_line(world, tmp_path):
    """Ranks report that they loaded before any work is sent: a checkpoint whose weights do not
    match its class fails in the ranks, and with more work than a pipe holds (the sequences are sent
    to every rank) the supervisor reports the rank's own line, not a broken pipe."""
    import json
    import shutil

    from conftest import make_item
    from safetensors.torch import load_file, save_file

    bad = tmp_path / "extra-weight"
    shutil.copytree(world["rm"], bad)
    state = load_file(bad / "model.safetensors")
    state["stray.weight"] = state["score.weight"].clone()
    save_file(state, bad / "model.safetensors", metadata={"format": "pt"})
    data = tmp_path / "long.json"
    data.write_text(json.dumps([make_item(i, "chat", prompt="why " * 600) for i in range(30)]))
    o = ScoreOptions(model=str(bad), data=str(data), progress=False, dtype="float32", cache=False, tp=2)
    with pytest.raises(UsageError) as e:
        score(o)
    assert "\n" not in str(e.value) and "rank" in str(e.value) and "stray.weight" in str(e.value)

"""Ray workers that each hold a tensor-parallel group (--engine ray --tp N): on CPU workers
(--gpus-per-worker 0) every worker starts N gloo ranks that load the model once and score each unit
it is given; data parallel across the workers as without --tp. The scores equal one process's
(fp32, per sample |diff| <= 1e-5, the same accuracies), for score and for sweep; a rank killed in
one worker's group takes that worker down and its unit is scored by another; the combinations that
cannot work are one line."""

import json
from dataclasses import replace

import numpy as np
import pytest

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow  # Ray workers, each starting two rank processes

from conftest import dpo_checkpoints  # noqa: E402
from rmbench_fast.engine.checks import check_options  # noqa: E402
from rmbench_fast.engine.score import ScoreOptions, score  # noqa: E402
from rmbench_fast.engine.sweep import find_checkpoints, run_sweep  # noqa: E402
from rmbench_fast.errors import UsageError  # noqa: E402


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return dpo_checkpoints(tmp_path_factory.mktemp("ray-tp"), 2)


@pytest.fixture
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=100 * 2**20)
    yield
    ray.shutdown()


def options(m, tmp_path, **kw):
    base = dict(model=m["ckpts"][0], ref_model=m["ref"], data=m["data"], progress=False, dtype="float32",
                max_tokens_per_batch=300, cache_dir=str(tmp_path / "store"), engine="ray", num_workers=2, tp=2)
    return ScoreOptions(**{**base, **kw})


def same(a, b):
    np.testing.assert_allclose(a.chosen, b.chosen, rtol=0, atol=1e-5)
    np.testing.assert_allclose(a.rejected, b.rejected, rtol=0, atol=1e-5)
    assert a.summary["domains"] == b.summary["domains"]


def test_workers_holding_groups_score_as_one_process(cluster, models, tmp_path):
    on_ray = score(options(models, tmp_path))
    one = score(options(models, tmp_path, engine="local", tp=1, cache=False))
    same(on_ray, one)
    for role in ("model", "ref_model"):
        info = on_ray.run["models"][role]
        assert info["engine"] == "ray" and info["tp_per_worker"] == 2
        assert info["tp"] == 2 and info["tp_backend"] == "gloo" and info["tp_sharded_weights"] >= 7
        assert sum(info["sequences_per_worker"].values()) == len(on_ray.samples) * 6
        assert info["logprob_head"] == "fused"  # the vocabulary-sharded head inside each worker's group


def test_sweep_with_groups(cluster, models, tmp_path):
    found = find_checkpoints(tuple(models["ckpts"]))
    o = options(models, tmp_path)
    on_ray = run_sweep(o, found, str(tmp_path / "ray"), plots=False, echo=lambda *a: None)
    local = run_sweep(replace(o, engine="local", tp=1, cache=False), found, str(tmp_path / "local"), plots=False,
                      echo=lambda *a: None)
    assert on_ray["model_passes_computed"] == 3  # the reference once, then each checkpoint
    for a, b in zip(on_ray["checkpoints"], local["checkpoints"]):
        assert a["dir"] == b["dir"] and a["overall"] == pytest.approx(b["overall"], abs=1e-9)
        run = json.loads((tmp_path / "ray" / a["dir"] / "run.json").read_text())
        assert run["models"]["model"]["tp"] == 2  # each checkpoint: a group in its Ray task


def test_a_rank_killed_in_one_worker_moves_its_unit(cluster, models, tmp_path, monkeypatch):
    marker = tmp_path / "kill-one-rank"
    marker.write_text("")
    ray.shutdown()  # the workers inherit the variable from this environment when Ray starts
    monkeypatch.setenv("RMBENCH_FAULT_KILL_RANK", f"1:1:{marker}")  # one rank 1, before its second batch
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=100 * 2**20)
    run = score(options(models, tmp_path, ref_model=None, ref_free="avg", cache=False))
    assert not marker.exists()  # it fired
    info = run.run["models"]["model"]
    assert [r["why"] for r in info["retried_units"]] == ["its worker process died"]
    same(run, score(options(models, tmp_path, ref_model=None, ref_free="avg", engine="local", tp=1, cache=False)))


@pytest.mark.parametrize("kw, says", [
    (dict(gpus_per_worker=2, tp=1), "--gpus-per-worker 2: a worker's model goes over its GPUs as a tensor-parallel "
                                    "group, one rank a GPU: pass --tp 2 too"),
    (dict(gpus_per_worker=1, tp=2), "--tp 2 with --gpus-per-worker 1"),
    (dict(gpus_per_worker=4, tp=2), "--tp 2 with --gpus-per-worker 4"),
])
def test_groups_and_gpus_that_do_not_match_are_one_line(kw, says):
    with pytest.raises(UsageError) as e:
        check_options(ScoreOptions(model="m", engine="ray", **kw))
    assert says in str(e.value) and "\n" not in str(e.value)

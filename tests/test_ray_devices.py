"""Ray workers on another device than the driver: the driver (this process, no GPU) decides device
and dtype from what a worker has, so store keys, run.json and the pass count agree with what ran.

The workers' GPU is a stand-in (models.device.STANDIN_ENV, set only in the workers' environment
through Ray's runtime_env): "cuda" named "stand-in T4", computing on their CPU in bfloat16, the
GPU default. Ray is told the cluster has GPUs (ray.init(num_gpus=...)), so --gpus-per-worker 1
schedules as on a GPU cluster."""

import json
from dataclasses import replace

import numpy as np
import pytest

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow  # Ray instances of worker processes

import torch  # noqa: E402

from conftest import dpo_checkpoints  # noqa: E402
from rmbench_fast.errors import UsageError  # noqa: E402
from rmbench_fast.models.device import STANDIN_ENV  # noqa: E402
from rmbench_fast.engine.score import ScoreOptions, score  # noqa: E402
from rmbench_fast.engine.sweep import find_checkpoints, run_sweep  # noqa: E402

@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("ray-devices")
    return dpo_checkpoints(root, 2)


@pytest.fixture
def cluster(request, monkeypatch):
    """A local Ray instance claiming `gpus` GPUs; workers get the stand-in GPU when `standin`."""
    gpus, standin = request.param
    monkeypatch.delenv(STANDIN_ENV, raising=False)  # the driver: no GPU, no stand-in
    assert not torch.cuda.is_available()
    env = {STANDIN_ENV: "T4"} if standin else {}
    ray.init(num_cpus=2, num_gpus=gpus, include_dashboard=False, log_to_driver=False,
             object_store_memory=100 * 2**20, runtime_env={"env_vars": env})
    yield
    ray.shutdown()


def options(m, tmp_path, **kw):
    base = dict(model=m["ckpts"][0], ref_model=m["ref"], data=m["data"], progress=False, max_tokens_per_batch=300,
                cache_dir=str(tmp_path / "store"), engine="ray", num_workers=2, gpus_per_worker=1)
    return ScoreOptions(**{**base, **kw})


@pytest.mark.parametrize("cluster", [(2, True)], indirect=True)
def test_keys_and_run_json_follow_the_workers(cluster, models, tmp_path, monkeypatch):
    run = score(options(models, tmp_path, output=str(tmp_path / "ray")))
    info = json.loads((tmp_path / "ray" / "run.json").read_text())
    # what ran: the workers' stand-in GPU in its default dtype, not this CPU driver's float32
    assert (info["device"], info["dtype"], info["machine"]["gpu"]) == ("cuda", "bfloat16", "stand-in T4")
    assert info["compute_device"] == "cpu"  # the stand-in computes on the workers' CPU
    assert info["logprob_impl"] == "torch"  # as it resolved on a worker (no Triton on a CPU tensor)
    assert run.run["passes_computed"] == 2
    # the same numbers as a local run on that device, and the same keys: with the stand-in in this
    # process, a local run finds both passes the workers stored...
    monkeypatch.setenv(STANDIN_ENV, "T4")
    local = score(options(models, tmp_path, engine="local"))
    assert local.run["passes_computed"] == 0
    fresh = score(options(models, tmp_path, engine="local", cache=False))
    np.testing.assert_array_equal(run.chosen, fresh.chosen)
    np.testing.assert_array_equal(run.rejected, fresh.rejected)
    # ... and without it (this CPU, float32) they are other passes
    monkeypatch.delenv(STANDIN_ENV)
    cpu = score(options(models, tmp_path, engine="local", gpus_per_worker=0))
    assert cpu.run["passes_computed"] == 2 and cpu.run["device"] == "cpu" and cpu.run["dtype"] == "float32"


@pytest.mark.parametrize("cluster", [(2, True)], indirect=True)
def test_sweep_from_a_cpu_driver_computes_the_reference_once(cluster, models, tmp_path):
    found = find_checkpoints(tuple(models["ckpts"]))
    o = replace(options(models, tmp_path), model=None)
    table = run_sweep(o, found, str(tmp_path / "sweep"), plots=False, echo=lambda *a: None)
    assert table["model_passes_computed"] == len(found) + 1  # K checkpoints and the reference once
    for row in table["checkpoints"]:
        info = json.loads((tmp_path / "sweep" / row["dir"] / "run.json").read_text())
        assert (info["device"], info["dtype"], info["machine"]["gpu"]) == ("cuda", "bfloat16", "stand-in T4")
        assert info["models"]["ref_model"]["cached"]  # the driver's reference pass, found by every task


@pytest.mark.parametrize("cluster", [(2, False)], indirect=True)
def test_a_worker_without_its_promised_gpu_fails_in_one_line(cluster, models, tmp_path):
    with pytest.raises(UsageError, match="promised a GPU") as e:
        score(options(models, tmp_path))
    assert "\n" not in str(e.value) and "CUDA_VISIBLE_DEVICES" in str(e.value)
    found = find_checkpoints(tuple(models["ckpts"]))
    with pytest.raises(UsageError, match="promised a GPU"):
        run_sweep(replace(options(models, tmp_path, ref_model=None, ref_free="avg"), model=None), found,
                  str(tmp_path / "sweep"), plots=False, echo=lambda *a: None)


@pytest.mark.parametrize("cluster", [(0, True)], indirect=True)
def test_more_gpus_than_the_cluster_offers_fails_at_once(cluster, models, tmp_path):
    with pytest.raises(UsageError, match="offers 0 GPUs"):
        score(options(models, tmp_path))
    with pytest.raises(UsageError, match="--device cuda with --engine ray"):
        score(options(models, tmp_path, gpus_per_worker=0, device="cuda"))


def failing_forward(counter: str):
    """A Ray worker setup hook: every decoder forward of every worker counted in the file `counter`
    ("calls fail_at", under a lock), and the call numbered fail_at, cluster-wide, raising an
    out-of-memory error instead."""

    def setup():
        import fcntl
        import functools

        import torch
        from transformers import LlamaModel

        real = LlamaModel.forward

        @functools.wraps(real)
        def forward(self, *args, **kwargs):
            with open(counter, "r+") as f:
                fcntl.flock(f, fcntl.LOCK_EX)
                calls, fail_at = map(int, f.read().split())
                f.seek(0)
                f.truncate()
                f.write(f"{calls + 1} {fail_at}")
            if calls == fail_at:
                raise torch.OutOfMemoryError("out of memory (injected)")
            return real(self, *args, **kwargs)

        LlamaModel.forward = forward

    return setup


def test_out_of_memory_in_ray_workers_ends_bit_identical(models, tmp_path):
    """The injection of test_faults.py inside Ray workers (prefix batches, suffix batches, the head's
    self-check, the reference pass): each run ends bit-identical, and run.json counts the one retry
    (summed over the units, not the last unit's count)."""
    counter = tmp_path / "calls"
    counter.write_text("0 -1")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=100 * 2**20,
             runtime_env={"worker_process_setup_hook": failing_forward(str(counter))})
    try:
        o = options(models, tmp_path, gpus_per_worker=0, share_prefix=True, max_tokens_per_batch=120)
        clean = score(replace(o, cache_dir=str(tmp_path / "clean")))
        assert clean.run["shared_prefix"]["prompts"] > 0
        n = int(counter.read_text().split()[0])
        assert n > 8, n
        for k in (0, n // 2, n - 1):  # the first call, one in the middle, the last (a reference batch)
            counter.write_text(f"0 {k}")
            again = score(replace(o, cache_dir=str(tmp_path / f"store-{k}")))
            info = again.run["models"]
            counts = [p.get(c, 0) for p in info.values() for c in ("out_of_memory_retries", "out_of_memory_halvings",
                                                                      "prefix_out_of_memory_halvings")]
            assert sum(counts) == 1, (k, n, info)
            assert np.array_equal(again.chosen, clean.chosen) and np.array_equal(again.rejected, clean.rejected), \
                f"out of memory at decoder call {k} of {n} changed the scores"
    finally:
        ray.shutdown()

"""--engine ray on a local Ray instance (2 CPUs): the same answers as the local engine, and a
worker killed mid-run does not lose or change anything; the work each worker did is counted, so
work done twice fails the tests, and run.json names the redone unit and the process that took it
over."""

import os
from dataclasses import replace

import numpy as np
import pytest

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow  # a Ray instance of worker processes

from conftest import dpo_checkpoints  # noqa: E402
from rmbench_fast.engine.score import ScoreOptions, score  # noqa: E402
from rmbench_fast.engine.sweep import find_checkpoints, run_sweep  # noqa: E402

@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("ray")
    fault = root / "kill-one-worker"
    os.environ["RMBENCH_FAULT_KILL_WORKER"] = str(fault)  # workers inherit it; creating the file arms it
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=100 * 2**20)
    yield {**dpo_checkpoints(root, 3), "fault": fault}
    ray.shutdown()
    os.environ.pop("RMBENCH_FAULT_KILL_WORKER", None)


def options(c, tmp_path, **kw):
    # unshared (Ray's default): a local DPO run shares prompt prefixes by default on the CPU, which Ray's
    # units compute in other batches (within 1e-6, not equal)
    base = dict(model=c["ckpts"][0], ref_model=c["ref"], data=c["data"], progress=False, max_tokens_per_batch=300,
                cache_dir=str(tmp_path / "store"), share_prefix=False)
    return ScoreOptions(**{**base, **kw})


def test_score_on_ray_equals_local(cluster, tmp_path):
    local = score(options(cluster, tmp_path, cache=False))
    on_ray = score(options(cluster, tmp_path, engine="ray", num_workers=2))
    for role in ("model", "ref_model"):
        info = on_ray.run["models"][role]
        assert info["engine"] == "ray"
        assert sum(info["sequences_per_worker"].values()) == on_ray.run["n_sequences"]  # each scored once
    np.testing.assert_array_equal(on_ray.chosen, local.chosen)
    np.testing.assert_array_equal(on_ray.rejected, local.rejected)
    assert on_ray.summary == local.summary
    # the same store keys locally and on Ray: a local run finds the passes the workers stored
    again = score(options(cluster, tmp_path))
    assert again.run["passes_computed"] == 0


def test_worker_killed_mid_run(cluster, tmp_path):
    local = score(options(cluster, tmp_path, cache=False, ref_model=None, ref_free="sum"))
    cluster["fault"].write_text("armed")
    batches = []
    on_ray = score(options(cluster, tmp_path, engine="ray", ref_model=None, ref_free="sum"),
                   hooks=lambda role, b: batches.append(tuple(b.indices)))
    assert not cluster["fault"].exists()  # the fault fired: one worker died holding a unit
    assert len(batches) == len(set(batches))  # no finished batch was reported twice
    work = on_ray.run["models"]["model"]["sequences_per_worker"]
    assert sum(work.values()) == on_ray.run["n_sequences"]  # ... nor scored twice by the workers
    dead = cluster["fault"].with_name(cluster["fault"].name + ".died").read_text()  # the killed worker's pid
    info = on_ray.run["models"]["model"]
    assert [r["why"] for r in info["retried_units"]] == ["its worker process died"]
    unit = str(info["retried_units"][0]["unit"])
    assert info["unit_workers"][unit] != dead and dead not in work  # another process took it over
    assert set(info["unit_workers"].values()) == set(work)
    np.testing.assert_array_equal(on_ray.chosen, local.chosen)
    np.testing.assert_array_equal(on_ray.rejected, local.rejected)


def test_sweep_on_ray_equals_local(cluster, tmp_path):
    found = find_checkpoints(tuple(cluster["ckpts"]))
    o = replace(options(cluster, tmp_path), model=None)
    local = run_sweep(replace(o, cache_dir=str(tmp_path / "a")), found, str(tmp_path / "local"), plots=False,
                      echo=lambda *a: None)
    on_ray = run_sweep(replace(o, cache_dir=str(tmp_path / "b"), engine="ray"), found, str(tmp_path / "ray"),
                       plots=False, echo=lambda *a: None)
    assert on_ray["checkpoints"] == local["checkpoints"]
    for r in local["checkpoints"]:
        assert (tmp_path / "local" / r["dir"] / "results.json").read_bytes() == \
            (tmp_path / "ray" / r["dir"] / "results.json").read_bytes()


def test_judge_logit_verdicts_on_ray_equal_local(cluster, tmp_path):
    """judge --verdict logits through the engine on Ray workers: the same cells and probabilities as in
    this process."""
    import json

    from rmbench_fast.judges.options import JudgeOptions
    from rmbench_fast.judges.run import judge
    from rmbench_fast.tiny.models import CHAT_TEMPLATE, build_model, llama_config, save_model, train_tokenizer

    tok = train_tokenizer([json.dumps(x) for x in json.loads(open(cluster["data"]).read())] + ["\\boxed{A>B}"],
                          vocab_size=300, chat_template=CHAT_TEMPLATE)
    path = save_model(build_model("lm", llama_config(vocab_size=len(tok), hidden=32, layers=1, heads=4), 5), tok,
                      tmp_path / "judge")
    base = dict(model=str(path), data=cluster["data"], domains=("chat",), verdict="logits", progress=False,
                max_tokens_per_batch=2048)
    local = judge(JudgeOptions(**base, output=str(tmp_path / "a"), cache=False))
    on_ray = judge(JudgeOptions(**base, output=str(tmp_path / "b"), cache_dir=str(tmp_path / "store"), engine="ray",
                                num_workers=2))
    assert on_ray.run["pass"]["engine"] == "ray" and np.array_equal(local.cells, on_ray.cells)
    p = [[json.loads(x)["p_chosen"] for x in (tmp_path / d / "judgements.jsonl").read_text().splitlines()]
         for d in ("a", "b")]
    assert np.allclose(p[0], p[1], atol=1e-6)


def pairs_data(cluster, tmp_path):
    """The cluster's items as pairs rows (one chosen against one rejected each), in a JSONL file."""
    import json

    items = json.loads(open(cluster["data"]).read())
    rows = [{"id": n, "prompt": it["prompt"], "chosen": it["chosen"][0], "rejected": it["rejected"][n % 3],
             "subset": it["domain"] if "domain" in it else "all"} for n, it in enumerate(items)]
    data = tmp_path / "pairs.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return data


def test_a_benchmark_on_ray_equals_local(cluster, tmp_path):
    """Another benchmark's rows (pairs: 1 chosen against 1-3 rejected) through the workers: the same
    scores and numbers as in this process."""
    data = pairs_data(cluster, tmp_path)
    base = options(cluster, tmp_path, data=str(data), benchmark="pairs", bootstrap=0)
    local = score(replace(base, cache=False, output=str(tmp_path / "a")))
    on_ray = score(replace(base, engine="ray", num_workers=2, output=str(tmp_path / "b")))
    assert all(info["engine"] == "ray" for info in on_ray.run["models"].values())
    np.testing.assert_array_equal(np.concatenate(on_ray.chosen), np.concatenate(local.chosen))
    np.testing.assert_array_equal(np.concatenate(on_ray.rejected), np.concatenate(local.rejected))
    assert on_ray.summary["score"] == local.summary["score"] and on_ray.summary["subsets"] == local.summary["subsets"]


def test_a_benchmark_sweep_on_ray_equals_local(cluster, tmp_path):
    """sweep --benchmark pairs --engine ray: the same rows (scores, subsets, paired differences from the
    baseline) and the same per-row results as the local sweep; the reference's pass is computed once."""
    import json

    found = find_checkpoints(tuple(cluster["ckpts"]))
    o = replace(options(cluster, tmp_path, data=str(pairs_data(cluster, tmp_path)), benchmark="pairs",
                        bootstrap=200), model=None)
    local = run_sweep(replace(o, cache_dir=str(tmp_path / "a")), found, str(tmp_path / "local"), plots=False,
                      echo=lambda *a: None)
    on_ray = run_sweep(replace(o, cache_dir=str(tmp_path / "b"), engine="ray", num_workers=2), found,
                       str(tmp_path / "ray"), plots=False, echo=lambda *a: None)
    strip = [{k: v for k, v in r.items() if k != "path"} for r in local["checkpoints"]]
    assert [{k: v for k, v in r.items() if k != "path"} for r in on_ray["checkpoints"]] == strip
    assert len(strip) == len(found) >= 2 and all("score" in r for r in strip)
    assert any(r.get("vs_baseline") for r in strip)  # the paired comparison was made, the same on both
    # the reference's pass once for every checkpoint, and every pass computed once
    assert on_ray["reference_passes"] == 1 and on_ray["model_passes"] == len(found) + 1
    assert on_ray["model_passes_computed"] == on_ray["model_passes"]
    for r in local["checkpoints"]:
        a = [json.loads(x) for x in (tmp_path / "local" / r["dir"] / "results.jsonl").read_text().splitlines()]
        b = [json.loads(x) for x in (tmp_path / "ray" / r["dir"] / "results.jsonl").read_text().splitlines()]
        assert a == b

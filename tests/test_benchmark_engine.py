"""The engine's general options on other benchmarks than RM-Bench: --share-prefix computes each row's
shared prompt once (rows hold 2 or more responses, not RM-Bench's 6) and changes no score beyond the
float tolerance of a cached prefix; the prefix planner's variable groups equal a plain per-row loop."""

import json

import numpy as np
import pytest

from rmbench_fast.engine.score import ScoreOptions, score
from rmbench_fast.inputs.data import load_dataset
from rmbench_fast.inputs.prefix import plan_prefixes


@pytest.fixture(scope="module")
def texts(data_path):
    return load_dataset(data_path, limit=2)


def naive_common_prefix(group, cap, min_prefix):
    k = 0
    while k < cap and all(len(s) > k and s[k] == group[0][k] for s in group):
        k += 1
    return k if k >= min_prefix and len(group) > 1 else 0


def test_variable_groups_take_each_groups_own_common_prefix():
    rng = np.random.default_rng(0)
    sizes = [2, 5, 1, 3, 4]
    seqs, limits, want = [], [], []
    for size in sizes:
        head = list(rng.integers(0, 50, rng.integers(0, 14)))
        group = [head + list(rng.integers(0, 50, rng.integers(1, 6))) for _ in range(size)]
        cap = [int(rng.integers(3, 20)) for _ in group]
        seqs += group
        limits += cap
        want += [naive_common_prefix(group, min(cap), 4)] * size
    plan = plan_prefixes(seqs, np.array(limits), kv_bytes_per_token=1, budget_bytes=10**9, group_size=sizes,
                         min_prefix=4)
    assert plan.prefix.tolist() == want
    assert plan.group.tolist() == [g for g, n in enumerate(sizes) for _ in range(n)]
    with pytest.raises(ValueError, match="cover 15 sequences, not 16"):
        plan_prefixes(seqs + [[1]], np.array(limits + [1]), 1, 10**9, group_size=sizes)


def pairs_rows(samples):
    """Rows of 2 to 4 responses each (every chosen against every rejected)."""
    rows = []
    for n, s in enumerate(samples):
        k = 1 + n % 3
        rows.append({"id": n, "prompt": s.prompt, "chosen": list(s.chosen[:1 + (n % 2)]),
                     "rejected": list(s.rejected[:k]), "subset": s.domain})
    return rows


@pytest.mark.parametrize("mode", ["rm", "dpo"])
def test_share_prefix_on_pairs_scores_as_unshared(models, texts, tmp_path, mode):
    data = tmp_path / "pairs.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in pairs_rows(texts)) + "\n")
    m = models["llama"]  # no doubled BOS: the tmpl template starts with one, and such rows share nothing
    kw = dict(model=m["rm"]) if mode == "rm" else dict(model=m["policy"], ref_model=m["ref"])
    runs = {}
    for share in (False, True):
        runs[share] = score(ScoreOptions(**kw, data=str(data), benchmark="pairs", progress=False, bootstrap=0,
                                         share_prefix=share, cache=False, output=str(tmp_path / f"{mode}-{share}")))
    shared = runs[True].run["shared_prefix"]
    assert shared["prompts"] == len(texts) and shared["tokens_saved"] > 0
    assert runs[False].run["shared_prefix"]["tokens_saved"] == 0
    assert runs[True].run["passes_computed"] == runs[True].run["passes"] >= 1  # computed, not read back
    assert all(p["prefix_sharing"] == "on" for p in runs[True].run["models"].values())  # not turned off
    for side in ("chosen", "rejected"):
        a, b = getattr(runs[False], side), getattr(runs[True], side)
        np.testing.assert_allclose(np.concatenate(a), np.concatenate(b), atol=2e-4, rtol=0)


@pytest.mark.slow  # two gloo ranks, each a process importing torch and transformers
@pytest.mark.parametrize("mode", ["rm", "dpo"])
def test_tp_on_pairs_scores_as_one_process(models, texts, tmp_path, mode):
    data = tmp_path / "pairs.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in pairs_rows(texts)) + "\n")
    m = models["llama"]
    kw = dict(model=m["rm"]) if mode == "rm" else dict(model=m["policy"], ref_model=m["ref"])
    one, two = (score(ScoreOptions(**kw, data=str(data), benchmark="pairs", progress=False, bootstrap=0, cache=False,
                                   tp=tp, dtype="float32", output=str(tmp_path / f"tp{tp}"))) for tp in (1, 2))
    assert all(info["tp"] == 2 for info in two.run["models"].values())
    for side in ("chosen", "rejected"):
        # a DPO score sums up to ~1900 token log-probs: the split reductions move it by ~1e-5
        np.testing.assert_allclose(np.concatenate(getattr(two, side)), np.concatenate(getattr(one, side)),
                                   atol=1e-5 if mode == "rm" else 1e-4, rtol=0)
    assert two.summary["subsets"] == one.summary["subsets"] and two.summary["score"] == one.summary["score"]


def test_reward_bench_without_a_known_subset_has_a_score_interval():
    """Its score is the pooled accuracy over every row (rewardbench's overall): so is every resample's."""
    from rmbench_fast.engine.benchmark_intervals import intervals
    from rmbench_fast.tasks import get
    from rmbench_fast.tasks.base import Row

    bench = get("reward-bench")
    rows = [Row(n, "x" if n % 3 else "y", "p", ("a",), ("b",), "t", n, {}) for n in range(30)]
    scores = [[1.0, 0.0] if n % 4 else [0.0, 1.0] for n in range(30)]
    summary = bench.aggregate(rows, scores)
    assert summary["score"] == sum(1 for n in range(30) if n % 4) / 30
    got = intervals("reward-bench", bench, rows, scores, summary, 400)
    low, high = got["score"]
    assert low < summary["score"] < high and high - low < 0.5


def test_domains_keep_the_named_subsets(models, texts, tmp_path):
    from rmbench_fast.errors import UsageError

    data = tmp_path / "pairs.jsonl"
    rows = pairs_rows(texts)
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    o = dict(model=models["llama"]["rm"], data=str(data), benchmark="pairs", progress=False, bootstrap=0)
    run = score(ScoreOptions(**o, domains=("chat,code",), output=str(tmp_path / "o")))
    assert set(run.summary["subsets"]) == {"chat", "code"}
    assert run.summary["n_rows"] == sum(r["subset"] in ("chat", "code") for r in rows)
    with pytest.raises(UsageError, match="--domains nope: no such subset .*its subsets: chat"):
        score(ScoreOptions(**o, domains=("nope",)))


def test_a_known_hub_id_is_fetched_and_scored(models, texts, tmp_path, monkeypatch):
    """allenai/reward-bench-2 as --data: its test split read from the (injected) snapshot; no network."""
    from rmbench_fast.tasks import hub

    rows = [{"id": str(n), "prompt": s.prompt, "chosen": [s.chosen[0]], "rejected": list(s.rejected[:2]),
             "num_correct": 1, "num_incorrect": 2, "total_completions": 3, "models": ["m"] * 3, "subset": "Focus"}
            for n, s in enumerate(texts[:3])]
    (tmp_path / "snap" / "data").mkdir(parents=True)
    (tmp_path / "snap" / "data" / "test-00000-of-00001.parquet").write_text(json.dumps(rows))
    monkeypatch.setattr(hub, "read_items", lambda path: [  # its rows as JSON: pyarrow is no dependency
        hub.Item(str(path), i, None, v) for i, v in enumerate(json.loads(path.read_text()))])
    asked = []
    monkeypatch.setattr(hub, "_download", lambda repo, patterns: asked.append((repo, patterns)) or tmp_path / "snap")
    monkeypatch.chdir(tmp_path)
    hub_run = score(ScoreOptions(model=models["llama"]["rm"], data="allenai/reward-bench-2", progress=False, bootstrap=0,
                                 output=str(tmp_path / "hub")))
    local = tmp_path / "rb2.json"
    local.write_text(json.dumps(rows))
    file_run = score(ScoreOptions(model=models["llama"]["rm"], data=str(local), progress=False, bootstrap=0,
                                  output=str(tmp_path / "file")))
    assert asked == [("allenai/reward-bench-2", ["data/test-*.parquet"])]
    assert hub_run.summary["benchmark"] == "reward-bench-2" and hub_run.summary["score"] == file_run.summary["score"]


def test_plot_draws_a_benchmark_runs_numbers_and_its_report(models, texts, tmp_path):
    from click.testing import CliRunner

    from rmbench_fast.cli.main import main

    data = tmp_path / "pairs.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in pairs_rows(texts)) + "\n")
    out = tmp_path / "run"
    run = score(ScoreOptions(model=models["llama"]["rm"], data=str(data), benchmark="pairs", progress=False,
                             bootstrap=200, output=str(out)))
    got = CliRunner().invoke(main, ["plot", str(out)])
    assert got.exit_code == 0, got.output
    assert (out / "scores.png").stat().st_size > 1000 and not (out / "matrices.png").exists()
    report = (out / "report.md").read_text()
    low, high = run.summary["intervals"]["score"]
    assert f"| score | {100 * run.summary['score']:.2f} | {100 * low:.2f} - {100 * high:.2f} |" in report
    for name, value in run.summary["subsets"].items():
        assert f"| {name} | {100 * value:.2f} |" in report


def test_accuracy_and_leaderboard_take_benchmark(models, texts, tmp_path):
    """accuracy --benchmark applies the named rules to a results.jsonl with nothing beside it;
    leaderboard --benchmark refuses a run of another benchmark, naming it."""
    import shutil

    from click.testing import CliRunner

    from rmbench_fast.cli.main import main

    data = tmp_path / "pairs.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in pairs_rows(texts)) + "\n")
    out = tmp_path / "run"
    run = score(ScoreOptions(model=models["llama"]["rm"], data=str(data), benchmark="pairs", progress=False,
                             bootstrap=0, output=str(out)))
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(out / "results.jsonl", alone / "results.jsonl")
    cli = CliRunner()
    refused = cli.invoke(main, ["accuracy", str(alone / "results.jsonl")])
    assert refused.exit_code != 0 and "give --benchmark NAME" in refused.output
    got = cli.invoke(main, ["accuracy", str(alone / "results.jsonl"), "--benchmark", "pairs", "--bootstrap", "0"])
    assert got.exit_code == 0, got.output
    assert got.output.splitlines()[-1].split() == ["score", f"{100 * run.summary['score']:.2f}"]
    assert cli.invoke(main, ["leaderboard", str(out), "--benchmark", "pairs"]).exit_code == 0
    wrong = cli.invoke(main, ["leaderboard", str(out), "--benchmark", "reward-bench"])
    assert wrong.exit_code != 0 and "is a run of pairs" in wrong.output

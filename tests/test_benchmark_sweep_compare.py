"""`sweep --benchmark` and `compare` on another benchmark's runs (engine.benchmark_sweep,
engine.benchmark_compare, engine.benchmark_paired): the numbers against RewardBench's formulas
written plainly here and the tasks' own aggregate, the paired bootstrap against a plain loop over
the same draws, identical runs collapsing to 0, rows in one run only counted, and the refusals."""

import json
import shutil

import numpy as np
import pytest
from click.testing import CliRunner
from transformers import AutoModelForSequenceClassification

from rmbench_fast.cli.main import main
from rmbench_fast.engine.benchmark_compare import compare_bench_runs, load_bench_run
from rmbench_fast.engine.sweep import find_checkpoints, run_sweep
from rmbench_fast.engine.score import ScoreOptions
from rmbench_fast.inputs.data import load_dataset
from rmbench_fast.tasks import get

# rewardbench 0.1.4's constants for the subsets used here (EXAMPLE_COUNTS, SUBSET_MAPPING)
V1 = {"alpacaeval-easy": ("Chat", 100), "mt-bench-med": ("Chat", 40), "mt-bench-hard": ("Chat Hard", 37),
      "xstest-should-refuse": ("Safety", 154), "hep-python": ("Reasoning", 164), "math-prm": ("Reasoning", 984)}
SIZES = {"alpacaeval-easy": 12, "mt-bench-med": 7, "mt-bench-hard": 9, "xstest-should-refuse": 10, "hep-python": 8,
         "math-prm": 15}


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def v1_numbers(right: dict) -> dict:
    """RewardBench v1's numbers from each subset's 0/1 results, written out plainly."""
    subsets = {k: sum(v) / len(v) for k, v in right.items()}
    sections = {}
    for name in ("Chat", "Chat Hard", "Safety", "Reasoning"):
        part = [(subsets[k], w) for k, (sec, w) in V1.items() if sec == name and k in subsets]
        if part:
            sections[name] = sum(a * w for a, w in part) / sum(w for _, w in part)
    return {"subsets": subsets, "sections": sections, "score": sum(sections.values()) / len(sections)}


def v1_lines(seed, shift=0.0):
    rng = np.random.default_rng(seed)
    return [{"id": i, "subset": s, "chosen_scores": [float(rng.normal(shift, 1))],
             "rejected_scores": [float(rng.normal(0, 1))]} for s, n in SIZES.items() for i in range(n)]


def bench_folder(path, lines, benchmark="reward-bench", **summary):
    path.mkdir(parents=True)
    for x in lines:
        x.setdefault("result", None)
    (path / "results.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (path / "summary.json").write_text(json.dumps({"benchmark": benchmark, **summary}))
    return path


def right_of(lines):
    out = {}
    for x in lines:
        out.setdefault(x["subset"], []).append(1.0 if x["chosen_scores"][0] > x["rejected_scores"][0] else 0.0)
    return out


def test_compare_two_reward_bench_runs_equals_the_formulas_and_a_plain_paired_bootstrap(tmp_path):
    a_lines, b_lines = v1_lines(0), v1_lines(1, shift=0.8)
    a, b = bench_folder(tmp_path / "a", a_lines), bench_folder(tmp_path / "b", b_lines)
    got = cli("compare", a, b, "--bootstrap", 500, "--json", "-")
    assert got.exit_code == 0, got.output
    result = json.loads(got.output)
    want_a, want_b = v1_numbers(right_of(a_lines)), v1_numbers(right_of(b_lines))
    assert result["benchmark"] == "reward-bench" and result["rows"]["common"] == sum(SIZES.values())
    assert result["runs"][str(a)]["score"]["value"] == pytest.approx(want_a["score"])
    pair = result["pairs"][0]
    assert pair["score"]["diff"] == pytest.approx(want_b["score"] - want_a["score"])
    for k in want_a["sections"]:
        assert pair["sections"][k]["diff"] == pytest.approx(want_b["sections"][k] - want_a["sections"][k])
    for k in SIZES:
        assert pair["subsets"][k]["diff"] == pytest.approx(want_b["subsets"][k] - want_a["subsets"][k])
    # a plain paired bootstrap: the same rows drawn for both runs within each subset (draw order:
    # default_rng(0), subsets in the rows' order, rng.integers(0, n, (resamples, n)))
    rng, ra, rb = np.random.default_rng(0), right_of(a_lines), right_of(b_lines)
    draws = {k: rng.integers(0, len(ra[k]), size=(500, len(ra[k]))) for k in SIZES}
    diffs = []
    for i in range(500):
        na = v1_numbers({k: [ra[k][j] for j in draws[k][i]] for k in SIZES})
        nb = v1_numbers({k: [rb[k][j] for j in draws[k][i]] for k in SIZES})
        diffs.append(nb["score"] - na["score"])
    low, high = np.quantile(diffs, [0.025, 0.975])
    assert [pair["score"]["low"], pair["score"]["high"]] == pytest.approx([low, high], abs=1e-12)
    assert pair["score"]["significant"] == bool(low > 0 or high < 0)
    text = cli("compare", a, b, "--bootstrap", 200)
    assert text.exit_code == 0 and "section Chat Hard" in text.output and "subset math-prm" in text.output


def test_identical_runs_collapse_to_the_point_and_extra_rows_are_counted(tmp_path):
    lines = v1_lines(3)
    a = bench_folder(tmp_path / "a", json.loads(json.dumps(lines)))
    extra = json.loads(json.dumps(lines[1:])) + [{"id": 99, "subset": "math-prm", "chosen_scores": [1.0],
                                                   "rejected_scores": [0.0]}]
    b = bench_folder(tmp_path / "b", extra)
    result = compare_bench_runs([load_bench_run(a), load_bench_run(b)], resamples=300)
    pair = result["pairs"][0]
    for v in [pair["score"], *pair["sections"].values(), *pair["subsets"].values()]:
        assert v["diff"] == 0.0 and v["low"] == 0.0 and v["high"] == 0.0 and v["p"] == 1.0 and not v["significant"]
    assert pair["disagreements"] == []
    rows = result["rows"]
    assert rows["common"] == len(lines) - 1 and rows["left_out"] == {str(a): 1, str(b): 1}
    assert rows["only_in"] == {str(a): [f"{lines[0]['subset']}/{lines[0]['id']}"], str(b): ["math-prm/99"]}
    common = v1_numbers(right_of(lines[1:]))  # each run's numbers on the common rows only
    assert result["runs"][str(b)]["score"]["value"] == pytest.approx(common["score"])
    text = cli("compare", a, b, "--bootstrap", 0)
    assert text.exit_code == 0 and "1 row(s) not in every run left out: math-prm/99" in text.output


def test_reward_bench_2_with_ties_and_pairs_differences_equal_the_tasks_aggregate(tmp_path):
    rng = np.random.default_rng(5)

    def rb2(seed):
        r = np.random.default_rng(seed)
        out = [{"id": f"{s}{i}", "subset": s, "chosen_scores": [float(r.normal())],
                "rejected_scores": r.normal(size=3).tolist()} for s in ("Math", "Focus") for i in range(8)]
        out += [{"id": f"{kind}:{i}", "subset": "Ties", "chosen_scores": r.normal(1, 1, 2).tolist(),
                 "rejected_scores": r.normal(0, 1, 2).tolist()} for kind in ("ref", "tied") for i in range(4)]
        return out

    a = bench_folder(tmp_path / "a", rb2(1), "reward-bench-2")
    b = bench_folder(tmp_path / "b", rb2(2), "reward-bench-2")
    runs = [load_bench_run(a), load_bench_run(b)]
    result = compare_bench_runs(runs, resamples=200)
    bench = get("reward-bench-2")
    agg = [bench.aggregate(r.rows, r.scores) for r in runs]
    pair = result["pairs"][0]
    assert pair["score"]["diff"] == pytest.approx(agg[1]["score"] - agg[0]["score"])
    assert pair["held"] == ["Ties"]  # scored from all its rows: held at its difference
    ties = agg[1]["subsets"]["Ties"] - agg[0]["subsets"]["Ties"]
    assert pair["subsets"]["Ties"]["low"] == pytest.approx(ties) == pair["subsets"]["Ties"]["high"]
    # pairs: every chosen against every rejected, pooled
    lines = [{"id": i, "subset": "math" if i % 2 else "code", "chosen_scores": rng.normal(size=2).tolist(),
              "rejected_scores": [0.0]} for i in range(20)]
    c = bench_folder(tmp_path / "c", lines, "pairs", tie_credit=0.0)
    d_lines = json.loads(json.dumps(lines))
    for x in d_lines[:7]:
        x["chosen_scores"] = [5.0, 5.0]
    d = bench_folder(tmp_path / "d", d_lines, "pairs", tie_credit=0.0)
    pair = compare_bench_runs([load_bench_run(c), load_bench_run(d)], resamples=200)["pairs"][0]

    def pooled(ls):
        every = [float(s > x["rejected_scores"][0]) for x in ls for s in x["chosen_scores"]]
        return sum(every) / len(every)

    assert pair["score"]["diff"] == pytest.approx(pooled(d_lines) - pooled(lines)) and pair["score"]["diff"] > 0
    e = bench_folder(tmp_path / "e", json.loads(json.dumps(lines)), "pairs", tie_credit=0.5)
    got = cli("compare", c, e)
    assert got.exit_code == 2 and "--tie-credit" in got.output


def test_refusals_name_the_runs(tmp_path):
    a = bench_folder(tmp_path / "a", v1_lines(0))
    b = bench_folder(tmp_path / "b", v1_lines(1), "pairs")
    got = cli("compare", a, b)
    assert got.exit_code == 2 and "different benchmarks" in got.output and "a pairs run" in got.output
    rm = tmp_path / "rm"
    rm.mkdir()
    items = [{"id": 0, "domain": "chat", "prompt": "q", "score_chosen": [1, 2, 3], "score_rejected": [0, 0, 0]}]
    (rm / "results.json").write_text(json.dumps(items))
    (rm / "summary.json").write_text(json.dumps({"overall": 1.0, "domains": {}}))
    got = cli("compare", rm, a)
    assert got.exit_code == 2 and "an RM-Bench run" in got.output and "a reward-bench run" in got.output
    got = cli("compare", a, bench_folder(tmp_path / "a2", v1_lines(2)), "--benchmark", "reward-bench-2")
    assert got.exit_code == 2 and "--benchmark reward-bench-2" in got.output and "reward-bench runs" in got.output
    lost = tmp_path / "lost"
    lost.mkdir()
    (lost / "summary.json").write_text(json.dumps({"benchmark": "pairs"}))
    got = cli("compare", a, lost)
    assert got.exit_code == 2 and "results.jsonl" in got.output


def test_a_checkpoint_on_other_rows_is_refused(tmp_path):
    from rmbench_fast.engine.versus import BenchmarkComparisons
    from rmbench_fast.errors import DataError
    from rmbench_fast.tasks.base import Row

    rows = [Row(i, "math-prm", "", ("",), ("",), "x", i, {}) for i in range(3)]
    versus = BenchmarkComparisons("reward-bench", get("reward-bench"), 0, "checkpoint-1", 0)
    versus.add(0, rows, [[1.0, 0.0]] * 3, tmp_path / "checkpoint-1")
    versus.add(1, rows, [[0.0, 1.0]] * 3, tmp_path / "checkpoint-2")
    table = {0: {}, 1: {}}
    versus.fill(table)
    assert table[0]["vs_baseline"] is None and table[1]["vs_baseline"]["score"]["diff"] == pytest.approx(-1.0)
    with pytest.raises(DataError, match="math-prm/9 only in checkpoint-3"):
        versus.add(2, rows[:2] + [Row(9, "math-prm", "", ("",), ("",), "x", 2, {})], [[1.0, 0.0]] * 3,
                   tmp_path / "checkpoint-3")


@pytest.fixture(scope="module")
def checkpoints(models, tmp_path_factory):
    """Three checkpoints of one reward model: step 1 as built, step 2 with its head negated (every
    score negated), step 3 a copy of step 1."""
    root = tmp_path_factory.mktemp("ckpts")
    rm = models["tmpl"]["rm"]
    for step in (1, 3):
        shutil.copytree(rm, root / f"checkpoint-{step}")
    model = AutoModelForSequenceClassification.from_pretrained(rm)
    model.score.weight.data.neg_()
    shutil.copytree(rm, root / "checkpoint-2")
    model.save_pretrained(root / "checkpoint-2")
    return root


@pytest.mark.slow  # three checkpoints scored in process: about 28 s on 2 loaded cores
def test_sweep_scores_each_checkpoint_as_a_benchmark_run(checkpoints, data_path, tmp_path):
    texts = load_dataset(data_path, limit=2)
    rows = [{"prompt": s.prompt, "chosen": s.chosen[n % 3], "rejected": s.rejected[n % 3],
             "subset": list(V1)[n % len(V1)], "id": n, "chosen_model": "a", "rejected_model": "b"}
            for n, s in enumerate(texts)]
    data = tmp_path / "rb.json"
    data.write_text(json.dumps(rows))
    said = []
    o = ScoreOptions(model=None, data=str(data), progress=False, bootstrap=300)
    out = tmp_path / "sweep"
    result = run_sweep(o, find_checkpoints(pattern=str(checkpoints / "checkpoint-*")), str(out), echo=said.append)
    assert result["benchmark"] == "reward-bench" and any("never read back" in x for x in said)
    table = json.loads((out / "sweep.json").read_text())
    assert table["benchmark"] == "reward-bench" and [r["step"] for r in table["checkpoints"]] == [1, 2, 3]
    scores = []
    for r in table["checkpoints"]:
        lines = [json.loads(x) for x in (out / r["dir"] / "results.jsonl").read_text().splitlines()]
        want = v1_numbers(right_of(lines))
        assert r["score"] == pytest.approx(want["score"])
        assert {k: r[f"section:{k}"] for k in want["sections"]} == pytest.approx(want["sections"])
        assert {k: r[f"subset:{k}"] for k in want["subsets"]} == pytest.approx(want["subsets"])
        scores.append([x["chosen_scores"][0] for x in lines])
    np.testing.assert_allclose(scores[1], -np.array(scores[0]), atol=1e-5)  # the negated head
    first, second, third = table["checkpoints"]
    assert first["vs_baseline"] is None
    assert second["vs_baseline"]["score"]["diff"] == pytest.approx(second["score"] - first["score"])
    same = third["vs_baseline"]["score"]
    assert same["diff"] == same["low"] == same["high"] == 0.0 and same["p"] == 1.0
    # the pictures and report: sweep.png, report.md with each checkpoint's score, each checkpoint's own
    assert (out / "sweep.png").stat().st_size > 1000
    report = (out / "report.md").read_text()
    assert all(f"| {100 * r['score']:.2f} |" in report for r in table["checkpoints"])
    assert f"{100 * second['vs_baseline']['score']['diff']:+.2f}" in report
    assert all((out / r["dir"] / "scores.png").is_file() and (out / r["dir"] / "report.md").is_file()
               for r in table["checkpoints"])
    csv_head = (out / "sweep.csv").read_text().splitlines()[0].split(",")
    assert {"score", "score_diff", "score_low", "score_high", "score_p", "score_significant"} <= set(csv_head)
    # compare on the sweep folder: the same paired comparison
    got = cli("compare", out, "--bootstrap", 300, "--json", "-")
    assert got.exit_code == 0, got.output
    pair = json.loads(got.output)["pairs"][0]
    assert pair["score"] == pytest.approx(second["vs_baseline"]["score"])

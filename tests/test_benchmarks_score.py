"""`score --benchmark` on RewardBench v1, RewardBench 2 and users' own pairs (engine.benchmarks): each
response's score equals a plain forward of its official text (tests/reference.py), and the numbers
equal the benchmark's formulas written out here; detection, the one stderr line, and what is
refused for now. RM-Bench's own runs are untouched (test_engine, benchmarks/identity.py)."""

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from reference import official_dpo_logps, official_dpo_row, official_pad_ids, render
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

from rmbench_fast.cli.main import main
from rmbench_fast.engine.score import ScoreOptions, score
from rmbench_fast.errors import UsageError
from rmbench_fast.inputs.data import load_dataset

# rewardbench 0.1.4's constants for the subsets used here (EXAMPLE_COUNTS, SUBSET_MAPPING)
V1 = {"alpacaeval-easy": ("Chat", 100), "mt-bench-med": ("Chat", 40), "mt-bench-hard": ("Chat Hard", 37),
      "xstest-should-refuse": ("Safety", 154), "hep-python": ("Reasoning", 164), "math-prm": ("Reasoning", 984)}


@pytest.fixture(scope="module")
def texts(data_path):
    return load_dataset(data_path, limit=2)


def v1_rows(samples):
    rows, names = [], list(V1)
    for n, s in enumerate(samples):
        rejected = s.chosen[0] if n == 3 else s.rejected[n % 3]  # row 3: a tie (the same text), which is wrong
        rows.append({"prompt": s.prompt, "chosen": s.chosen[n % 3], "rejected": rejected,
                     "subset": names[n % len(names)], "id": n, "chosen_model": "a", "rejected_model": "b"})
    return rows


def rm_scores(model_dir, prompt_responses):
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir).eval()
    _, model.config.pad_token_id = official_pad_ids(tok, model.config)  # run_rm.py's setup: where it pools
    out = []
    for prompt, response in prompt_responses:
        ids = tok(render(tok, prompt, response))["input_ids"]
        mask = [1] * len(ids)
        if tok.bos_token is not None and len(ids) > 1 and ids[0] == ids[1] == tok.bos_token_id:
            mask[0] = 0  # RewardBenchPipeline's doubled-BOS rule
        with torch.no_grad():
            out.append(model(input_ids=torch.tensor([ids]), attention_mask=torch.tensor([mask])).logits[0, 0].item())
    return np.array(out)


def v1_expected(rows, chosen, rejected):
    right = {}
    for r, c, j in zip(rows, chosen, rejected):
        right.setdefault(r["subset"], []).append(1.0 if c > j else 0.0)
    subsets = {k: sum(v) / len(v) for k, v in right.items()}
    sections = {}
    for name in ("Chat", "Chat Hard", "Safety", "Reasoning"):
        part = [(subsets[k], w) for k, (sec, w) in V1.items() if sec == name and k in subsets]
        if part:
            sections[name] = sum(a * w for a, w in part) / sum(w for _, w in part)
    return subsets, sections, sum(sections.values()) / len(sections)


def test_reward_bench_rm_equals_plain_forwards_and_its_formulas(models, texts, tmp_path, caplog):
    rows = v1_rows(texts)
    data = tmp_path / "rb.json"
    data.write_text(json.dumps(rows))
    rm = models["tmpl"]["rm"]
    run = score(ScoreOptions(model=rm, data=str(data), progress=False, output=str(tmp_path / "out"), bootstrap=0))
    assert "scored as reward-bench" in caplog.text  # detected from the rows, and said
    chosen = rm_scores(rm, [(r["prompt"], r["chosen"]) for r in rows])
    rejected = rm_scores(rm, [(r["prompt"], r["rejected"]) for r in rows])
    np.testing.assert_allclose([c[0] for c in run.chosen], chosen, atol=1e-4, rtol=0)
    np.testing.assert_allclose([r[0] for r in run.rejected], rejected, atol=1e-4, rtol=0)
    assert run.chosen[3] == run.rejected[3]  # the planted tie
    subsets, sections, total = v1_expected(rows, [c[0] for c in run.chosen], [r[0] for r in run.rejected])
    s = run.summary
    assert s["benchmark"] == "reward-bench" and s["n_rows"] == len(rows)
    assert s["subsets"] == pytest.approx(subsets) and s["sections"] == pytest.approx(sections)
    assert s["score"] == pytest.approx(total)
    written = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert written["score"] == pytest.approx(total)
    lines = [json.loads(x) for x in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert [x["result"] for x in lines] == [float(c[0] > r[0]) for c, r in zip(run.chosen, run.rejected)]
    assert json.loads((tmp_path / "out" / "run.json").read_text())["benchmark"] == "reward-bench"


def test_pairs_dpo_with_a_reference_equals_dpo_inference(models, texts, tmp_path):
    m = models["tmpl"]
    rows = [{"prompt": s.prompt, "chosen": [s.chosen[0], s.chosen[1]], "rejected": [s.rejected[2]],
             "subset": s.domain} for s in texts[:6]]
    data = tmp_path / "pairs.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    run = score(ScoreOptions(model=m["policy"], ref_model=m["ref"], data=str(data), benchmark="pairs",
                             progress=False, bootstrap=0))
    tok = AutoTokenizer.from_pretrained(m["policy"])
    policy, ref = (AutoModelForCausalLM.from_pretrained(d).eval() for d in (m["policy"], m["ref"]))
    right, counted = {}, 0
    for r, ours_c, ours_r in zip(rows, run.chosen, run.rejected):
        p = render(tok, r["prompt"])
        seqs = [official_dpo_row(tok, p, render(tok, r["prompt"], c), render(tok, r["prompt"], r["rejected"][0]),
                                 False) for c in r["chosen"]]
        flat = [s[0] for s in seqs] + [seqs[0][1]]
        (pol, count, _), ref_sums = (official_dpo_logps(x, flat, tok.eos_token_id) for x in (policy, ref))
        reward = pol - ref_sums[0]
        # two fp32 sums over the response tokens, each summed in another order: 1e-5 a token each (test_engine's)
        assert np.all(np.abs(np.array(list(ours_c) + list(ours_r)) - reward) <= 2e-5 * count + 1e-6)
        for c in ours_c:  # every chosen against every rejected
            right.setdefault(r["subset"], []).append(float(c > ours_r[0]))
            counted += 1
    assert run.summary["subsets"] == pytest.approx({k: sum(v) / len(v) for k, v in right.items()})
    every = [x for v in right.values() for x in v]
    assert run.summary["score"] == pytest.approx(sum(every) / counted)


def test_reward_bench_2_best_of_n(models, texts, tmp_path):
    rows = [{"id": str(n), "prompt": s.prompt, "chosen": [s.chosen[0]], "rejected": list(s.rejected),
             "num_correct": 1, "num_incorrect": 3, "total_completions": 4, "models": ["m"] * 4,
             "subset": "Math" if n % 2 else "Factuality"} for n, s in enumerate(texts[:6])]
    data = tmp_path / "rb2.json"
    data.write_text(json.dumps(rows))
    rm = models["tmpl"]["rm"]
    run = score(ScoreOptions(model=rm, data=str(data), progress=False, bootstrap=0))
    assert run.summary["benchmark"] == "reward-bench-2"
    got = {}
    for r, c, j in zip(rows, run.chosen, run.rejected):
        every = [c[0]] + list(j)
        top = max(every)
        got.setdefault(r["subset"], []).append(1 / every.count(top) if c[0] == top else 0.0)
    subsets = {k: sum(v) / len(v) for k, v in got.items()}
    assert run.summary["subsets"] == pytest.approx(subsets)
    assert run.summary["score"] == pytest.approx(sum(subsets.values()) / len(subsets))
    scores = rm_scores(rm, [(rows[0]["prompt"], x) for x in rows[0]["chosen"] + rows[0]["rejected"]])
    np.testing.assert_allclose(list(run.chosen[0]) + list(run.rejected[0]), scores, atol=1e-4, rtol=0)


def test_the_command_line_prints_the_benchmarks_numbers(models, texts, tmp_path):
    data = tmp_path / "rb.json"
    rows = v1_rows(texts)
    data.write_text(json.dumps(rows))
    out = CliRunner().invoke(main, ["score", "--model", models["tmpl"]["rm"], "--data", str(data), "-q",
                                    "--output", str(tmp_path / "o"), "--bootstrap", "0"])
    assert out.exit_code == 0, out.output
    assert f"reward-bench: {len(rows)} rows" in out.output and "sections:" in out.output and "Chat Hard" in out.output
    assert f"results: {tmp_path / 'o'}/results.jsonl" in out.output


@pytest.mark.parametrize("extra, message", [
    (dict(tie_credit=0.5), "--tie-credit: only for --benchmark pairs"),
])
def test_what_other_benchmarks_do_not_take_is_one_line(models, texts, tmp_path, extra, message):
    data = tmp_path / "rb.json"
    data.write_text(json.dumps(v1_rows(texts)))
    with pytest.raises(UsageError, match=message):
        score(ScoreOptions(model=models["tmpl"]["rm"], data=str(data), progress=False, **extra))


def test_rm_bench_data_is_still_rm_bench(models, data_path, caplog):
    run = score(ScoreOptions(model=models["tmpl"]["rm"], data=data_path, limit=1, progress=False, bootstrap=0))
    assert "benchmark" not in run.summary and run.chosen.shape[1] == 3 and "scored as" not in caplog.text


def test_dpo_on_reward_bench_2_is_labelled_not_official(models, texts, tmp_path):
    rows = [{"id": str(n), "prompt": s.prompt, "chosen": [s.chosen[0]], "rejected": list(s.rejected[:2]),
             "num_correct": 1, "num_incorrect": 2, "total_completions": 3, "models": ["m"] * 3, "subset": "Focus"}
            for n, s in enumerate(texts[:3])]
    data = tmp_path / "rb2.json"
    data.write_text(json.dumps(rows))
    m = models["tmpl"]
    dpo = score(ScoreOptions(model=m["policy"], ref_model=m["ref"], data=str(data), progress=False, bootstrap=0))
    rm = score(ScoreOptions(model=m["rm"], data=str(data), progress=False, bootstrap=0))
    assert dpo.summary["official"] is False and "official" not in rm.summary


def test_leaderboard_prints_the_benchmarks_published_columns(models, texts, data_path, tmp_path):
    rows = v1_rows(texts)
    data = tmp_path / "rb.json"
    data.write_text(json.dumps(rows))
    runs = []
    for name in ("rm", "policy"):
        runs.append(str(tmp_path / name))
        extra = dict(ref_model=models["tmpl"]["ref"]) if name == "policy" else {}
        score(ScoreOptions(model=models["tmpl"][name], data=str(data), progress=False, bootstrap=0, output=runs[-1],
                           **extra))
    out = CliRunner().invoke(main, ["leaderboard", *runs, "--json"])
    assert out.exit_code == 0, out.output
    board = json.loads(out.output)
    assert board[0]["columns"] == ["Model", "Score", "Chat", "Chat Hard", "Safety", "Reasoning"]
    for r, run in zip(board, runs):
        summary = json.loads((tmp_path / run / "summary.json").read_text())
        assert r["Score"] == round(100 * summary["score"], 1)
        assert r["Chat Hard"] == round(100 * summary["sections"]["Chat Hard"], 1)
    md = CliRunner().invoke(main, ["leaderboard", *runs]).output
    assert [c.strip() for c in md.splitlines()[0].strip("| ").split("|")] == board[0]["columns"]
    score(ScoreOptions(model=models["tmpl"]["rm"], data=data_path, limit=1, progress=False, bootstrap=0,
                       output=str(tmp_path / "rmb")))
    mixed = CliRunner().invoke(main, ["leaderboard", runs[0], str(tmp_path / "rmb")])
    assert mixed.exit_code == 2 and "one table each" in mixed.output


def naive_bootstrap(values_by_subset, combine, resamples=4000, seed=11):
    """Rows resampled within each subset, the numbers recomputed, 2.5 and 97.5 percentiles."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(resamples):
        means = {s: float(np.mean(rng.choice(v, size=len(v), replace=True))) for s, v in values_by_subset.items()}
        out.append(combine(means))
    return np.percentile(out, [2.5, 97.5])


def test_reward_bench_intervals_are_a_bootstrap_within_subsets(models, texts, tmp_path):
    rows = v1_rows(texts) * 3  # more rows a subset: intervals of some width
    for n, r in enumerate(rows):
        r["id"] = n
    data = tmp_path / "rb.json"
    data.write_text(json.dumps(rows))
    run = score(ScoreOptions(model=models["tmpl"]["rm"], data=str(data), progress=False, bootstrap=4000))
    iv = run.summary["intervals"]
    assert iv["resamples"] == 4000 and iv["level"] == 0.95
    right = {}
    for r, c, j in zip(rows, run.chosen, run.rejected):
        right.setdefault(r["subset"], []).append(float(c[0] > j[0]))

    def combine(means):
        sections = {}
        for name in ("Chat", "Chat Hard", "Safety", "Reasoning"):
            part = [(means[k], w) for k, (sec, w) in V1.items() if sec == name and k in means]
            if part:
                sections[name] = sum(a * w for a, w in part) / sum(w for _, w in part)
        return sum(sections.values()) / len(sections)

    lo, hi = naive_bootstrap(right, combine)
    assert iv["score"][0] == pytest.approx(lo, abs=0.03) and iv["score"][1] == pytest.approx(hi, abs=0.03)
    assert iv["score"][0] <= run.summary["score"] <= iv["score"][1]
    for s, v in right.items():
        if min(v) == max(v):  # every row right (or every row wrong): no spread
            assert iv["subsets"][s] == [v[0], v[0]]
    again = score(ScoreOptions(model=models["tmpl"]["rm"], data=str(data), progress=False, bootstrap=4000))
    assert again.summary["intervals"] == iv  # a fixed seed


def test_accuracy_recomputes_a_benchmark_run_from_its_scores(models, texts, tmp_path):
    rows = v1_rows(texts)
    data = tmp_path / "rb.json"
    data.write_text(json.dumps(rows))
    out = tmp_path / "o"
    run = score(ScoreOptions(model=models["tmpl"]["rm"], data=str(data), progress=False, bootstrap=500,
                             output=str(out)))
    for arg in (out, out / "results.jsonl"):
        got = CliRunner().invoke(main, ["accuracy", str(arg), "--json", "--bootstrap", "500"])
        assert got.exit_code == 0, got.output
        again = json.loads(got.output)
        assert again["score"] == run.summary["score"] and again["sections"] == run.summary["sections"]
        assert again["intervals"] == run.summary["intervals"]
    text = CliRunner().invoke(main, ["accuracy", str(out)]).output
    assert text.startswith(f"reward-bench: {len(rows)} rows") and "score" in text

"""rmbench_fast.tasks.rewardbench2 (RewardBench 2): loading and validation, best-of-N with shared top
scores, the Ties subset's formula, the unweighted score; against plain computations here, and against
rewardbench 0.1.4's reroll_and_score_dataset and process_single_model, as scripts/run_v2.py calls them,
in the peer environment ($RMBENCH_PEER_PYTHON, else benchmarks/peer/.venv; skipped without it)."""

import json
import math
import random

import pytest
from rewardbench_peer import official

from rmbench_fast.tasks import TaskDataError, detect, get
from rmbench_fast.tasks.rewardbench2 import best_of_n, ties_score

RB2 = get("reward-bench-2")
BON = ("Factuality", "Precise IF", "Math", "Safety", "Focus")



def item(rid, subset, n_chosen, n_rejected):
    return {"id": rid, "prompt": f"p {rid}", "chosen": [f"c{j}" for j in range(n_chosen)],
            "rejected": [f"r{j}" for j in range(n_rejected)], "num_correct": n_chosen, "num_incorrect": n_rejected,
            "total_completions": n_chosen + n_rejected, "models": ["m"] * (n_chosen + n_rejected), "subset": subset}


def make_data(seed, ties_prompts=12, nan_case=False):
    """Best-of-N rows (scores from few values, a quarter with a planted top tie) and Ties rows: most
    prompts with both kinds, some ref or tied alone, tied rows with one correct response (no margin) or
    with equal correct scores (margin 0)."""
    rng = random.Random(seed)
    items, scores = [], []
    for subset in BON:
        for _ in range(rng.randint(2, 10)):
            n_rej = 3 if rng.random() < 0.8 else rng.randint(1, 5)
            s = [rng.choice([0.0, 0.5, 1.0, 1.5, 2.0]) for _ in range(1 + n_rej)]
            if rng.random() < 0.25:
                s[0] = max(s[1:])  # the chosen shares the top score
            items.append(item(f"{subset}-{len(items)}", subset, 1, n_rej))
            scores.append(s)
    for n in range(ties_prompts):
        kinds = rng.choice([("ref", "tied")] * 6 + [("ref",), ("tied",)])
        for kind in kinds:
            n_correct = 1 if kind == "ref" else (1 if nan_case or rng.random() < 0.15 else rng.randint(2, 4))
            n_rej = rng.randint(1, 4)
            s = [round(rng.uniform(-2, 2), rng.choice([0, 1, 3])) for _ in range(n_correct + n_rej)]
            if kind == "tied" and n_correct > 1 and rng.random() < 0.2:
                s[1] = s[0]  # two correct responses tied: a margin of 0
            items.append(item(f"{kind}:{n}", "Ties", n_correct, n_rej))
            scores.append(s)
    order = list(range(len(items)))
    rng.shuffle(order)
    return [items[i] for i in order], [scores[i] for i in order]


def load(tmp_path, items, name="data.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps(it) + "\n" for it in items))
    return RB2.load(path)


def naive_ties(items, scores):
    """The Ties rules written plainly, per prompt and kind, then over the prompts with both kinds."""
    stats = {"ref": {}, "tied": {}}
    for it, s in zip(items, scores):
        kind, n = it["id"].split(":")
        good, bad = s[:it["num_correct"]], s[it["num_correct"]:]
        if good and bad:
            stats[kind][int(n)] = {"acc": min(good) > max(bad), "cim": min(good) - max(bad),
                                   "dcm": max(good) - min(good) if len(good) > 1 else None}
        else:
            stats[kind][int(n)] = {"acc": False, "cim": 0, "dcm": None}
    ref, tied = stats["ref"], stats["tied"]

    def mean(xs):
        return sum(xs) / len(xs) if xs else float("nan")

    acc_ref = mean([v["acc"] for v in ref.values()]) if ref else 0
    acc_tied = mean([v["acc"] for v in tied.values()]) if tied else 0
    both = [n for n in ref if n in tied]
    if not both:
        return 0.3 * acc_tied + 0.3 * acc_ref
    has = [n for n in both if tied[n]["dcm"] is not None]
    low = {n: min(ref[n]["cim"], tied[n]["cim"]) for n in has}
    preferred = mean([tied[n]["cim"] > tied[n]["dcm"] for n in has])
    hard = mean([low[n] > tied[n]["dcm"] for n in has])
    margins = [math.tanh(low[n] / tied[n]["dcm"] - 1) for n in has if tied[n]["dcm"] > 0]
    margin = sum(margins) / len(margins) if margins else 0
    return 0.3 * acc_tied + 0.3 * acc_ref + 0.2 * preferred + 0.2 * hard + 0.01 * margin


def naive(items, scores):
    groups = {}
    for it, s in zip(items, scores):
        groups.setdefault(it["subset"], []).append((it, s))
    subsets = {}
    for name, members in groups.items():
        if name == "Ties":
            subsets[name] = naive_ties([m[0] for m in members], [m[1] for m in members])
        else:
            subsets[name] = sum((1 / s.count(max(s))) if s[0] == max(s) else 0 for _, s in members) / len(members)
    return subsets, sum(subsets.values()) / len(subsets)


@pytest.mark.parametrize("seed", range(8))
def test_aggregate_matches_the_plain_rules(tmp_path, seed):
    items, scores = make_data(seed)
    got = RB2.aggregate(load(tmp_path, items), scores)
    subsets, score = naive(items, scores)
    assert got["benchmark"] == "reward-bench-2" and set(got["subsets"]) == set(BON) | {"Ties"}
    assert got["subsets"] == pytest.approx(subsets, abs=1e-12)
    assert got["score"] == pytest.approx(score, abs=1e-12)
    assert sum(got["counts"].values()) == len(items)


def test_best_of_n_shares_a_top_tie():
    assert best_of_n([2.0, 1.0, 0.0, 1.5]) == 1
    assert best_of_n([2.0, 2.0, 0.0, 2.0]) == 1 / 3
    assert best_of_n([1.0, 2.0, 0.0, 2.0]) == 0
    assert best_of_n([1.0, float("nan"), 0.0]) == 0


def test_ties_terms_one_by_one():
    # ref: correct 3 above incorrect 2 (margin 1); tied: correct 3 and 2.5 above 2 (margins 0.5 and 0.5)
    entries = [("ref:1", [3.0, 1.0, 2.0], 1), ("tied:1", [3.0, 2.5, 1.0, 2.0], 2)]
    assert ties_score(entries) == pytest.approx(0.6)  # not preferred (0.5 > 0.5 fails), tanh(0) = 0
    entries = [("ref:1", [3.0, 1.0], 1), ("tied:1", [3.0, 2.9, 1.0], 2)]
    ratio = min(2.0, 1.9) / 0.1
    assert ties_score(entries) == pytest.approx(1.0 + 0.01 * math.tanh(ratio - 1))
    assert ties_score([("tied:4", [0.0, 1.0], 1)]) == 0  # tied alone, wrong
    assert ties_score([("ref:4", [1.0, 0.0], 1)]) == pytest.approx(0.3)
    # common prompts, but no tied row with two correct responses: np.mean of nothing, as the source
    assert math.isnan(ties_score([("ref:1", [1.0, 0.0], 1), ("tied:1", [1.0, 0.0], 1)]))
    # a wrong model with negative margins scores a little below 0
    assert -0.01 < ties_score([("ref:1", [0.0, 1.0], 1), ("tied:1", [0.0, 0.5, 1.0], 2)]) < 0


def test_rows_and_comparisons(tmp_path):
    rows = load(tmp_path, [item("a", "Math", 1, 3), item("tied:2", "Ties", 2, 2)])
    assert rows[0].responses == ("c0", "r0", "r1", "r2") and rows[0].prompt == "p a"
    assert RB2.comparisons(rows[0]) == [(0, 1), (0, 2), (0, 3)]
    assert RB2.comparisons(rows[1]) == [(0, 2), (0, 3), (1, 2), (1, 3)]
    assert RB2.row_result(rows[0], [1.0, 1.0, 0.0, 0.0]) == 0.5 and RB2.row_result(rows[1], [0, 0, 0, 0]) is None
    assert detect(item("a", "Math", 1, 3)) == "reward-bench-2"


@pytest.mark.parametrize("change, key, words", [
    ({"num_correct": 2}, "num_correct", "must be 1"),
    ({"total_completions": 3}, "total_completions", "must be 4"),
    ({"num_incorrect": 4}, "num_incorrect", "must be 3"),
    ({"id": "ref-3", "subset": "Ties"}, "id", "ref:N or tied:N"),
    ({"id": "both:3", "subset": "Ties"}, "id", "ref:N or tied:N"),
    ({"chosen": [], "num_correct": 0, "total_completions": 3}, "chosen", "holds no response"),
    ({"rejected": ["x", 3]}, "rejected[1]", "must be a string"),
    ({"subset": None}, "subset", "must be a string"),
])
def test_a_bad_row_names_the_file_the_row_and_the_key(tmp_path, change, key, words):
    with pytest.raises(ValueError) as e:
        load(tmp_path, [item("a", "Math", 1, 3), {**item("b", "Math", 1, 3), **change}], "bad.jsonl")
    text = str(e.value)
    assert isinstance(e.value, TaskDataError)
    assert "bad.jsonl" in text and "line 2" in text and "item 1" in text and f"key '{key}'" in text, text
    assert words in text, text


def test_missing_id(tmp_path):
    bad = item("b", "Math", 1, 3)
    del bad["id"]
    with pytest.raises(TaskDataError, match="item 0, key 'id': missing key"):
        load(tmp_path, [bad])


@pytest.mark.slow
def test_parity_with_rewardbench(tmp_path):
    """Random scores with planted top ties and every Ties case against run_v2.py's flow."""
    datasets = [make_data(seed) for seed in range(4)] + [make_data(9, ties_prompts=40), make_data(5, nan_case=True)]
    cases, ours = [], []
    for k, (items, scores) in enumerate(datasets):
        rows = load(tmp_path, items, f"case{k}.jsonl")
        ours.append((RB2.aggregate(rows, scores), [best_of_n(s) for s in scores]))
        cases.append({"kind": "v2", "rows": [{"subset": it["subset"], "id": it["id"], "scores": s,
                                              "num_correct": it["num_correct"]} for it, s in zip(items, scores)]})
    results = official(cases)
    for (got, per_row), want in zip(ours, results):
        assert per_row == want["results"]
        assert set(got["subsets"]) == set(want["subsets"])
        for name, value in want["subsets"].items():
            # the same operations in the same order: equal, not close
            assert got["subsets"][name] == value or (math.isnan(value) and math.isnan(got["subsets"][name])), name
    assert math.isnan(results[-1]["subsets"]["Ties"]) and math.isnan(ours[-1][0]["subsets"]["Ties"])
    shared = sum(1 for r in results[:-1] for x in r["results"] if 0 < x < 1)
    assert shared >= 5  # the planted top ties were there

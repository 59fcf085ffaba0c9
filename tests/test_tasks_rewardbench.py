"""rmbench_fast.tasks.rewardbench (RewardBench v1): loading and validation, the per-row rule (a tie is
wrong), subset means, sections weighted by EXAMPLE_COUNTS, the score and the prior sets' older
weighting; against plain computations here, and against rewardbench 0.1.4's own functions in the peer
environment ($RMBENCH_PEER_PYTHON, else benchmarks/peer/.venv; skipped without it) on random scores
with planted ties (benchmarks/peer/rewardbench_reference.py)."""

import json
import random

import pytest
from rewardbench_peer import official

from rmbench_fast.tasks import TaskDataError, detect, get
from rmbench_fast.tasks.rewardbench import EXAMPLE_COUNTS, PRIOR_SETS, SUBSET_MAPPING, summarize

RB = get("reward-bench")
CORE = [s for tests in SUBSET_MAPPING.values() for s in tests]



def make_rows(subsets, seed, per_subset=(1, 9)):
    """Rows over `subsets` with scores from a few values, so that ties are common."""
    rng = random.Random(seed)
    rows, scores = [], []
    for subset in subsets:
        for _ in range(rng.randint(*per_subset)):
            i = len(rows)
            rows.append({"id": i, "prompt": f"p{i}", "chosen": f"c{i}", "rejected": f"r{i}", "subset": subset,
                         "chosen_model": "a", "rejected_model": "b"})
            scores.append([rng.choice([-1.5, 0.0, 0.25, 1.0, 2.0]), rng.choice([-1.5, 0.0, 0.25, 1.0, 2.0])])
    order = list(range(len(rows)))
    rng.shuffle(order)
    return [rows[i] for i in order], [scores[i] for i in order]


def load(tmp_path, items, name="data.json"):
    path = tmp_path / name
    path.write_text(json.dumps(items))
    return RB.load(path)


def naive(items, scores):
    """The rules written plainly: subset = right / rows; section = sum(count * acc) / sum(count) over the
    subsets present; score = the sections' mean; prior sets = their mean, weighted 1 against 2 each."""
    subsets = {}
    for it, (c, r) in zip(items, scores):
        subsets.setdefault(it["subset"], []).append(1 if c > r else 0)
    acc = {k: sum(v) / len(v) for k, v in subsets.items()}
    sections = {}
    for name, tests in SUBSET_MAPPING.items():
        present = [t for t in tests if t in acc]
        if present:
            sections[name] = sum(acc[t] * EXAMPLE_COUNTS[t] for t in present) / sum(EXAMPLE_COUNTS[t] for t in present)
    out = {"subsets": acc, "sections": dict(sections), "score": sum(sections.values()) / len(sections)}
    prior = [acc[s] for s in PRIOR_SETS if s in acc]
    if prior:
        p = sum(prior) / len(prior)
        out["sections"]["Prior Sets"] = p
        out["score_with_prior_sets"] = (2 * sum(sections.values()) + p) / (2 * len(sections) + 1)
    return out


@pytest.mark.parametrize("seed", range(6))
def test_aggregate_matches_the_plain_rules(tmp_path, seed):
    rng = random.Random(seed)
    subsets = rng.sample(CORE, rng.randint(4, len(CORE))) + (rng.sample(list(PRIOR_SETS), seed % 3) if seed else [])
    items, scores = make_rows(subsets, seed)
    got = RB.aggregate(load(tmp_path, items), scores)
    want = naive(items, scores)
    assert got["benchmark"] == "reward-bench"
    assert got["subsets"] == pytest.approx(want["subsets"], abs=1e-12)
    assert got["sections"] == pytest.approx(want["sections"], abs=1e-12)
    assert got["score"] == pytest.approx(want["score"], abs=1e-12)
    assert got.get("score_with_prior_sets") == pytest.approx(want.get("score_with_prior_sets"), abs=1e-12)
    assert sum(got["counts"].values()) == len(items)
    assert all(0 <= v <= 1 for v in [*got["subsets"].values(), *got["sections"].values(), got["score"]])


def test_a_tie_is_wrong_and_math_is_half_of_reasoning(tmp_path):
    items = [{"id": 0, "prompt": "p", "chosen": "a", "rejected": "b", "subset": "math-prm"},
             {"id": 1, "prompt": "p", "chosen": "a", "rejected": "b", "subset": "hep-go"},
             {"id": 2, "prompt": "p", "chosen": "a", "rejected": "b", "subset": "hep-go"}]
    rows = load(tmp_path, items)
    got = RB.aggregate(rows, [[1.0, 1.0], [2.0, 1.0], [1.0, 1.0]])
    assert [RB.row_result(r, s) for r, s in zip(rows, [[1.0, 1.0], [2.0, 1.0]])] == [0.0, 1.0]
    assert got["subsets"] == {"hep-go": 0.5, "math-prm": 0.0}
    assert got["sections"] == {"Reasoning": 164 * 0.5 / (984 + 164)}
    # with all six hep-* subsets, math-prm's 984 is half of Reasoning's weight
    assert summarize({"math-prm": 1.0, **{s: 0.0 for s in SUBSET_MAPPING["Reasoning"][1:]}})["sections"] == {
        "Reasoning": 0.5}
    assert RB.comparisons(rows[0]) == [(0, 1)] and rows[0].responses == ("a", "b")


def test_the_prior_sets_alone_and_no_known_subset(tmp_path):
    items = [{"id": 0, "prompt": [{"role": "user", "content": "q"}], "chosen": "a", "rejected": "b", "subset": "shp"},
             {"id": 1, "prompt": [{"role": "user", "content": "q"}], "chosen": "a", "rejected": "b",
              "subset": "anthropic_harmless"}]  # a pref-test-sets split outside the Prior Sets average
    got = RB.aggregate(load(tmp_path, items), [[1.0, 0.0], [0.0, 1.0]])
    assert got["sections"] == {"Prior Sets": 1.0} and got["score"] == got["score_with_prior_sets"] == 1.0
    items = [{"id": i, "prompt": "p", "chosen": "a", "rejected": "b", "subset": "mine"} for i in range(4)]
    got = RB.aggregate(load(tmp_path, items), [[1.0, 0.0]] * 3 + [[0.0, 0.0]])
    assert got["sections"] == {} and got["score"] == 0.75


@pytest.mark.parametrize("item, key, words", [
    ({"prompt": "p", "chosen": "a", "rejected": "b"}, "subset", "missing key"),
    ({"prompt": "p", "chosen": ["a"], "rejected": "b", "subset": "shp"}, "chosen", "must be a string"),
    ({"prompt": 3, "chosen": "a", "rejected": "b", "subset": "shp"}, "prompt", "string or a list of messages"),
    ({"prompt": [{"role": "user"}], "chosen": "a", "rejected": "b", "subset": "shp"}, "prompt[0].content", "string"),
    ({"prompt": "p", "chosen": "a", "rejected": "b", "subset": "shp", "id": 1.5}, "id", "integer or a string"),
    ({"chosen": "a", "rejected": "b", "subset": "shp"}, "prompt", "missing key"),
])
def test_a_bad_row_names_the_file_the_row_and_the_key(tmp_path, item, key, words):
    good = {"id": 0, "prompt": "p", "chosen": "a", "rejected": "b", "subset": "shp"}
    with pytest.raises(ValueError) as e:
        load(tmp_path, [good, item], "bad.json")
    assert isinstance(e.value, TaskDataError)
    text = str(e.value)
    assert "bad.json" in text and "item 1" in text and f"key '{key}'" in text and words in text, text


def test_scores_must_fit_the_rows(tmp_path):
    rows = load(tmp_path, [{"id": 0, "prompt": "p", "chosen": "a", "rejected": "b", "subset": "shp"}])
    with pytest.raises(ValueError, match="1 scores for 2 responses"):
        RB.aggregate(rows, [[1.0]])
    with pytest.raises(ValueError, match="2 rows of scores for 1 rows"):
        RB.aggregate(rows, [[1.0, 0.0]] * 2)


def test_detected_from_its_subsets():
    row = {"id": 0, "prompt": "p", "chosen": "a", "rejected": "b", "subset": "hep-go"}
    assert detect(row) == "reward-bench" and detect([row, {**row, "subset": "anthropic_hhh"}]) == "reward-bench"
    assert detect([row, {**row, "subset": "my-own"}]) == "pairs"  # a subset of its own: the user's pairs


@pytest.mark.slow
def test_parity_with_rewardbench(tmp_path):
    """Random scores (a fifth of the pairs tied) against run_rm.py's per-row and per-subset lines,
    calculate_scores_per_section, and get_average_over_rewardbench's average and Prior Sets."""
    cases, ours = [{"kind": "constants"}], []
    plans = [CORE, CORE + list(PRIOR_SETS), CORE[::2] + ["shp", "summarize", "anthropic_harmless"],
             ["alpacaeval-easy", "math-prm", "hep-rust", "donotanswer", "llmbar-natural", "anthropic_hhh"],
             ["hep-go", "mt-bench-med", "my-own"]]  # Chat Hard and Safety absent: rewardbench reports 0 for them
    for seed, subsets in enumerate(plans):
        items, scores = make_rows(subsets, 100 + seed)
        rows = load(tmp_path, items, f"case{seed}.json")
        ours.append((RB.aggregate(rows, scores), [RB.row_result(r, s) for r, s in zip(rows, scores)]))
        cases.append({"kind": "v1", "rows": [{"subset": it["subset"], "id": it["id"], "chosen": c, "rejected": r}
                                             for it, (c, r) in zip(items, scores)]})
    constants, *results = official(cases)
    assert constants["EXAMPLE_COUNTS"] == EXAMPLE_COUNTS and constants["SUBSET_MAPPING"] == SUBSET_MAPPING
    assert tuple(constants["pref_columns"]) == PRIOR_SETS and constants["weights"] == [2, 2, 2, 2, 1]
    for (got, per_row), want in zip(ours, results):
        assert per_row == want["results"]
        assert got["subsets"] == want["subsets"]  # the same divisions: equal, not close
        core = {k: v for k, v in got["sections"].items() if k != "Prior Sets"}
        assert core == {k: v for k, v in want["sections"].items() if k in core}
        assert all(want["sections"][s] == 0 for s in SUBSET_MAPPING if s not in got["sections"])
        if "leaderboard" in want:
            board = want["leaderboard"]
            assert got["score_with_prior_sets" if "Prior Sets" in got["sections"] else "score"] == pytest.approx(
                board["average"], abs=1e-12)
            assert got["sections"].get("Prior Sets", float("nan")) == pytest.approx(
                board["Prior Sets (0.5 weight)"], abs=1e-12, nan_ok=True)
            for s in SUBSET_MAPPING:
                assert got["sections"][s] == pytest.approx(board[s], abs=1e-12)
    assert sum("leaderboard" in want for want in results) >= 3
    ties = sum(1 for c in cases[1:] for r in c["rows"] if r["chosen"] == r["rejected"])
    assert ties > 20  # the planted ties were there

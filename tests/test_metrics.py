"""Accuracy against the official RM-Bench formulas, written out plainly here."""

import numpy as np
import pytest

from reference import official_compute_accuracy, official_summary

from rmbench_fast.errors import ScoreError
from rmbench_fast.results.metrics import count_wins, summarize


def random_results(rng, n, ties):
    domains = ["chat", "code", "math", "safety-refuse", "safety-response"]
    results = []
    for p in range(n):
        if ties:
            c, r = rng.integers(0, 3, 3).astype(float), rng.integers(0, 3, 3).astype(float)
        else:
            c, r = rng.normal(size=3), rng.normal(size=3)
        results.append({"domain": domains[p % 5], "score_chosen": c.tolist(), "score_rejected": r.tolist()})
    return results


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_summary_equals_official(seed, ties):
    rng = np.random.default_rng(seed)
    results = random_results(rng, 503, ties)
    chosen = np.array([r["score_chosen"] for r in results])
    rejected = np.array([r["score_rejected"] for r in results])
    ours = summarize(chosen, rejected, [r["domain"] for r in results])
    ref = official_summary(results)
    assert set(ours["domains"]) == {"chat", "code", "math", "safety"}
    for d in ("chat", "code", "math", "safety"):
        for k in ("hard", "normal", "easy", "avg"):
            assert abs(ours["domains"][d][k] - ref[d][k]) <= 1e-12, (d, k)
    assert abs(ours["overall"] - ref["overall"]) <= 1e-12
    for k in ("hard", "normal", "easy"):
        assert abs(ours[k] - np.mean([ref[d][k] for d in ("chat", "code", "math", "safety")])) <= 1e-12
    # per file domain: safety-refuse alone
    refuse = [r for r in results if r["domain"] == "safety-refuse"]
    for k, v in official_compute_accuracy(refuse).items():
        assert abs(ours["file_domains"]["safety-refuse"][k] - v) <= 1e-12


def test_ties_count_as_wrong():
    same = np.ones((4, 3))
    counts = count_wins(same, same)
    assert counts.sum() == 0
    s = summarize(same, same, ["chat"] * 4)
    assert s["overall"] == 0.0


def test_matrix_orientation():
    # chosen concise beats every rejected; nothing else wins: row 0 full, so hard gets 2 of 3 cells.
    chosen = np.array([[10.0, -10.0, -10.0]])
    rejected = np.array([[0.0, 0.0, 0.0]])
    s = summarize(chosen, rejected, ["code"])
    assert s["matrices"]["code"] == [[1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    assert s["domains"]["code"]["hard"] == pytest.approx(2 / 3)
    assert s["domains"]["code"]["normal"] == pytest.approx(1 / 3)
    assert s["domains"]["code"]["easy"] == 0.0


def test_subsets_and_counts():
    rng = np.random.default_rng(5)
    chosen, rejected = rng.normal(size=(10, 3)), rng.normal(size=(10, 3))
    domains = ["chat"] * 4 + ["safety-refuse"] * 6
    subsets = ["a"] * 4 + ["x", "y"] * 3
    s = summarize(chosen, rejected, domains, subsets)
    assert s["domains"]["safety"]["n_prompts"] == 6
    assert s["subsets"]["safety-refuse/x"]["n_prompts"] == 3
    assert s["n_prompts"] == 10


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_scores_are_errors(bad):
    chosen, rejected = np.zeros((3, 3)), np.ones((3, 3))
    rejected[2, 1] = bad
    with pytest.raises(ScoreError, match="chat/7"):
        summarize(chosen, rejected, ["chat"] * 3, names=["chat/5", "chat/6", "chat/7"])


def test_score_vectors_compare_as_lists_and_nan_is_an_error():
    """Multi-label score vectors (the official flow's whole logits lists) compare as Python lists."""
    rng = np.random.default_rng(5)
    chosen, rejected = rng.integers(0, 3, (40, 3, 2)).astype(float), rng.integers(0, 3, (40, 3, 2)).astype(float)
    domains = ["chat"] * 40
    ours = summarize(chosen, rejected, domains)
    ref = official_summary([{"domain": "chat", "score_chosen": c.tolist(), "score_rejected": r.tolist()}
                            for c, r in zip(chosen, rejected)])
    assert abs(ours["overall"] - ref["overall"]) <= 1e-12
    chosen[7, 1, 0] = np.nan
    with pytest.raises(ScoreError, match="not finite"):
        summarize(chosen, rejected, domains)


def test_cells_of_scalar_scores_give_the_same_summary():
    """A scalar model's 0/1 cells, summarized as a judge's, give exactly summarize's numbers (ties
    and multi-label lists included), so one set of formulas serves both."""
    import json

    from rmbench_fast.results.metrics import cells_from_scores, summarize, summarize_cells

    rng = np.random.default_rng(0)
    n = 57
    domains = [["chat", "code", "math", "safety-refuse", "safety-response"][i % 5] for i in range(n)]
    subsets = [f"s{i % 3}" for i in range(n)]
    for chosen, rejected in [(rng.normal(size=(n, 3)), rng.normal(size=(n, 3))),
                             (rng.integers(0, 3, (n, 3)).astype(float), rng.integers(0, 3, (n, 3)).astype(float)),
                             (rng.integers(0, 2, (n, 3, 2)).astype(float), rng.integers(0, 2, (n, 3, 2)).astype(float))]:
        a = summarize(chosen, rejected, domains, subsets)
        b = summarize_cells(cells_from_scores(chosen, rejected), domains, subsets)
        assert json.dumps(a) == json.dumps(b)
    # fractional cells: the mean per cell, as the formulas read
    cells = rng.uniform(size=(n, 3, 3))
    s = summarize_cells(cells, ["chat"] * n)
    assert s["domains"]["chat"]["hard"] == pytest.approx(cells[:, [0, 0, 1], [1, 2, 2]].mean())
    assert s["domains"]["chat"]["normal"] == pytest.approx(cells[:, [0, 1, 2], [0, 1, 2]].mean())
    with pytest.raises(Exception, match="outside"):
        summarize_cells(cells * 2, ["chat"] * n)

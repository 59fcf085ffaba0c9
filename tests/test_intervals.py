"""Bootstrap intervals and paired comparisons (results.intervals) against plain references: a loop
that replays the documented draws and summarizes every resample with metrics.summarize_cells, the
coverage of a known true accuracy, and identical or planted-difference runs."""

import numpy as np
import pytest

from rmbench_fast.errors import ScoreError, UsageError
from rmbench_fast.inputs.data import DOMAINS, SCORE_DOMAIN, SCORE_DOMAINS
from rmbench_fast.results import intervals
from rmbench_fast.results.metrics import cells_from_scores, summarize_cells


def small_input(seed=0):
    """Prompts of every kind of domain, interleaved, with judge-like fractional cells."""
    rng = np.random.default_rng(seed)
    domains = ["safety-response", "chat", "other", "math", "safety-refuse", "chat", "math", "other", "math",
               "safety-response", "chat", "safety-refuse", "math"]
    cells = np.round(rng.random((len(domains), 3, 3)) * 4) / 4
    return cells, domains


def draw_order(domains):
    """(scoring domain, [file domains]) as intervals' docstring states the draws: scoring domains in
    table order, each one's file domains in file order, other labels by first appearance."""
    def rank(order):
        return lambda d: order.index(d) if d in order else len(order)

    scoring = sorted(dict.fromkeys(SCORE_DOMAIN.get(d, d) for d in domains), key=rank(SCORE_DOMAINS))
    files = sorted(dict.fromkeys(domains), key=rank(DOMAINS))
    return [(sd, [f for f in files if SCORE_DOMAIN.get(f, f) == sd]) for sd in scoring]


def naive_resamples(cells_list, domains, resamples, seed):
    """Per resample, metric_values of summarize_cells on each run's resampled cells, replaying the
    draws as intervals' docstring states them (one chunk: resamples <= chunk_size): each file domain
    resampled apart, so a scoring domain keeps its files' sizes."""
    positions = {f: [p for p, x in enumerate(domains) if x == f] for f in dict.fromkeys(domains)}
    rng = np.random.default_rng(seed)
    draws = {f: rng.integers(0, len(positions[f]), size=(resamples, len(positions[f])), dtype=np.int32)
             for _, files in draw_order(domains) for f in files}
    out = []
    for r in range(resamples):
        picked = [positions[f][i] for f in draws for i in draws[f][r]]
        out.append([intervals.metric_values(summarize_cells(c[picked], [domains[p] for p in picked]))
                    for c in cells_list])
    return out


def test_metric_names_and_values_follow_the_summary():
    cells, domains = small_input()
    summary = summarize_cells(cells, domains)
    names = intervals.metric_names(domains)
    assert names == intervals.metric_names(summary)
    assert names[:8] == ["overall", "hard", "normal", "easy", "chat", "chat/hard", "chat/normal", "chat/easy"]
    assert names[8::4] == ["math", "safety", "other"]
    values = intervals.metric_values(summary)
    assert list(values) == names
    assert values["safety/easy"] == summary["domains"]["safety"]["easy"]
    assert values["other"] == summary["domains"]["other"]["avg"]


def test_bootstrap_equals_a_loop_over_resamples():
    cells, domains = small_input()
    resamples, seed, level = 7, 3, 0.8
    naive = naive_resamples([cells], domains, resamples, seed)
    got = intervals.bootstrap(cells, domains, resamples=resamples, seed=seed, level=level)
    assert got["method"] == {"kind": intervals.METHOD, "resamples": 7, "seed": 3, "level": 0.8,
                             "min_prompts_for_intervals": 10, "small_domains": ["chat", "math", "safety", "other"]}
    samples = intervals.resampled(intervals.per_prompt(cells), domains, resamples, seed)
    for name in intervals.metric_names(domains):
        values = np.array([row[0][name] for row in naive])
        np.testing.assert_allclose(samples[name], values, rtol=0, atol=1e-12)
        low, high = np.quantile(values, [0.1, 0.9])
        assert got["metrics"][name]["low"] == pytest.approx(low, abs=1e-12)
        assert got["metrics"][name]["high"] == pytest.approx(high, abs=1e-12)


def test_paired_equals_a_loop_over_resamples():
    cells_a, domains = small_input(0)
    cells_b, _ = small_input(1)
    resamples, seed = 9, 5
    naive = naive_resamples([cells_a, cells_b], domains, resamples, seed)
    got = intervals.paired(cells_a, cells_b, domains, resamples=resamples, seed=seed, level=0.9)
    va = intervals.metric_values(summarize_cells(cells_a, domains))
    vb = intervals.metric_values(summarize_cells(cells_b, domains))
    for name in intervals.metric_names(domains):
        diffs = np.array([b[name] - a[name] for a, b in naive])
        m = got["metrics"][name]
        assert abs(m["diff"] - (vb[name] - va[name])) <= 1e-12
        low, high = np.quantile(diffs, [0.05, 0.95])
        assert m["low"] == pytest.approx(low, abs=1e-12) and m["high"] == pytest.approx(high, abs=1e-12)
        below = sum(1 for d in diffs if d <= 1e-12)
        above = sum(1 for d in diffs if d >= -1e-12)
        assert m["p"] == pytest.approx(min(1.0, 2 * (1 + min(below, above)) / (resamples + 1)))


def test_chunks_replay_as_documented(monkeypatch):
    """More resamples than a chunk holds: the draws go chunk by chunk, scoring domain by scoring
    domain, file domain by file domain, and each resample's means are those of a plain gather of the
    prompts drawn (safety's two files drawn apart, then pooled)."""
    cells, domains = small_input()
    values = intervals.per_prompt(cells)
    monkeypatch.setattr(intervals, "_CHUNK_ELEMENTS", 13 * 8)  # 8 resamples a chunk
    chunked = intervals.resampled(values, domains, 50, 1)
    rng = np.random.default_rng(1)
    labels = np.array(domains)
    order = draw_order(domains)
    means = {d: [] for d, _ in order}
    for start in range(0, 50, 8):
        c = min(8, 50 - start)
        for d, files in order:
            drawn = []
            for f in files:
                p = np.flatnonzero(labels == f)
                drawn.append(values[p][rng.integers(0, len(p), size=(c, len(p)), dtype=np.int32)])
            means[d].extend(np.concatenate(drawn, axis=1).mean(axis=1))
    assert [f for _, files in order for f in files] == ["chat", "math", "safety-refuse", "safety-response", "other"]
    for d in means:
        for k, part in enumerate(intervals.PARTS):
            np.testing.assert_allclose(chunked[f"{d}/{part}"], np.array(means[d])[:, k], rtol=0, atol=1e-12)


def test_coverage_of_a_known_true_accuracy():
    """500 simulated benchmarks with known per-cell win probabilities (and cells of a prompt
    correlated, as real models' are): at least 93% of the 95% intervals cover the true value, and
    they are as wide as the estimates' spread over the runs, no wider. safety-refuse and
    safety-response have very different accuracies: safety pools them with fixed weights, so
    resampling the pool (letting the mix vary) would make safety's intervals ~60% too wide."""
    sizes = {"chat": 100, "math": 220, "code": 140, "safety-refuse": 90, "safety-response": 70}  # half the benchmark
    domains = [d for d, n in sizes.items() for _ in range(n)]
    rng = np.random.default_rng(2024)
    probs = {d: rng.uniform(0.3, 0.95, size=(3, 3)) for d in sizes}
    probs["safety-refuse"] = rng.uniform(0.85, 0.97, size=(3, 3))
    probs["safety-response"] = rng.uniform(0.15, 0.3, size=(3, 3))
    truth_p = np.stack([probs[d] for d in domains])
    true = intervals.metric_values(summarize_cells(truth_p, domains))  # expected cells give the true numbers
    watched = ["overall", "math", "safety", "safety/hard", "chat/easy"]
    covered = {m: 0 for m in watched}
    widths, estimates = {m: [] for m in watched}, {m: [] for m in watched}
    runs = 500
    for k in range(runs):
        shared = rng.random(len(domains)) < 0.6  # 60% of prompts: one draw decides all nine cells
        u = np.where(shared[:, None, None], rng.random(len(domains))[:, None, None], rng.random((len(domains), 3, 3)))
        cells = (u < truth_p).astype(np.float64)
        got = intervals.bootstrap(cells, domains, resamples=1000, seed=k)["metrics"]
        values = intervals.metric_values(summarize_cells(cells, domains))
        for m in watched:
            covered[m] += got[m]["low"] <= true[m] <= got[m]["high"]
            widths[m].append(got[m]["high"] - got[m]["low"])
            estimates[m].append(values[m])
    for m in watched:
        assert covered[m] / runs >= 0.93, (m, covered[m])
        # a 95% interval of a near-normal estimate spans about 2 * 1.96 of its standard deviations
        ratio = np.mean(widths[m]) / (2 * 1.96 * np.std(estimates[m]))
        assert 0.9 <= ratio <= 1.1, (m, ratio)


def test_small_domains_are_named():
    """Fewer than 10 prompts in a file domain: the numbers are kept, the method names the domain
    (one prompt: every resample the same, a zero-width interval that claims false certainty)."""
    domains = ["chat"] * 1 + ["math"] * 12 + ["safety-refuse"] * 20 + ["safety-response"] * 4 + ["code"] * 10
    cells = (np.random.default_rng(3).random((len(domains), 3, 3)) < 0.6).astype(np.float64)
    got = intervals.bootstrap(cells, domains, resamples=200)
    assert got["method"]["min_prompts_for_intervals"] == intervals.MIN_PROMPTS == 10
    assert got["method"]["small_domains"] == ["chat", "safety"]  # safety: 4 safety-response prompts
    assert got["metrics"]["chat"]["low"] == got["metrics"]["chat"]["high"]  # the zero width it warns of
    assert intervals.small_domains(["math"] * 10) == []


def test_identical_runs_give_exactly_zero():
    rng = np.random.default_rng(7)
    domains = ["chat"] * 40 + ["math"] * 60 + ["safety-refuse"] * 30 + ["code"] * 25
    cells = cells_from_scores(rng.normal(size=(len(domains), 3)), rng.normal(size=(len(domains), 3)))
    got = intervals.paired(cells, cells.copy(), domains, resamples=2000, seed=1)
    assert set(got["metrics"]) == set(intervals.metric_names(domains))
    for m in got["metrics"].values():
        assert m == {"diff": 0.0, "low": 0.0, "high": 0.0, "p": 1.0}


def test_a_planted_difference_is_found():
    rng = np.random.default_rng(11)
    sizes = {"chat": 129, "math": 529, "code": 228, "safety-refuse": 284, "safety-response": 157}
    domains = [d for d, n in sizes.items() for _ in range(n)]
    a = cells_from_scores(rng.normal(0.4, 1, (len(domains), 3)), rng.normal(0, 1, (len(domains), 3)))
    b = a.copy()
    code = np.flatnonzero(np.array(domains) == "code")
    planted = rng.choice(code, size=int(0.15 * len(code)), replace=False)
    b[planted] = 1.0  # run B wins every comparison on 15% of the code prompts
    resamples = 2000
    got = intervals.paired(a, b, domains, resamples=resamples, seed=0)["metrics"]
    va = intervals.metric_values(summarize_cells(a, domains))
    vb = intervals.metric_values(summarize_cells(b, domains))
    for name, m in got.items():
        assert abs(m["diff"] - (vb[name] - va[name])) <= 1e-12
    for name in ("overall", "code", "code/hard", "code/normal", "code/easy"):
        assert got[name]["diff"] > 0 and got[name]["low"] > 0, name
        assert got[name]["p"] == 2 / (resamples + 1), name  # beyond every resample: the smallest p
    for d in ("chat", "math", "safety"):
        for name in (d, f"{d}/hard", f"{d}/normal", f"{d}/easy"):
            assert got[name] == {"diff": 0.0, "low": 0.0, "high": 0.0, "p": 1.0}


def test_bad_input_is_refused():
    cells, domains = small_input()
    assert intervals.bootstrap(cells, domains, resamples=0) is None
    assert intervals.paired(cells, cells, domains, resamples=0) is None
    with pytest.raises(UsageError, match="--level"):
        intervals.bootstrap(cells, domains, level=1.5)
    with pytest.raises(UsageError, match="--bootstrap"):
        intervals.paired(cells, cells, domains, resamples=-1)
    bad = cells.copy()
    bad[2, 1, 1] = 1.5
    with pytest.raises(ScoreError, match="prompts 2"):
        intervals.bootstrap(bad, domains, resamples=10)

"""`rmbench-fast compare` on run folders and official results files, and sweeps compared against a
baseline checkpoint: values by the official formulas (tests/reference.py), differences and their
paired intervals, the planted prompts found, one-line errors."""

import csv
import json

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import make_item, write_json
from reference import official_summary
from rmbench_fast.cli.main import main
from rmbench_fast.engine.sweep import Comparisons, baseline_index
from rmbench_fast.errors import UsageError
from rmbench_fast.results import intervals
from rmbench_fast.results.metrics import cells_from_scores, summarize_cells

SIZES = {"chat": 30, "math": 60, "code": 40, "safety-refuse": 25, "safety-response": 15}


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def scored_items(seed=0):
    rng = np.random.default_rng(seed)
    return [{"id": i, "domain": d, "prompt": f"q{i}", "score_chosen": rng.normal(0.3, 1, 3).tolist(),
             "score_rejected": rng.normal(0, 1, 3).tolist()} for d, n in SIZES.items() for i in range(n)]


def run_folder(path, items):
    """A run folder as `score` writes it (results.json in the official format, a summary, run.json)."""
    path.mkdir(parents=True)
    write_json(path / "results.json", items)
    write_json(path / "summary.json", {"overall": 0.0, "domains": {}})
    write_json(path / "run.json", {"options": {"model": path.name}})
    return path


def planted(items, domain="code", share=0.2, seed=1):
    """A copy of `items` where run B wins every comparison on `share` of `domain`'s prompts (those
    it did not already win all of), and the ids planted."""
    rng = np.random.default_rng(seed)
    out = json.loads(json.dumps(items))
    cand = [k for k, x in enumerate(out)
            if x["domain"] == domain and min(x["score_chosen"]) <= max(x["score_rejected"])]
    picked = rng.choice(cand, size=int(share * sum(1 for x in out if x["domain"] == domain)), replace=False)
    for k in picked:
        out[k]["score_chosen"] = [max(out[k]["score_rejected"]) + 1.0] * 3
    return out, {f"{domain}/{out[k]['id']}" for k in picked}


def flat_official(items):
    """metric name -> the official formulas' number (reference.official_summary, written plainly)."""
    ref = official_summary(items)
    out = {"overall": ref["overall"]}
    domains = [d for d in ("chat", "math", "code", "safety") if d in ref]
    for part in ("hard", "normal", "easy"):
        out[part] = np.mean([ref[d][part] for d in domains])
    for d in domains:
        out[d] = ref[d]["avg"]
        for part in ("hard", "normal", "easy"):
            out[f"{d}/{part}"] = ref[d][part]
    return out


def test_compare_two_folders_finds_the_planted_difference(tmp_path):
    items = scored_items()
    b_items, ids = planted(items)
    a = run_folder(tmp_path / "a", items)
    b = run_folder(tmp_path / "b", b_items)
    res = run("compare", a, b, "--bootstrap", 2000, "--top", 5, "--json", "-")
    assert res.exit_code == 0, res.output
    got = json.loads(res.stdout)
    assert list(got["runs"]) == [str(a), str(b)]
    assert got["method"] == {"kind": intervals.METHOD, "resamples": 2000, "seed": 0, "level": 0.95,
                             "min_prompts_for_intervals": 10, "small_domains": []}
    assert got["prompts"]["complete"] is False and "chat has 30 of its 129 prompts" in got["prompts"]["note"]
    names = intervals.metric_names(list(SIZES))
    for name, its in ((str(a), items), (str(b), b_items)):
        ref = flat_official(its)
        assert list(got["runs"][name]) == names
        for m in names:
            v = got["runs"][name][m]
            assert abs(v["value"] - ref[m]) <= 1e-12, (name, m)
            assert v["low"] <= v["value"] <= v["high"]
    (pair,) = got["pairs"]
    assert (pair["a"], pair["b"]) == (str(a), str(b))
    ra, rb = flat_official(items), flat_official(b_items)
    for m in names:
        d = pair["metrics"][m]
        assert abs(d["diff"] - (rb[m] - ra[m])) <= 1e-12
        if m.startswith("code") or m in ("overall", "hard", "normal", "easy"):
            assert d["low"] > 0 and d["significant"] and d["p"] < 0.05, m
        else:  # untouched domains: exactly nothing
            assert d == {"diff": 0.0, "low": 0.0, "high": 0.0, "p": 1.0, "significant": False}, m
    top = pair["disagreements"]
    assert len(top) == 5 and {x["id"] for x in top} <= ids
    gaps = [x["disagreement"] for x in top]
    assert gaps == sorted(gaps, reverse=True)
    for x in top:  # the rows of both runs, and the gap recomputed from their scores
        ca = cells_from_scores(np.array([x["a"]["score_chosen"]]), np.array([x["a"]["score_rejected"]]))
        cb = cells_from_scores(np.array([x["b"]["score_chosen"]]), np.array([x["b"]["score_rejected"]]))
        assert x["disagreement"] == np.abs(ca - cb).sum() and x["b"]["cells"] == [[1.0] * 3] * 3
        assert x["domain"] == "code"
    # the table: code flagged, chat not
    res = run("compare", a, b, "--bootstrap", 500, "--json", tmp_path / "cmp.json")
    assert res.exit_code == 0, res.output
    lines = {line.split()[0]: line for line in res.stdout.splitlines() if line.strip()}
    assert lines["code"].rstrip().split()[-2] == "*" and "*" not in lines["chat"]
    assert json.loads((tmp_path / "cmp.json").read_text())["method"]["resamples"] == 500


def test_identical_runs_and_baseline(tmp_path):
    items = scored_items(3)
    a = run_folder(tmp_path / "a", items)
    b = write_json(tmp_path / "b.json", items)  # an official-format results file
    c = run_folder(tmp_path / "c", planted(items, "math", seed=4)[0])
    res = run("compare", c, a, b, "--baseline", a, "--bootstrap", 300, "--json", "-")
    assert res.exit_code == 0, res.output
    got = json.loads(res.stdout)
    assert list(got["runs"]) == [str(a), str(c), str(b)]
    assert [(p["a"], p["b"]) for p in got["pairs"]] == [(str(a), str(c)), (str(a), str(b))]
    same = got["pairs"][1]
    assert same["disagreements"] == []
    for m in same["metrics"].values():
        assert m == {"diff": 0.0, "low": 0.0, "high": 0.0, "p": 1.0, "significant": False}
    assert got["pairs"][0]["metrics"]["math"]["significant"]
    # --baseline without resamples: the same pairs, plain differences (no interval, no p)
    plain = json.loads(run("compare", c, a, b, "--baseline", a, "--bootstrap", 0, "--json", "-").stdout)
    assert [(p["a"], p["b"]) for p in plain["pairs"]] == [(str(a), str(c)), (str(a), str(b))]
    m = plain["pairs"][0]["metrics"]["math"]
    assert m["diff"] == pytest.approx(got["pairs"][0]["metrics"]["math"]["diff"], abs=1e-12) and m["diff"] > 0
    assert m["low"] is m["high"] is m["p"] is None and m["significant"] is False
    text = run("compare", c, a, "--baseline", a, "--bootstrap", 0).stdout
    assert "values and differences only" in text and "B-A" in text


def test_official_files_on_different_prompts(tmp_path):
    """An official per-domain results file (domain from its name, integer ids) against a run
    folder of every domain: compared on the common prompts, the rest counted as left out."""
    items = scored_items(5)
    a = run_folder(tmp_path / "a", items)
    chat = [{k: v for k, v in x.items() if k != "domain"} for x in items if x["domain"] == "chat"][5:]
    for x in chat:
        x["score_chosen"] = [min(x["score_rejected"])] * 3  # ties or losses: wrong everywhere
    b = write_json(tmp_path / "chat_filtered.json", chat)
    res = run("compare", a, b, "--bootstrap", 200, "--json", "-")
    assert res.exit_code == 0, res.output
    got = json.loads(res.stdout)
    assert got["prompts"]["common"] == 25 and got["prompts"]["domains"] == {"chat": 25}
    assert got["prompts"]["left_out"] == {str(a): len(items) - 25, str(b): 0}
    assert list(got["runs"][str(b)]) == ["overall", "hard", "normal", "easy", "chat", "chat/hard", "chat/normal",
                                         "chat/easy"]
    assert got["runs"][str(b)]["chat"]["value"] == 0.0
    assert got["runs"][str(a)]["chat"]["value"] == flat_official(items[5:30])["chat"]
    text = run("compare", a, b, "--bootstrap", 0)
    assert text.exit_code == 0 and f"({len(items) - 25} prompt(s) not in every run left out)" in text.stdout
    # the common prompts are chat's only: their "overall" is chat's, which the comparison says
    assert got["prompts"]["complete"] is False and "math, code, safety missing" in got["prompts"]["note"]
    assert "note: overall is not the paper's four-domain RM-Bench number: it averages 1 domain(s) (chat)" in text.stdout


def test_small_domains_are_noted(tmp_path):
    items = [x for x in scored_items(6) if x["domain"] != "chat" or x["id"] < 4]  # 4 chat prompts
    a = run_folder(tmp_path / "a", items)
    b = run_folder(tmp_path / "b", planted(items, "math")[0])
    got = json.loads(run("compare", a, b, "--bootstrap", 100, "--json", "-").stdout)
    assert got["method"]["small_domains"] == ["chat"]
    text = run("compare", a, b, "--bootstrap", 100).stdout
    assert "note: intervals of chat (4 prompts) understate the uncertainty" in text


@pytest.mark.parametrize("case", ["missing", "bad", "disjoint", "one", "twice", "no-id", "twice-no-domain"])
def test_errors_are_one_line(tmp_path, case):
    a = run_folder(tmp_path / "a", scored_items())
    official = [{k: v for k, v in x.items() if k != "domain"} for x in scored_items()]  # ids 0.. in every domain
    args = {"missing": [a, tmp_path / "nope"],
            "no-id": [a, write_json(tmp_path / "chat_x.json", [{k: v for k, v in x.items() if k != "id" or x["id"] != 3}
                                                               for x in official[:10]])],
            "twice-no-domain": [a, write_json(tmp_path / "results-all.json", official)],
            "bad": [a, write_json(tmp_path / "bad.json", [{"id": 1, "domain": "chat", "score_chosen": [1, 2]}])],
            "disjoint": [a, write_json(tmp_path / "math_filtered.json",
                                       [{"id": 999, "score_chosen": [1, 1, 1], "score_rejected": [0, 0, 0]}])],
            "one": [a], "twice": [a, tmp_path / "a" / ""]}[case]
    res = run("compare", *args)
    assert res.exit_code == 2
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith("rmbench-fast: error: ")
    assert {"missing": "nope: no such run folder", "bad": "item 0, key 'score_chosen'",
            "disjoint": "no prompt in common", "one": "at least two runs", "twice": "given twice",
            "no-id": "chat_x.json, item 3, key 'id': has no id",
            "twice-no-domain": "add `domain` to each item or name the file `<domain>_...json`"}[case] in line


@pytest.fixture(scope="module")
def sweep_models(tmp_path_factory):
    from rmbench_fast.tiny.models import build_model, llama_config, save_model, train_tokenizer

    root = tmp_path_factory.mktemp("cmp-sweep")
    data = write_json(root / "data.json", [make_item(i, d) for d in SIZES for i in range(3)])
    tok = train_tokenizer([json.dumps(make_item(i)) for i in range(30)], vocab_size=300)
    cfg = dict(vocab_size=len(tok), hidden=32, layers=1, heads=4)
    for step in (10, 20, 30):
        save_model(build_model("rm", llama_config(**cfg), step), tok, root / "run" / f"checkpoint-{step}")
    return root, data


def sweep_rows(out):
    return json.loads((out / "sweep.json").read_text())["checkpoints"]


def test_sweep_compares_every_checkpoint_with_the_baseline(sweep_models, tmp_path):
    root, data = sweep_models
    base = ["sweep", "--checkpoints", root / "run" / "checkpoint-*", "--data", data, "--output", tmp_path / "s",
            "--no-plots", "--cache-dir", tmp_path / "store"]
    res = run(*base)
    assert res.exit_code == 0, res.output
    rows = sweep_rows(tmp_path / "s")
    assert [r["step"] for r in rows] == [10, 20, 30] and rows[0]["vs_baseline"] is None

    def check(rows, b):
        cells = {}
        for r in rows:
            items = json.loads((tmp_path / "s" / r["dir"] / "results.json").read_text())
            cells[r["step"]] = cells_from_scores(np.array([x["score_chosen"] for x in items]),
                                                 np.array([x["score_rejected"] for x in items]))
        domains = [x["domain"] for x in items]
        for r in rows:
            if r["step"] == b["step"]:
                assert r["vs_baseline"] is None
                continue
            assert r["vs_baseline"]["baseline"] == b["dir"]  # the sub-folder: unique among the checkpoints
            want = intervals.paired(cells[b["step"]], cells[r["step"]], domains)["metrics"]
            for m, v in r["vs_baseline"]["metrics"].items():
                assert v["significant"] == (v["low"] > 0 or v["high"] < 0)
                assert {k: v[k] for k in ("diff", "low", "high", "p")} == want[m]
            assert abs(r["vs_baseline"]["metrics"]["overall"]["diff"] - (r["overall"] - b["overall"])) <= 1e-12

    check(rows, rows[0])
    table = list(csv.DictReader((tmp_path / "s" / "sweep.csv").open()))
    assert table[0]["overall_diff"] == "" and float(table[2]["overall_diff"]) == pytest.approx(
        rows[2]["overall"] - rows[0]["overall"], abs=1e-12)
    # --baseline by step: the checkpoints read back from their folders, compared against the middle one
    res = run(*base, "--baseline", "20")
    assert res.exit_code == 0, res.output
    rows = sweep_rows(tmp_path / "s")
    check(rows, rows[1])
    res = run(*base, "--baseline", "40")
    assert res.exit_code == 2 and "--baseline 40 is not one of the sweep's checkpoints" in res.stderr
    # --bootstrap 0: --baseline is not ignored; plain differences, no interval or p
    res = run(*base, "--baseline", "20", "--bootstrap", 0)
    assert res.exit_code == 0, res.output
    rows = sweep_rows(tmp_path / "s")
    assert rows[1]["vs_baseline"] is None
    for r in (rows[0], rows[2]):
        o = r["vs_baseline"]["metrics"]["overall"]
        assert r["vs_baseline"]["baseline"] == "checkpoint-20" and o["low"] is o["high"] is o["p"] is None
        assert o["diff"] == pytest.approx(r["overall"] - rows[1]["overall"], abs=1e-12) and not o["significant"]
    assert "(no intervals: --bootstrap 0)" in res.output


def test_sweep_names_its_baseline_by_its_unique_sub_folder(sweep_models, tmp_path):
    """Two checkpoints with the same folder name: vs_baseline names the baseline's sub-folder."""
    import shutil

    root, data = sweep_models
    twin = shutil.copytree(root / "run" / "checkpoint-20", tmp_path / "other" / "checkpoint-20")
    res = run("sweep", "--model", root / "run" / "checkpoint-20", "--model", twin, "--baseline", twin, "--data", data,
              "--output", tmp_path / "s", "--no-plots", "--cache-dir", tmp_path / "store", "--bootstrap", 200)
    assert res.exit_code == 0, res.output
    rows = sweep_rows(tmp_path / "s")
    assert [r["dir"] for r in rows] == ["checkpoint-20", "001-checkpoint-20"]
    assert rows[1]["vs_baseline"] is None and rows[0]["vs_baseline"]["baseline"] == "001-checkpoint-20"
    assert json.loads((tmp_path / "s" / "sweep.json").read_text())["baseline"] == "001-checkpoint-20"


def test_baseline_by_name_path_or_step(tmp_path):
    (tmp_path / "b").mkdir()
    found = [(10, str(tmp_path / "a" / "checkpoint-10")), (20, str(tmp_path / "b")), (None, "hub/model-7")]
    subs = ["checkpoint-10", "b", "model-7"]
    assert baseline_index(found, subs, None) == 0
    assert [baseline_index(found, subs, x) for x in ("checkpoint-10", "20", "b", str(tmp_path / "b") + "/",
                                                     "hub/model-7", "model-7")] == [0, 1, 1, 1, 2, 2]
    with pytest.raises(UsageError, match="--baseline 30 is not one of"):
        baseline_index(found, subs, "30")
    with pytest.raises(UsageError, match="matches several"):
        baseline_index([(10, "x/checkpoint-10"), (20, "y/10")], ["checkpoint-10", "10"], "10")


def test_comparisons_wait_for_a_baseline_that_finishes_last(tmp_path):
    """Checkpoints finishing out of order (Ray): rows get vs_baseline once the baseline is scored."""
    rng = np.random.default_rng(2)
    domains = [d for d, n in SIZES.items() for _ in range(n)]
    scores = [(rng.normal(size=(len(domains), 3)), rng.normal(size=(len(domains), 3))) for _ in range(3)]
    versus = Comparisons(1, "checkpoint-b", resamples=300)
    rows = {}
    for k in (2, 0, 1):
        rows[k] = {"checkpoint": "xyz"[k]}
        versus.add(k, *scores[k], domains, tmp_path / "xyz"[k], [f"{d}/{i}" for i, d in enumerate(domains)])
        versus.fill(rows)
        if k != 1:
            assert all("vs_baseline" not in r for r in rows.values())
    assert rows[1]["vs_baseline"] is None
    cells = [cells_from_scores(*s) for s in scores]
    for k in (0, 2):
        want = intervals.paired(cells[1], cells[k], domains, resamples=300)["metrics"]
        got = rows[k]["vs_baseline"]
        assert got["baseline"] == "checkpoint-b"
        assert {m: {x: v[x] for x in ("diff", "low", "high", "p")} for m, v in got["metrics"].items()} == want


def test_checkpoints_on_other_prompts_are_refused(tmp_path, monkeypatch):
    """Checkpoints are paired prompt by prompt: one scored on other prompts is refused in one line,
    whether scored now (the samples' names) or read back (its results.json's); without resamples the
    plain differences need no results.json read again."""
    import rmbench_fast.results.files as files
    from rmbench_fast.errors import DataError

    rng = np.random.default_rng(3)
    items = scored_items(1)
    domains = [x["domain"] for x in items]
    names = [f"{x['domain']}/{x['id']}" for x in items]
    scores = [(rng.normal(size=(len(items), 3)), rng.normal(size=(len(items), 3))) for _ in range(3)]
    moved = names[:3] + ["chat/999"] + names[4:]
    versus = Comparisons(0, "checkpoint-a", resamples=50)
    versus.add(0, *scores[0], domains, tmp_path / "checkpoint-a", names)
    with pytest.raises(DataError, match=r"checkpoint checkpoint-b was scored on other prompts than checkpoint "
                                        r"checkpoint-a \('chat/999' only in checkpoint-b; 'chat/3' only in "):
        versus.add(1, *scores[1], domains, tmp_path / "checkpoint-b", moved)
    read_back = run_folder(tmp_path / "checkpoint-c", [{**x, "id": 999} if k == 3 else x for k, x in enumerate(items)])
    with pytest.raises(DataError, match="checkpoint-c was scored on other prompts"):
        versus.add(2, *scores[2], None, read_back)  # read back: names from its results.json
    plain = Comparisons(0, "checkpoint-a", resamples=0)
    monkeypatch.setattr(files, "read_scores", lambda *a, **k: pytest.fail("results.json read again"))
    rows = {}
    for k in range(2):
        summary = summarize_cells(cells_from_scores(*scores[k]), domains)
        plain.add(k, *scores[k], None, tmp_path / f"c{k}", None, summary)
        rows[k] = {"overall": summary["overall"]}
        plain.fill(rows)
    diff = rows[1]["vs_baseline"]["metrics"]["overall"]["diff"]
    assert diff == pytest.approx(rows[1]["overall"] - rows[0]["overall"])

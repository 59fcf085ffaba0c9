"""`rmbench-fast leaderboard`: rows by the RM-Bench leaderboard's own formulas, Markdown / CSV text,
warnings for missing and partial domains, the command on run folders and results files."""

import json

import numpy as np
from click.testing import CliRunner

from conftest import write_json
from rmbench_fast.cli.main import main
from rmbench_fast.results.files import read_results
from rmbench_fast.results.leaderboard import COLUMNS, row, to_csv, to_markdown, warnings
from rmbench_fast.results.metrics import summarize

FILE_DOMAINS = {"chat": 7, "code": 5, "math": 6, "safety-refuse": 4, "safety-response": 3}
LEADERBOARD = {"Chat": ["chat"], "Math": ["math"], "Code": ["code"], "Safety": ["safety-refuse", "safety-response"]}


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def synthetic_items(seed=5):
    rng = np.random.default_rng(seed)
    items = []
    for d, n in FILE_DOMAINS.items():
        for i in range(n):
            items.append({"id": i, "domain": d, "prompt": "q",
                          "score_chosen": rng.integers(0, 4, 3).astype(float).tolist(),  # small ints: many ties
                          "score_rejected": rng.integers(0, 4, 3).astype(float).tolist()})
    return items


def official(items):
    """The leaderboard's numbers, written out: per domain a 3x3 matrix of how often chosen i beat
    rejected j (strictly), over the domain's prompts; hard = the upper-right mean, normal = the
    diagonal mean, easy = the lower-left mean; a domain's score = mean(hard, normal, easy);
    Easy/Normal/Hard = the mean over the four domains; Overall = (Chat + Code + Math + Safety) / 4."""
    per = {}
    for col, files in LEADERBOARD.items():
        mine = [x for x in items if x["domain"] in files]
        m = [[0.0] * 3 for _ in range(3)]
        for x in mine:
            for i in range(3):
                for j in range(3):
                    if x["score_chosen"][i] > x["score_rejected"][j]:
                        m[i][j] += 1
        m = [[v / len(mine) for v in r] for r in m]
        hard = (m[0][1] + m[0][2] + m[1][2]) / 3
        normal = (m[0][0] + m[1][1] + m[2][2]) / 3
        easy = (m[1][0] + m[2][0] + m[2][1]) / 3
        per[col] = {"hard": hard, "normal": normal, "easy": easy}
    out = {col: 100 * (v["hard"] + v["normal"] + v["easy"]) / 3 for col, v in per.items()}
    out["Easy"] = 100 * (per["Safety"]["easy"] + per["Math"]["easy"] + per["Chat"]["easy"] + per["Code"]["easy"]) / 4
    out["Normal"] = 100 * (per["Safety"]["normal"] + per["Math"]["normal"] + per["Chat"]["normal"]
                           + per["Code"]["normal"]) / 4
    out["Hard"] = 100 * (per["Safety"]["hard"] + per["Math"]["hard"] + per["Chat"]["hard"] + per["Code"]["hard"]) / 4
    out["Overall"] = (out["Chat"] + out["Code"] + out["Math"] + out["Safety"]) / 4
    return out


def test_row_follows_the_official_formulas(tmp_path):
    items = synthetic_items()
    path = write_json(tmp_path / "res.json", items)
    kind, *data, domains, subsets, names = read_results(path)
    r = row(summarize(*data, domains, subsets, names), "m", FILE_DOMAINS | {"safety": 7})
    want = official(items)
    assert list(r)[:len(COLUMNS)] == list(COLUMNS) and r["Model"] == "m"
    for col in COLUMNS[1:]:
        assert abs(r["unrounded"][col] - want[col]) < 1e-9, col
        assert r[col] == float(f"{want[col]:.1f}"), col
    # the leaderboard's Overall = Domain Avg = Difficulty Avg
    assert abs((want["Easy"] + want["Normal"] + want["Hard"]) / 3 - r["unrounded"]["Overall"]) < 1e-9
    assert r["n_prompts"] == {"chat": 7, "math": 6, "code": 5, "safety": 7} and r["complete"] is True
    assert row(summarize(*data, domains, subsets, names), "m", None)["complete"] is False  # not the full benchmark
    # the command gives the same row from the file
    res = run("leaderboard", path, "--json")
    assert res.exit_code == 0, res.output
    got = json.loads(res.stdout)[0]
    assert got["Model"] == "res" and all(got[c] == float(f"{want[c]:.1f}") for c in COLUMNS[1:])


def acc(h, n, e, prompts=100):
    return {"hard": h, "normal": n, "easy": e, "avg": (h + n + e) / 3, "n_prompts": prompts}


def small_rows():
    a = {"domains": {"chat": acc(.5, .6, .7), "math": acc(.3, .6, .9), "code": acc(.2, .5, .8),
                     "safety": acc(.9, .9, .9)}}
    b = {"domains": {"chat": acc(.4, .5, .6), "code": acc(.1, .2, .3), "safety": acc(.7, .8, .9)}}
    return [row(a, "a", None), row(b, "b|x", None)]


def test_markdown_and_csv_text():
    rows = small_rows()
    assert to_markdown(rows) == (
        "| Model | Chat | Math | Code | Safety | Easy | Normal | Hard | Overall |\n"
        "|:------|-----:|-----:|-----:|-------:|-----:|-------:|-----:|--------:|\n"
        "| a     | 60.0 | 60.0 | 50.0 |   90.0 | 82.5 |   65.0 | 47.5 |    65.0 |\n"
        "| b\\|x  | 50.0 |    - | 20.0 |   80.0 | 60.0 |   50.0 | 40.0 |    50.0 |\n")
    assert to_csv(rows) == ("Model,Chat,Math,Code,Safety,Easy,Normal,Hard,Overall\n"
                            "a,60.0,60.0,50.0,90.0,82.5,65.0,47.5,65.0\n"
                            "b|x,50.0,,20.0,80.0,60.0,50.0,40.0,50.0\n")
    assert rows[1]["Math"] is None and rows[1]["unrounded"]["Math"] is None


def test_warnings_for_missing_and_partial_domains():
    full = {"domains": {"chat": acc(.5, .5, .5, 129), "math": acc(.5, .5, .5, 529), "code": acc(.5, .5, .5, 228),
                        "safety": acc(.5, .5, .5, 441)}}
    assert warnings(full, "m") == []
    assert row(full, "m", None)["complete"] is True
    s = {"domains": {"chat": acc(.5, .5, .5, 129), "code": acc(.5, .5, .5, 10), "safety": acc(.5, .5, .5, 284)},
         "file_domains": {"chat": acc(.5, .5, .5, 129), "code": acc(.5, .5, .5, 10),
                          "safety-refuse": acc(.5, .5, .5, 284)}}
    w = warnings(s, "m")
    assert len(w) == 3, w
    assert w[0].startswith("m: math missing: Math is '-'; Easy, Normal, Hard and Overall average the 3 domain(s)")
    assert "potential score mismatch" in w[0]
    assert w[1].startswith("m: code partial: 10 of the benchmark's 228 prompts;")
    assert w[2].startswith("m: safety partial: 284 of the benchmark's 441 prompts (safety-refuse 284 of 284, "
                           "safety-response missing);")
    assert all("\n" not in x for x in w)
    # counts given by the caller: a 10-prompt code domain is then whole
    assert len(warnings(s, "m", {"chat": 129, "math": 1, "code": 10, "safety": 284})) == 1
    # more prompts than the benchmark holds
    assert "more than the benchmark's 129" in warnings({"domains": {**full["domains"], "chat": acc(.5, .5, .5, 130)}},
                                                       "m")[0]


def write_run(folder, items, model=None, summary=None):
    folder.mkdir()
    write_json(folder / "results.json", items)
    if summary is not None:
        write_json(folder / "summary.json", summary)
    if model is not None:
        write_json(folder / "run.json", {"options": {"model": model}})
    return folder


def test_command_on_run_folders(tmp_path):
    items = synthetic_items()
    kind, *data, domains, subsets, names = read_results(write_json(tmp_path / "r.json", items))
    summary = summarize(*data, domains, subsets, names)
    summary["domains"]["chat"]["avg"] = 0.123  # proves summary.json is what gets read
    a = write_run(tmp_path / "run-a", items, "org/reward-a", summary)
    b = write_run(tmp_path / "run-b", items, "/models/ckpt/reward-b/")  # no summary.json: results.json again
    c = write_run(tmp_path / "run-c", items)  # no run.json: the folder's name
    out = tmp_path / "out" / "board"
    res = run("leaderboard", a, b, c, "--output", out)
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0].startswith("| Model ") and len(lines) == 5
    assert lines[2].startswith("| org/reward-a | 12.3 |")
    assert lines[3].startswith("| reward-b     |") and lines[4].startswith("| run-c        |")
    assert lines[3].split("|")[2] != lines[2].split("|")[2] and lines[3].split("|")[3:] == lines[4].split("|")[3:]
    # every domain is far below the benchmark's size: 4 warnings per run, one line each, on stderr
    warns = [x for x in res.stderr.splitlines() if x.startswith("rmbench-fast: warning: ")]
    assert len(warns) == 12 and all("partial" in x for x in warns)
    assert (out.parent / "board.md").read_text() == res.stdout
    assert (out.parent / "board.csv").read_text().splitlines()[2].startswith("reward-b,")


def test_command_on_official_results_file(tmp_path):
    # the official per-domain file: no domain key, the domain from the file name
    items = [{"id": i, "prompt": "q", "score_chosen": [1.0, 2.0, 3.0], "score_rejected": [0.5, 2.5, 3.5]}
             for i in range(4)]
    p = write_json(tmp_path / "chat_filtered_my-rm.json", items)
    res = run("leaderboard", p)
    assert res.exit_code == 0, res.output
    # matrix [[1,0,0],[1,0,0],[1,1,0]]: hard 0, normal 1/3, easy 1; Chat = 4/9
    assert res.stdout.splitlines()[2] == ("| chat_filtered_my-rm | 44.4 |    - |    - |      - | 100.0 |   33.3 | "
                                         " 0.0 |    44.4 |")
    warns = res.stderr.splitlines()
    assert [w.split(": ")[3].split(" ")[0] for w in warns] == ["chat", "math", "code", "safety"]
    assert "math missing" in warns[1] and "average the 1 domain(s)" in warns[1]


def test_json_keys(tmp_path):
    p = write_json(tmp_path / "res.json", synthetic_items())
    res = run("leaderboard", p, p, "--json")
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)
    assert len(rows) == 2
    assert list(rows[0]) == [*COLUMNS, "unrounded", "n_prompts", "complete"]
    assert list(rows[0]["unrounded"]) == list(COLUMNS[1:])
    assert rows[0]["n_prompts"] == {"chat": 7, "math": 6, "code": 5, "safety": 7}


def test_command_errors_are_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    res = run("leaderboard", tmp_path / "empty")
    assert res.exit_code == 2 and "without summary.json or results.json" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    # items without any domain pool into "all": no leaderboard row
    p = write_json(tmp_path / "scores.json", [{"id": 1, "score_chosen": [1, 2, 3], "score_rejected": [0, 0, 0]}])
    res = run("leaderboard", p)
    assert res.exit_code == 2 and "no leaderboard domain" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    bad = write_run(tmp_path / "bad", [], summary=[1, 2])
    res = run("leaderboard", bad)
    assert res.exit_code == 2 and "must be a JSON object" in res.stderr


def test_judge_cells_folder(tmp_path):
    # a judge's results (cells) recomputed through summarize_cells
    items = [{"id": i, "domain": d, "cells": [[0.5, 0.0, 0.0], [1.0, 0.5, 0.0], [1.0, 1.0, 0.5]]}
             for d in FILE_DOMAINS for i in range(2)]
    folder = write_run(tmp_path / "judge-run", items, "gpt-judge")
    res = run("leaderboard", folder, "--json")
    assert res.exit_code == 0, res.output
    r = json.loads(res.stdout)[0]
    assert r["Model"] == "gpt-judge"
    assert (r["Easy"], r["Normal"], r["Hard"], r["Overall"], r["Chat"]) == (100.0, 50.0, 0.0, 50.0, 50.0)

"""A judge's answers without a verdict in every table (issue 32): the printed table, report.md, the
leaderboard and compare show summary.json's `invalid_rate` and `failed_rate` as "no verdict" and
"failed", with a note above 5%; `accuracy` copies them from the summary.json beside the results. The
run folder is written here as `judge` writes it, its rates by judges.validity.rates itself, and every
rate is checked against a count of the asks made by hand."""

import json
import re
from types import SimpleNamespace

import numpy as np
import pytest
from click.testing import CliRunner

from rmbench_fast.cli.main import main
from rmbench_fast.judges import validity
from rmbench_fast.results.files import write_cell_results
from rmbench_fast.results.metrics import summarize_cells
from rmbench_fast.results.verdicts import INVALID_NOTE_RATE

COUNTS = {"chat": 4, "math": 4, "code": 4, "safety-refuse": 3, "safety-response": 2}
# per file domain, the causes of its asks (4 asks a prompt): chat all cut, code clean; one of math's asks
# fails (below); a quarter of safety-response's have no verdict
CAUSES = {"chat": [validity.CUT] * 4, "math": [None, None, None, None], "code": [None] * 4,
          "safety-refuse": [None] * 4, "safety-response": [validity.NO_VERDICT, None, None, None]}


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    root = tmp_path_factory.mktemp("judged")
    domains = [d for d, n in COUNTS.items() for _ in range(n)]
    samples = [SimpleNamespace(item={"id": i, "prompt": "q"}, domain=d) for i, d in enumerate(domains)]
    asks, causes = [], []
    for p, d in enumerate(domains):
        for k, c in enumerate(CAUSES[d]):
            asks.append(SimpleNamespace(prompt=p))
            causes.append(validity.FAILED if (d == "math" and p == domains.index("math") and k == 0) else c)
    cells = (np.random.default_rng(0).random((len(domains), 3, 3)) < 0.5).astype(float)
    summary = summarize_cells(cells, domains)
    summary.update(validity.rates(asks, causes, domains, list(summary["domains"])))
    summary["intervals"] = None
    out = root / "judge-run"
    out.mkdir()
    write_cell_results(out, samples, cells, summary)
    (out / "run.json").write_text(json.dumps({"kind": "judge", "options": {"model": "judge-x", "data": "d"}}))
    copy = root / "copy.json"  # the same results, alone
    copy.write_text((out / "results.json").read_text())
    # by hand: each scoring domain's share of asks without a verdict, and of failed ones
    by_hand = {}
    for sd, files in {"chat": ["chat"], "math": ["math"], "code": ["code"],
                      "safety": ["safety-refuse", "safety-response"]}.items():
        mine = [c for a, c in zip(asks, causes) if domains[a.prompt] in files]
        by_hand[sd] = (sum(c is not None for c in mine) / len(mine),
                       sum(c == validity.FAILED for c in mine) / len(mine))
    by_hand["overall"] = (sum(c is not None for c in causes) / len(causes),
                          sum(c == validity.FAILED for c in causes) / len(causes))
    return {"out": out, "summary": summary, "by_hand": by_hand, "copy": copy}


def pct(x):
    return f"{100 * x:.1f}%"


def test_the_threshold_is_the_judge_commands():
    assert INVALID_NOTE_RATE == validity.WARN_RATE


def test_accuracy_shows_no_verdict_and_failed_columns(judged):
    res = run("accuracy", judged["out"], "--bootstrap", 0)
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    head = next(x for x in lines if x.startswith("domain"))
    assert re.split(r"\s{2,}", head.strip()) == ["domain", "prompts", "hard", "normal", "easy", "avg", "no verdict",
                                                 "failed"]
    for d, (inv, fail) in judged["by_hand"].items():
        row = next(x for x in lines if x.startswith(d + " "))
        assert row.split()[-2:] == [pct(inv), pct(fail)], d
    [note] = [x for x in lines if "without a verdict above" in x]
    high = [(d, pct(inv)) for d, (inv, _) in judged["by_hand"].items() if d != "overall" and inv > 0.05]
    assert [d for d, _ in high] == ["chat", "math", "safety"]  # code has none; math 1 failed ask of 16
    assert re.findall(r"(\w+) \((\d+\.\d%)", note) == high
    assert note.startswith("note: answers without a verdict above 5% in chat (100.0%; most common cause "
                           "cut at --max-tokens: 16)")
    got = json.loads(run("accuracy", judged["out"], "--json").stdout)
    for key in validity_keys():
        assert got[key] == judged["summary"][key], key
    # a results file alone (not a run's results.json beside its summary.json) has no such columns
    assert "no verdict" not in run("accuracy", judged["copy"], "--bootstrap", 0).stdout


def validity_keys():
    return ("asked", "invalid_rate", "failed_rate", "invalid_causes")


def test_report_leaderboard_and_compare_show_them(judged):
    out = judged["out"]
    assert run("plot", out).exit_code == 0
    report = (out / "report.md").read_text()
    header = next(x for x in report.splitlines() if x.startswith("| domain"))
    assert header.rstrip(" |").endswith("| no verdict | failed")
    chat = next(x for x in report.splitlines() if x.startswith("| chat |"))
    assert chat.rstrip(" |").endswith(f"| {pct(judged['by_hand']['chat'][0])} | {pct(judged['by_hand']['chat'][1])}")
    assert "note: answers without a verdict above 5% in chat" in report
    board = run("leaderboard", out, "--json")
    assert board.exit_code == 0, board.output
    row = json.loads(board.stdout)[0]
    inv, fail = judged["by_hand"]["overall"]
    assert row["No verdict"] == round(100 * inv, 1) and row["Failed"] == round(100 * fail, 1)
    assert re.search(r"answers without a verdict above 5% in chat", board.stderr)
    md = run("leaderboard", out).stdout.splitlines()
    assert md[0].split("|")[-3:-1] == [" No verdict ", " Failed "]
    both = run("compare", out, judged["copy"], "--bootstrap", 0)
    assert both.exit_code == 0, both.output
    assert f"answers without a verdict (each run's own prompts): A {pct(inv)} (failed {pct(fail)}), B -" \
        in both.stdout
    # a score run's summary: no such columns, no note
    plain = {k: v for k, v in judged["summary"].items() if k not in validity_keys()}
    from rmbench_fast.results.tables import format_table

    assert "no verdict" not in format_table(plain) and "without a verdict" not in format_table(plain)

"""A judge without verdicts is loud: the share of answers without a verdict and of failed requests,
per domain and overall, in summary.json, run.json and the printed table, counted here by a plain
loop over the asks; a warning line naming the most common cause; --max-invalid ends such a run
with exit status 2 and nothing written; the footer spelled out."""

import json
import re
import subprocess
import sys

import numpy as np
import pytest

from rmbench_fast.judges.options import JudgeOptions
from rmbench_fast.judges.run import judge

judge_server = pytest.importorskip("judge_server")

A = re.compile(r"<\|The Start of Assistant A's Answer\|>\n(.*)\n<\|The End of Assistant A's Answer\|>", re.S)
B = re.compile(r"<\|The Start of Assistant B's Answer\|>\n(.*)\n<\|The End of Assistant B's Answer\|>", re.S)

# chat: one chosen answer is always cut at max tokens (6 of its 36 asks); math: answers marked
# [nobox] get no verdict and a rejected answer with !400 is refused by the server (failed); code: clean
ITEMS = [
    {"id": 0, "domain": "chat", "prompt": "Name a colour.", "chosen": ["red", "deep red [cut]", "a red"],
     "rejected": ["x", "y", "zz"]},
    {"id": 1, "domain": "chat", "prompt": "Name a fruit.", "chosen": ["apple", "an apple", "apples"],
     "rejected": ["no", "n", "nah"]},
    {"id": 2, "domain": "math", "prompt": "1 + 1?", "chosen": ["two [nobox]", "it is 2", "2, of course"],
     "rejected": ["three [nobox]", "5", "eleven !400"]},
    {"id": 3, "domain": "code", "prompt": "Print hi.", "chosen": ["print('hi')", "print(\"hi\")", "print('hi') # ok"],
     "rejected": ["echo", "hi", "puts hi"]},
]


def reply(body):
    """Cut ([cut] in an answer: finish reason length), no verdict ([nobox]), else the longer answer."""
    text = body["messages"][-1]["content"]
    a, b = A.search(text).group(1), B.search(text).group(1)
    if "[cut]" in a + b:
        return "<think>Let me weigh every word of", "length"
    if "[nobox]" in a + b:
        return "Both answers have merit."
    return "\\boxed{A>B}" if len(a) > len(b) else "\\boxed{B>A}" if len(b) > len(a) else "\\boxed{A=B}"


def expected():
    """Per scoring domain and overall: (asks, invalid, failed, causes, first-shown wins, decided), by
    a plain loop over every pair in both orders."""
    out = {}
    for item in ITEMS:
        for i in range(3):
            for j in range(3):
                for a, b in ((item["chosen"][i], item["rejected"][j]), (item["rejected"][j], item["chosen"][i])):
                    for d in (item["domain"], "overall"):
                        e = out.setdefault(d, {"asked": 0, "invalid": 0, "failed": 0, "causes": {}, "first": 0,
                                               "decided": 0})
                        e["asked"] += 1
                        why = ("request failed" if "!400" in a + b else "cut at --max-tokens" if "[cut]" in a + b
                               else "no verdict found" if "[nobox]" in a + b else None)
                        if why is None:
                            e["decided"] += len(a) != len(b)
                            e["first"] += len(a) > len(b)
                            continue
                        e["invalid"] += 1
                        e["failed"] += why == "request failed"
                        e["causes"][why] = e["causes"].get(why, 0) + 1
    return out


@pytest.fixture
def server():
    pytest.importorskip("httpx2", reason="the openai backend needs httpx2 (pip install -e '.[judge]')")
    s = judge_server.start_thread(reply=reply)
    yield s
    s.stop()


@pytest.fixture
def data(tmp_path):
    path = tmp_path / "data.json"
    path.write_text(json.dumps(ITEMS))
    return str(path)


def test_rates_in_summary_and_run_json(server, data, tmp_path, caplog):
    caplog.set_level("WARNING", logger="rmbench_fast")
    o = JudgeOptions(model="judge-test", data=data, output=str(tmp_path / "out"), base_url=server.url,
                     cache_dir=str(tmp_path / "store"), failed_as_invalid=True, progress=False, bootstrap=0)
    judge(o)
    want = expected()
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    for doc in (summary, run):
        for d, e in want.items():
            pick = (lambda k: doc[k]["overall"]) if d == "overall" else (lambda k: doc[k]["domains"][d])
            assert pick("asked") == e["asked"]
            assert pick("invalid_rate") == pytest.approx(e["invalid"] / e["asked"], abs=1e-12)
            assert pick("failed_rate") == pytest.approx(e["failed"] / e["asked"], abs=1e-12)
            assert pick("invalid_causes") == e["causes"]
            assert list(pick("invalid_causes").values()) == sorted(e["causes"].values(), reverse=True)
        assert list(doc["invalid_rate"]["domains"]) == list(summary["domains"])  # the summary's domains, in order
    assert want["chat"]["invalid"] == 6 and want["math"]["failed"] == 6 and want["code"]["invalid"] == 0
    assert run["invalid"] == want["overall"]["invalid"] and run["invalid_rule"] == 0.0
    # one warning line, for the two domains above 5%, each with its most common cause
    lines = [r.getMessage() for r in caplog.records if "without a verdict" in r.getMessage()]
    assert len(lines) == 1 and "\n" not in lines[0]
    assert "chat 16.7% (cut at --max-tokens: 6 of 36)" in lines[0]
    assert "math 77.8% (no verdict found: 8 of 18)" in lines[0]
    assert "code" not in lines[0] and "--invalid 0" in lines[0]


def test_the_printed_table_and_footer(server, data, tmp_path):
    from click.testing import CliRunner

    from rmbench_fast.cli.main import main

    out = CliRunner().invoke(main, ["judge", "--model", "judge-test", "--base-url", server.url, "--data", data,
                                    "--cache-dir", str(tmp_path / "store"), "--output", str(tmp_path / "out"),
                                    "--failed-as-invalid", "--bootstrap", "0", "-q"])
    assert out.exit_code == 0, out.output
    want = expected()
    rows = {}
    for line in out.output.split("answers without a verdict (each counts as --invalid 0):\n", 1)[1].splitlines():
        m = re.match(r"(\w+)\s+([\d.]+)%\s+([\d.]+)%\s+(.*)$", line)
        if m:
            rows[m.group(1)] = (float(m.group(2)), float(m.group(3)), m.group(4))
    assert set(rows) == set(want)
    for d, e in want.items():
        top = max(e["causes"].items(), key=lambda kv: kv[1]) if e["causes"] else None
        assert rows[d] == (round(100 * e["invalid"] / e["asked"], 1), round(100 * e["failed"] / e["asked"], 1),
                           "-" if top is None else f"{top[0]} ({top[1]})"), d
    o = want["overall"]
    assert (f"position bias: the first answer won {100 * o['first'] / o['decided']:.1f}% of decided pairs "
            f"({o['decided']})") in out.output
    assert "first-shown wins" not in out.output


def test_max_invalid_fails_and_writes_nothing(server, data, tmp_path):
    from click.testing import CliRunner

    from rmbench_fast.cli.main import main

    args = ["judge", "--model", "judge-test", "--base-url", server.url, "--data", data, "--cache-dir",
            str(tmp_path / "store"), "--output", str(tmp_path / "out"), "--failed-as-invalid", "--bootstrap", "0", "-q"]
    out = CliRunner().invoke(main, args + ["--max-invalid", "0.5"])
    assert out.exit_code == 2
    assert out.output.strip().splitlines() == [
        "rmbench-fast: error: --max-invalid 0.5: answers without a verdict in math 77.8% (no verdict found: 8 of "
        "18); nothing written: check that --protocol, --template or --verdict-regex match how the judge writes "
        "its verdict (judgements.jsonl holds every answer)"]
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    sent = server.total
    # the generations were kept: a rerun with a limit above every domain's rate writes its numbers, asking nothing
    ok = CliRunner().invoke(main, args + ["--max-invalid", "0.8"])
    assert ok.exit_code == 0, ok.output
    assert server.total == sent + 6  # only the failed requests (never kept) again
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["invalid_rate"]["domains"]["math"] == \
        pytest.approx(14 / 18)
    bad = CliRunner().invoke(main, args + ["--max-invalid", "5"])
    assert bad.exit_code == 2 and "--max-invalid" in bad.output
    helped = CliRunner().invoke(main, ["judge", "--help"])
    assert "--max-invalid RATE" in helped.output


def tiny_judge(tmp_path):
    from rmbench_fast.tiny.models import CHAT_TEMPLATE, build_model, llama_config, save_model, train_tokenizer

    tok = train_tokenizer(["a judge reads two answers"] * 5, vocab_size=300, chat_template=CHAT_TEMPLATE)
    return save_model(build_model("lm", llama_config(vocab_size=len(tok), hidden=32, layers=1, heads=4), 0), tok,
                      tmp_path / "judge")


def test_an_in_process_judge_cut_at_max_tokens_is_loud(tmp_path, data_path):
    """The case of the issue: every answer of a tiny in-process judge is cut at --max-tokens 3. The
    real command says so on stderr, summary.json holds the rates, and --max-invalid refuses the run."""
    from click.testing import CliRunner

    from rmbench_fast.cli.main import main

    model = tiny_judge(tmp_path)
    args = ["judge", "--model", str(model), "--data", data_path, "--limit", "1", "--domains", "chat", "--max-tokens",
            "3", "--cache-dir", str(tmp_path / "store"), "--bootstrap", "0", "-q"]
    done = subprocess.run([sys.executable, "-m", "rmbench_fast", *args, "--output", str(tmp_path / "a")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    judgements = [json.loads(x) for x in (tmp_path / "a" / "judgements.jsonl").read_text().splitlines()]
    cut = sum(x["finish_reason"] == "length" and x["verdict"] is None for x in judgements)
    assert len(judgements) == 18 and all(x["verdict"] is None for x in judgements) and cut > 9
    assert f"chat 100.0% (cut at --max-tokens: {cut} of 18)" in done.stderr
    assert "raise --max-tokens" in done.stderr
    assert re.search(rf"^chat\s+100\.0%\s+0\.0%\s+cut at --max-tokens \({cut}\)$", done.stdout, re.M), done.stdout
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert summary["invalid_rate"] == {"overall": 1.0, "domains": {"chat": 1.0}}
    assert summary["failed_rate"] == {"overall": 0.0, "domains": {"chat": 0.0}}
    assert sum(summary["invalid_causes"]["overall"].values()) == 18
    assert summary["overall"] == 0.0 and np.all(np.array(summary["matrices"]["chat"]) == 0)
    refused = CliRunner().invoke(main, args + ["--output", str(tmp_path / "b"), "--max-invalid", "0.05"])
    assert refused.exit_code == 2 and "--max-invalid 0.05: answers without a verdict in chat 100.0%" in refused.output
    assert not (tmp_path / "b" / "summary.json").exists()

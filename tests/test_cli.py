import json
import os
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import make_item, write_json
from rmbench_fast.cli.main import main
from reference import official_summary


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_help_everywhere():
    for cmd in ([], ["accuracy"], ["data"], ["data", "stats"], ["data", "validate"], ["score"], ["sweep"], ["demo"],
                ["plot"], ["cache"], ["cache", "info"], ["cache", "clear"]):
        r = run(*cmd, "--help")
        assert r.exit_code == 0 and "Usage" in r.output


@pytest.mark.parametrize("id_style", ["int", "str"])
def test_accuracy_json_matches_official(tmp_path, id_style):
    rng = np.random.default_rng(3)
    domains = ["chat", "code", "math", "safety-refuse", "safety-response"]
    results = []
    for p in range(200):
        d = domains[p % 5]
        c, r = rng.integers(0, 4, 3), rng.integers(0, 4, 3)  # many ties
        item = {"id": p if id_style == "int" else f"{d}/{p}", "prompt": "q",
                "score_chosen": c.astype(float).tolist(), "score_rejected": r.astype(float).tolist()}
        if id_style == "int":
            item["domain"] = d
        results.append({**item, "_domain": d})
    write_json(tmp_path / "res.json", [{k: v for k, v in x.items() if k != "_domain"} for x in results])
    r = run("accuracy", tmp_path / "res.json", "--json")
    assert r.exit_code == 0, r.output
    ours = json.loads(r.output)
    ref = official_summary([{**x, "domain": x["_domain"]} for x in results])
    assert abs(ours["overall"] - ref["overall"]) <= 1e-12
    for d in ("chat", "code", "math", "safety"):
        for k in ("hard", "normal", "easy", "avg"):
            assert abs(ours["domains"][d][k] - ref[d][k]) <= 1e-12


def test_accuracy_table_and_official_file_name(tmp_path):
    # an official per-domain results file: no domain key, int ids, domain from the file name
    items = [{**make_item(i), "score_chosen": [1.0, 2.0, 3.0], "score_rejected": [0.5, 2.5, 2.0]} for i in range(3)]
    p = write_json(tmp_path / "code_filtered_mymodel_ref_free_20250101.json", items)
    r = run("accuracy", p)
    assert r.exit_code == 0, r.output
    assert "code" in r.output and "overall" in r.output
    ours = json.loads(run("accuracy", p, "--json").output)
    assert list(ours["domains"]) == ["code"]


@pytest.mark.parametrize("content, expected", [
    ([{"score_chosen": [1, 2, 3]}], "key 'score_rejected': missing key"),
    ([{"score_chosen": [1, 2], "score_rejected": [1, 2, 3]}], "list of 3 scores"),
    ([{"score_chosen": [1, "x", 3], "score_rejected": [1, 2, 3]}], "score_chosen[1]"),
    ("[{\"score_chosen\": [1, NaN, 3], \"score_rejected\": [1, 2, 3]}]", "not a finite number"),
])
def test_accuracy_bad_results(tmp_path, content, expected):
    p = tmp_path / "r.json"
    p.write_text(content if isinstance(content, str) else json.dumps(content))
    r = run("accuracy", p)
    assert r.exit_code == 2
    assert expected in r.output


def test_validate_ok_and_stats(shared_data):
    r = run("data", "validate", shared_data)
    assert r.exit_code == 0 and "798 prompts" in r.output
    r = run("data", "stats", shared_data, "--json", "--domains", "chat")
    assert json.loads(r.output)["domains"]["chat"]["n_prompts"] == 129


@pytest.mark.slow
def test_validate_bad_file_real_process(tmp_path):
    """The installed console script: one line on stderr, status 2, no traceback."""
    p = tmp_path / "chat_filtered.json"
    p.write_text(json.dumps([make_item(0), {**make_item(1), "chosen": ["a", "b", 7]}]))
    proc = subprocess.run([sys.executable, "-m", "rmbench_fast.cli.main", "data", "validate", str(p)],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert str(p) in lines[0] and "item 1" in lines[0] and "chosen[2]" in lines[0]


def test_score_writes_official_format(tmp_path):
    from rmbench_fast.tiny.models import build_model, llama_config, save_model, train_tokenizer

    data = tmp_path / "chat_filtered.json"
    data.write_text(json.dumps([make_item(i) for i in range(5)]))
    tok = train_tokenizer(["What is 2 + 2? The answer is 4."] * 3, vocab_size=280)
    model = save_model(build_model("rm", llama_config(len(tok), hidden=16, layers=1, heads=2), seed=0), tok,
                       tmp_path / "rm")
    out = tmp_path / "run"
    r = run("score", "--model", model, "--data", data, "--output", out, "--quiet")
    assert r.exit_code == 0, r.output
    assert "overall" in r.output and "tokens/s" in r.output
    results = json.loads((out / "results.json").read_text())
    assert len(results) == 5 and results[0]["domain"] == "chat" and len(results[0]["score_chosen"]) == 3
    assert results[3]["id"] == 3 and results[3]["prompt"] == make_item(3)["prompt"]
    summary = json.loads((out / "summary.json").read_text())
    run_info = json.loads((out / "run.json").read_text())
    assert run_info["n_sequences"] == 30 and run_info["mode"] == "rm" and run_info["truncated"]["sequences"] == 0
    assert run_info["real_tokens"] <= run_info["padded_tokens"]
    again = json.loads(run("accuracy", out, "--json").output)
    assert again["overall"] == summary["overall"]


def test_score_bad_options_one_line(tmp_path):
    r = run("score", "--model", tmp_path / "missing-model", "--data", "rmbench_fast/cli/demo_data/rmbench_demo.json")
    assert r.exit_code == 2
    assert "missing-model: no such folder" in r.output


def test_demo(tmp_path):
    r = run("demo", "--output", tmp_path / "demo", "--cache-dir", tmp_path / "cache", "--quiet")
    assert r.exit_code == 0, r.output
    assert "RM mode" in r.output and "DPO mode" in r.output and "random weights" in r.output
    for mode in ("rm", "dpo"):
        assert (tmp_path / "demo" / mode / "summary.json").is_file()
    from rmbench_fast.cli.demo import DEMO_VERSION

    models = tmp_path / "cache" / f"demo-models-v{DEMO_VERSION}"
    assert (models / "COMPLETE").is_file()
    # ordinary files (the umask's modes), readable by others: not a temporary folder's 0700 / 0600
    mask = os.umask(0)
    os.umask(mask)
    for p in [models, *models.rglob("*")]:
        assert p.stat().st_mode & 0o777 == (0o777 if p.is_dir() else 0o666) & ~mask, p


@pytest.mark.slow
def test_console_exit_keeps_every_output(tmp_path):
    """The console entry leaves without interpreter teardown (os._exit): the status is still the
    command's (0, click's usage error 2) and what it printed to a pipe is all there."""
    p = tmp_path / "chat_filtered.json"
    p.write_text(json.dumps([make_item(i) for i in range(40)]))
    proc = subprocess.run([sys.executable, "-m", "rmbench_fast.cli.main", "data", "stats", str(p), "--json"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["domains"]["chat"]["n_prompts"] == 40
    proc = subprocess.run([sys.executable, "-m", "rmbench_fast.cli.main", "--version"], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.startswith("rmbench-fast, version")
    proc = subprocess.run([sys.executable, "-m", "rmbench_fast.cli.main", "stats"], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1

"""Reports that say what they report: report.md (a Markdown table, the model, mode, data and
--limit), the printed tables, the notes when the overall is not the paper's four-domain number,
the 95% intervals in summary.json, tables and pictures, model names on a sweep's axis, and
results.jsonl."""

import json
import re

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import make_item, write_json
from rmbench_fast.cli.main import main

# The full benchmark, as RM-Bench's data files hold it (counted in ../shared/rm-bench/README.md):
# what a summary must have, per domain, for its overall to be the paper's number.
PAPER_PROMPTS = {"chat": 129, "math": 529, "code": 228, "safety-refuse": 284, "safety-response": 157}
FILE_DOMAINS = ["chat", "code", "math", "safety-refuse", "safety-response"]


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """Data (3 prompts per file domain), a reward model, two DPO policies without steps and a reference."""
    from rmbench_fast.tiny.models import build_model, llama_config, save_model, train_tokenizer

    root = tmp_path_factory.mktemp("reports")
    data = write_json(root / "data.json", [make_item(i, d) for d in FILE_DOMAINS for i in range(3)])
    tok = train_tokenizer([json.dumps(make_item(i)) for i in range(30)], vocab_size=300)
    cfg = dict(vocab_size=len(tok), hidden=16, layers=1, heads=2)
    out = {"root": root, "data": str(data)}
    out["rm"] = str(save_model(build_model("rm", llama_config(**cfg), 0), tok, root / "tiny-rm"))
    for name, seed in (("alpha-policy", 1), ("beta-policy", 2), ("reference", 3)):
        out[name] = str(save_model(build_model("lm", llama_config(**cfg), seed), tok, root / name))
    return out


@pytest.fixture(scope="module")
def limited(tiny):
    """`score --limit 2` of the reward model, then `plot`: its folder and the score command's output."""
    out = tiny["root"] / "limited"
    r = run("score", "--model", tiny["rm"], "--data", tiny["data"], "--output", out, "--limit", 2, "-q")
    assert r.exit_code == 0, r.output
    assert run("plot", out).exit_code == 0
    return out, r.output


def markdown_tables(text):
    """Every Markdown table of `text`: a list of rows, each a list of cell texts (header first, rule dropped)."""
    tables, cur = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|") and line.endswith("|"):
            cells = [c.strip() for c in line[1:-1].split("|")]
            if not all(re.fullmatch(r":?-+:?", c) for c in cells):
                cur.append(cells)
        elif cur:
            tables.append(cur)
            cur = []
    return tables


def pct(x):
    return f"{100 * x:.2f}"


def test_report_is_a_markdown_table_that_names_model_mode_data_and_limit(tiny, limited):
    out, _ = limited
    report = (out / "report.md").read_text()
    summary = json.loads((out / "summary.json").read_text())
    assert "```" not in report  # no code block around a text table any more
    assert tiny["rm"] in report and tiny["data"] in report
    assert "**mode**: `rm`" in report and "first 2 prompts per file domain" in report
    [table] = markdown_tables(report)
    assert table[0][:6] == ["domain", "prompts", "hard", "normal", "easy", "avg"]
    assert "|:---|---:|" in report  # the rule of a real table, numbers right-aligned
    by_name = {row[0].strip("*"): row for row in table[1:]}
    assert list(by_name) == ["chat", "math", "code", "safety", "overall"]
    for d, acc in summary["domains"].items():
        row = by_name[d]
        assert row[1] == str(acc["n_prompts"])
        for k, cell in zip(("hard", "normal", "easy", "avg"), row[2:6]):
            assert cell.split(" ")[0] == pct(acc[k])
    assert [c.split(" ")[0] for c in by_name["overall"][2:6]] == [pct(summary[k]) for k in ("hard", "normal", "easy",
                                                                                              "overall")]
    for png in ("matrices.png", "scores.png"):
        assert f"]({png})" in report and (out / png).read_bytes()[:4] == b"\x89PNG"


def test_intervals_in_summary_tables_and_report(tiny, limited):
    from rmbench_fast.results.intervals import metric_names, metric_values

    out, printed = limited
    summary = json.loads((out / "summary.json").read_text())
    iv = summary["intervals"]
    assert iv["method"]["resamples"] == 10_000 and iv["method"]["level"] == 0.95
    values = metric_values(summary)
    assert set(iv["metrics"]) == set(metric_names(summary)) == set(values)
    for name, v in values.items():
        assert iv["metrics"][name]["low"] <= v <= iv["metrics"][name]["high"], name
    lo, hi = iv["metrics"]["overall"]["low"], iv["metrics"]["overall"]["high"]
    span = f"[{100 * lo:.1f}, {100 * hi:.1f}]"
    half = f"±{50 * (hi - lo):.1f}"
    overall_line = next(line for line in printed.splitlines() if line.startswith("overall"))
    assert overall_line.split()[-3:] == [half, *span.split()] and pct(summary["overall"]) in overall_line
    assert "95% interval" in printed and "10,000 resamples" in printed
    # 2 prompts a file domain: every domain's interval is too coarse to trust, which the method and tables say
    assert iv["method"]["min_prompts_for_intervals"] == 10
    assert iv["method"]["small_domains"] == ["chat", "math", "code", "safety"]
    # each domain with its small files and their counts (safety's row pools two files of 2: it says so)
    small = ("note: intervals of chat (2 prompts), math (2 prompts), code (2 prompts), safety (safety-refuse 2 "
             "prompts, safety-response 2 prompts) understate the uncertainty")
    assert small in printed and small in (out / "report.md").read_text()
    [table] = markdown_tables((out / "report.md").read_text())
    assert table[0][-1] == "95% interval of avg"
    assert table[-1][-1] == span and table[-1][-2] == f"{pct(summary['overall'])} {half}"
    # the same run's numbers by `accuracy`, which reads the folder and its run.json
    acc = run("accuracy", out)
    assert acc.exit_code == 0 and f"model: {tiny['rm']}" in acc.output and overall_line in acc.output


def test_without_bootstrap_no_interval_anywhere(tiny, tmp_path):
    from rmbench_fast.results.metrics import format_table

    r = run("score", "--model", tiny["rm"], "--data", tiny["data"], "--output", tmp_path / "o", "--bootstrap", 0, "-q")
    assert r.exit_code == 0, r.output
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["intervals"] is None
    assert "±" not in r.output and "interval" not in format_table(summary)


@pytest.mark.parametrize("option", [("--domains", "chat"), ("--limit", "1")])
def test_a_partial_run_says_its_overall_is_not_the_papers(tiny, tmp_path, option):
    out = tmp_path / "partial"
    r = run("score", "--model", tiny["rm"], "--data", tiny["data"], "--output", out, *option, "-q")
    assert r.exit_code == 0, r.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] is False and "not the paper's four-domain" in summary["note"]
    assert "note: overall is not the paper's four-domain" in r.output
    if option[0] == "--domains":
        assert "math, code, safety missing" in summary["note"] and "domains: chat" in r.output
    else:
        assert "chat has 1 of its 129 prompts" in summary["note"]
        assert "limit: first 1 prompts per file domain" in r.output
    assert run("plot", out).exit_code == 0
    assert "not the paper's four-domain" in (out / "report.md").read_text()


def full_benchmark(seed=0, drop=None):
    """Random scores for exactly the paper's prompt counts (one prompt fewer in domain `drop`)."""
    rng = np.random.default_rng(seed)
    domains = [d for d, n in PAPER_PROMPTS.items() for _ in range(n - (d == drop))]
    return rng.normal(size=(len(domains), 3)), rng.normal(size=(len(domains), 3)), domains


def test_a_full_count_summary_has_no_note_and_one_prompt_less_has():
    from rmbench_fast.results.metrics import format_table, summarize

    full = summarize(*full_benchmark())
    assert full["complete"] is True and full["note"] is None
    assert "note" not in format_table(full)
    short = summarize(*full_benchmark(drop="safety-response"))
    assert short["complete"] is False and "safety has 440 of its 441 prompts" in short["note"]
    assert "note: overall is not the paper's" in format_table(short)
    other = summarize(*full_benchmark()[:2], ["all"] * 1327)  # items without a domain pool into 'all'
    assert other["complete"] is False and "'all'" in other["note"]


def test_the_note_checks_each_safety_file_and_more_prompts_than_the_benchmark():
    from rmbench_fast.results.metrics import format_table, summarize

    chosen, rejected, domains = full_benchmark()
    # safety's 441 prompts, but 300 + 141 instead of 284 + 157: safety's weights are not the paper's
    first = domains.index("safety-response")
    moved = ["safety-refuse" if first <= k < first + 16 else d for k, d in enumerate(domains)]
    printed = format_table(summarize(chosen, rejected, moved))
    assert "safety has the benchmark's number of prompts but not its files' (safety-refuse has 300 (the " \
           "benchmark's 284), safety-response has 141 (the benchmark's 157))" in printed
    no_response = [d != "safety-response" for d in domains]
    pick = np.flatnonzero(no_response)
    printed = format_table(summarize(chosen[pick], rejected[pick], [domains[i] for i in pick]))
    assert "safety has 284 of its 441 prompts (safety-response missing)" in printed
    more = summarize(*full_benchmark()[:2], ["chat"] * 130 + domains[130:])  # one math prompt labelled chat
    assert more["complete"] is False and "chat has 130 prompts, more than the benchmark's 129" in more["note"]


def test_notes_without_resamples_or_with_small_domains():
    from rmbench_fast.results.tables import notes

    summary = {"domains": {"chat": {"n_prompts": 3}}, "file_domains": {"chat": {"n_prompts": 3}},
               "intervals": {"method": {"level": 0.95}, "metrics": {"overall": {"low": 0.1, "high": 0.2}}}}
    out = notes(summary)  # a summary written before intervals named small domains, without resamples
    assert "(? resamples, seed ?)" in out[-1]
    assert "note: intervals of chat (3 prompts) understate the uncertainty" in out[1]
    summary["intervals"]["method"].update(resamples=500, small_domains=[])
    assert not any("understate" in line for line in notes(summary)) and "(500 resamples" in notes(summary)[-1]


def test_sweep_of_two_models_names_them_on_the_axis(tiny, tmp_path, monkeypatch):
    import rmbench_fast.results.plots as plots
    from rmbench_fast.results.plots import sweep_figure, sweep_table

    out = tmp_path / "sweep"
    r = run("sweep", "--model", tiny["alpha-policy"], "--model", tiny["beta-policy"], "--ref-model", tiny["reference"],
            "--data", tiny["data"], "--output", out, "--limit", 1, "-q")
    assert r.exit_code == 0, r.output
    rows = json.loads((out / "sweep.json").read_text())["checkpoints"]
    assert [r["step"] for r in rows] == [None, None]
    summaries = [json.loads((out / row["dir"] / "summary.json").read_text()) for row in rows]
    fig = sweep_figure(rows, "about", [s["intervals"] for s in summaries])
    for ax in fig.axes:
        assert [t.get_text() for t in ax.get_xticklabels()] == ["alpha-policy", "beta-policy"]
        assert ax.get_xlabel() == "model"
    note = json.loads((out / rows[0]["dir"] / "summary.json").read_text())["note"]
    assert "chat has 1 of its 129 prompts" in note  # a --limit 1 sweep: its overall is not the paper's number
    assert fig.get_suptitle() == "about"  # no note given
    titles = {}
    real = plots._save
    monkeypatch.setattr(plots, "_save", lambda fig, path, want: titles.update({path.name: fig.get_suptitle()})
                        or real(fig, path, want))
    (out / "sweep.png").unlink()
    plots.plot_run(out)  # the picture `sweep` draws, drawn again
    assert "note: overall is not the paper's four-domain" in titles["sweep.png"]
    assert " ".join(titles["sweep.png"].split()).endswith(" ".join(f"note: {note}".split()))
    printed = sweep_table(rows, root=out)  # what `sweep` prints, given its folder
    assert printed.startswith("model: 2 model(s): alpha-policy, beta-policy | mode: dpo with reference "
                              + tiny["reference"])
    report = (out / "report.md").read_text()
    assert "alpha-policy, beta-policy" in report and f"dpo with reference {tiny['reference']}" in report
    assert "first 1 prompts per file domain" in report
    [sweep_rows, *_] = markdown_tables(report)
    lo, hi = (summaries[0]["intervals"]["metrics"]["overall"][k] for k in ("low", "high"))
    assert sweep_rows[0][:4] == ["checkpoint", "step", "overall", "95% interval"]
    assert sweep_rows[1][:4] == ["alpha-policy", "-", pct(rows[0]["overall"]), f"[{100 * lo:.1f}, {100 * hi:.1f}]"]


def test_a_sweep_over_steps_draws_bands_against_step():
    from matplotlib.collections import PolyCollection

    from rmbench_fast.results.plots import sweep_figure

    rows = [{"checkpoint": f"checkpoint-{s}", "dir": f"checkpoint-{s}", "step": s, "overall": 0.5 + s / 1000,
             "hard": 0.4, "normal": 0.5, "easy": 0.6, "chat_avg": 0.55} for s in (100, 200, 300)]
    ivs = [{"metrics": {"overall": {"low": r["overall"] - 0.02, "high": r["overall"] + 0.03},
                        "chat": {"low": 0.5, "high": 0.6}}} for r in rows]
    fig = sweep_figure(rows, "a sweep", ivs)
    a1, a2 = fig.axes[:2]
    band = [c for c in a1.collections if isinstance(c, PolyCollection)]
    assert len(band) == 1 and a1.get_xlabel() == "step"  # the overall's band, against step
    ys = band[0].get_paths()[0].vertices[:, 1]
    assert ys.min() == pytest.approx(100 * ivs[0]["metrics"]["overall"]["low"])
    assert ys.max() == pytest.approx(100 * ivs[-1]["metrics"]["overall"]["high"])
    assert len([c for c in a2.collections if isinstance(c, PolyCollection)]) == 1
    # with intervals for hard / normal / easy too, each level's line has its band
    for iv, r in zip(ivs, rows):
        iv["metrics"].update({k: {"low": r[k] - 0.05, "high": r[k] + 0.05} for k in ("hard", "normal", "easy")})
    a1 = sweep_figure(rows, "a sweep", ivs).axes[0]
    bands = [c for c in a1.collections if isinstance(c, PolyCollection)]
    assert len(bands) == 4
    assert sorted(round(float(b.get_paths()[0].vertices[:, 1].min()), 6) for b in bands[1:]) == [35.0, 45.0, 55.0]


def test_sweep_table_marks_significant_differences():
    from rmbench_fast.results.plots import sweep_table

    base = {"step": None, "overall": 0.5, "hard": 0.4, "normal": 0.5, "easy": 0.6, "chat_avg": 0.5}

    def vs(diff, low, high):
        return {"baseline": "a", "metrics": {"overall": {"diff": diff, "low": low, "high": high, "p": 0.01,
                                                         "significant": low > 0 or high < 0}}}

    rows = [{**base, "checkpoint": "a", "vs_baseline": None},
            {**base, "checkpoint": "b", "vs_baseline": vs(0.031, 0.01, 0.05)},
            {**base, "checkpoint": "c", "vs_baseline": vs(-0.01, -0.03, 0.01)}]
    [table] = markdown_tables(sweep_table(rows))
    col = table[0].index("vs a")
    assert [row[col] for row in table[1:]] == ["baseline", "+3.10*", "-1.00"]
    assert "vs_baseline" not in json.dumps(table) and "vs " not in sweep_table([{**base, "checkpoint": "a"}])


def test_results_jsonl_lines_are_the_results_items(limited):
    out, _ = limited
    items = json.loads((out / "results.json").read_text())
    lines = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(lines) == len(items) == 10
    for line, item in zip(lines, items):
        assert line == {"id": item["id"], "domain": item["domain"], "subset": item["subset"],
                        "score_chosen": item["score_chosen"], "score_rejected": item["score_rejected"]}


def test_judge_cells_jsonl(tiny, tmp_path):
    from rmbench_fast.inputs.data import load_dataset
    from rmbench_fast.results.files import write_cell_results

    samples = load_dataset(tiny["data"])
    cells = np.random.default_rng(1).integers(0, 3, (len(samples), 3, 3)) / 2
    write_cell_results(tmp_path, samples, cells, {})
    items = json.loads((tmp_path / "results.json").read_text())
    lines = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert lines == [{"id": s.id, "domain": s.domain, "subset": "toy", "cells": c.tolist()}
                     for s, c in zip(samples, cells)]
    assert [x["cells"] for x in items] == [x["cells"] for x in lines]


@pytest.mark.parametrize("run_json, mode", [
    ({"mode": "rm", "scorer": "rm", "options": {"model": "m", "ref_model": None}}, "rm"),
    ({"mode": "rm", "scorer": "armorm", "options": {"model": "m"}}, "rm (adapter armorm)"),
    ({"mode": "dpo", "ref_free": None, "options": {"model": "m", "ref_model": "sft"}}, "dpo with reference sft"),
    ({"mode": "dpo", "ref_free": "norm", "options": {"model": "m", "ref_model": None}}, "dpo reference-free (norm)"),
    ({"kind": "judge", "mode": None, "protocol": {"name": "rewardbench"},
      "options": {"model": "m", "verdict": "text", "backend": None, "base_url": "http://x/v1"}},
     "judge (rewardbench protocol, text verdicts, openai backend)"),
])
def test_modes_are_named(run_json, mode):
    from rmbench_fast.results.describe import about_line, run_facts

    facts = run_facts({**run_json, "options": {"data": "d", "limit": 5, "domains": ["chat"], **run_json["options"]}})
    assert facts["mode"] == mode
    assert about_line(facts) == f"model: m | mode: {mode} | data: d | limit: first 5 prompts per file domain | " \
                                f"domains: chat"


def test_an_official_results_file_says_what_is_not_known(tmp_path):
    items = [{**make_item(i), "score_chosen": [1.0, 2.0, 3.0], "score_rejected": [0.5, 2.5, 2.0]} for i in range(3)]
    p = write_json(tmp_path / "code_filtered_mymodel.json", items)
    r = run("accuracy", p, "--bootstrap", 200)
    assert r.exit_code == 0, r.output
    assert r.output.splitlines()[0] == f"model: not recorded | mode: not recorded | data: {p} | limit: not recorded " \
                                       f"| domains: not recorded"
    assert "200 resamples" in r.output


def test_pictures_are_drawn_again_when_intervals_or_labels_change(limited, monkeypatch, tmp_path):
    import shutil

    import rmbench_fast.results.plots as plots

    out = shutil.copytree(limited[0], tmp_path / "run")
    drawn = []
    real = plots._save
    monkeypatch.setattr(plots, "_save", lambda fig, path, want: drawn.append(path.name) or real(fig, path, want))
    plots.plot_run(out)
    assert drawn == []
    summary = json.loads((out / "summary.json").read_text())
    summary["intervals"]["metrics"]["chat"]["low"] -= 0.01
    (out / "summary.json").write_text(json.dumps(summary))
    plots.plot_run(out)
    assert drawn == ["scores.png"]  # the matrices show no interval
    run_json = json.loads((out / "run.json").read_text())
    run_json["options"]["limit"] = 7
    (out / "run.json").write_text(json.dumps(run_json))
    drawn.clear()
    plots.plot_run(out)
    assert sorted(drawn) == ["matrices.png", "scores.png"]  # both name the limit

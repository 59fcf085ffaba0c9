"""Reports of sweeps and the small points of issue 32: `leaderboard` and `compare` on a sweep folder,
the sweep's pass count (K + 1, as the docs say), `score` without --output, the interval note naming
the small file, the pictures' colours, titles and colour bar, the demo's files readable, and the
leaderboard's completeness rule for safety's two files (issue 31). Tiny random-weight models."""

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import make_item, write_json
from rmbench_fast.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
FILES = ["chat", "code", "math", "safety-refuse", "safety-response"]
LEADERBOARD = {"Chat": ["chat"], "Math": ["math"], "Code": ["code"], "Safety": ["safety-refuse", "safety-response"]}


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """A real sweep folder: three tiny DPO checkpoints and a reference, swept by the command line."""
    from rmbench_fast.tiny.models import build_model, llama_config, save_model, train_tokenizer

    root = tmp_path_factory.mktemp("swept")
    data = write_json(root / "data.json", [make_item(i, d) for d in FILES for i in range(2)])
    tok = train_tokenizer([json.dumps(make_item(i)) for i in range(30)], vocab_size=300)
    cfg = dict(vocab_size=len(tok), hidden=16, layers=1, heads=2)
    for step in (10, 20, 30):
        save_model(build_model("lm", llama_config(**cfg), step), tok, root / "run" / f"checkpoint-{step}")
    ref = save_model(build_model("lm", llama_config(**cfg), 99), tok, root / "ref")
    args = ["sweep", "--checkpoints", root / "run" / "checkpoint-*", "--ref-model", ref, "--data", data,
            "--output", root / "sweep", "--no-plots", "--cache-dir", root / "store", "--bootstrap", 200, "-q"]
    first = run(*args)
    assert first.exit_code == 0, first.output
    return {"root": root, "sweep": root / "sweep", "args": args, "first": first, "data": data, "ref": ref}


def checkpoint_summaries(sweep):
    rows = json.loads((sweep / "sweep.json").read_text())["checkpoints"]
    return [(r, json.loads((sweep / r["dir"] / "summary.json").read_text())) for r in rows]


def test_the_sweeps_last_line_counts_k_plus_1_passes_as_the_docs_say(swept):
    """Three DPO checkpoints and a reference: 4 passes, first computed, then (--overwrite) all from
    the store; the docs quote the line the code prints."""
    last = swept["first"].stdout.strip().splitlines()[-1]
    assert last.startswith("4 model passes (3 checkpoints + 1 reference): 4 computed, 0 from the result store;")
    again = run(*swept["args"], "--overwrite")
    assert again.exit_code == 0, again.output
    line = again.stdout.strip().splitlines()[-1].split(";")[0]
    assert line == "4 model passes (3 checkpoints + 1 reference): 0 computed, 4 from the result store"
    meta = json.loads((swept["sweep"] / "sweep.json").read_text())
    assert (meta["model_passes"], meta["model_passes_computed"], meta["model_passes_cached"]) == (4, 0, 4)
    docs = (ROOT / "docs" / "sweeps-and-store.md").read_text()
    assert line in docs
    back = run(*swept["args"])
    assert back.stdout.strip().splitlines()[-1].startswith("all 3 checkpoints finished before, read back")


def test_leaderboard_takes_a_sweep_folder(swept):
    res = run("leaderboard", swept["sweep"], "--json")
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)
    found = checkpoint_summaries(swept["sweep"])
    assert [r["Model"] for r in rows] == ["checkpoint-10", "checkpoint-20", "checkpoint-30"]
    for got, (_, s) in zip(rows, found):  # the leaderboard's formulas, by hand from each summary.json
        by_hand = {col: 100 * s["domains"][files[0] if col != "Safety" else "safety"]["avg"]
                   for col, files in LEADERBOARD.items()}
        for col, want in by_hand.items():
            assert got["unrounded"][col] == pytest.approx(want, abs=1e-9), col
        assert got["unrounded"]["Overall"] == pytest.approx(sum(by_hand.values()) / 4, abs=1e-9)
    table = run("leaderboard", swept["sweep"], swept["sweep"] / "checkpoint-20")
    assert table.exit_code == 0 and len(table.stdout.strip().splitlines()) == 2 + 4


def test_compare_takes_a_sweep_folder_against_the_first_or_a_baseline(swept):
    sweep = swept["sweep"]
    found = checkpoint_summaries(sweep)
    folders = [str(sweep / r["dir"]) for r, _ in found]
    res = run("compare", sweep, "--bootstrap", 0, "--json", "-")
    assert res.exit_code == 0, res.output
    got = json.loads(res.stdout)
    assert list(got["runs"]) == folders
    assert [(p["a"], p["b"]) for p in got["pairs"]] == [(folders[0], folders[1]), (folders[0], folders[2])]
    for p, (_, s) in zip(got["pairs"], found[1:]):  # the same prompts: the summaries' own difference
        assert p["metrics"]["overall"]["diff"] == pytest.approx(s["overall"] - found[0][1]["overall"], abs=1e-12)
    for baseline in ("checkpoint-30", "30", folders[2]):
        res = run("compare", sweep, "--baseline", baseline, "--bootstrap", 0, "--json", "-")
        assert res.exit_code == 0, res.output
        assert list(json.loads(res.stdout)["runs"]) == [folders[2], folders[0], folders[1]], baseline
    bad = run("compare", sweep, "--baseline", "40")
    assert bad.exit_code == 2 and "40" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    # the Python API takes the same folder, and gives what the command gives
    import rmbench_fast

    api = rmbench_fast.compare(str(sweep), baseline="checkpoint-30", bootstrap=0)
    cli = json.loads(run("compare", sweep, "--baseline", "checkpoint-30", "--bootstrap", 0, "--json", "-").stdout)
    assert json.loads(json.dumps(api)) == cli
    named = rmbench_fast.compare(str(sweep), names=["dpo"], bootstrap=0)
    assert list(named["runs"]) == [f"dpo/{r['dir']}" for r, _ in found]


def test_score_without_output_says_nothing_was_saved(swept, tmp_path):
    base = ["score", "--model", swept["root"] / "run" / "checkpoint-10", "--ref-model", swept["ref"], "--data",
            swept["data"], "--cache-dir", swept["root"] / "store", "--bootstrap", 0, "-q"]
    res = run(*base)
    assert res.exit_code == 0, res.output
    said = [x for x in res.stderr.splitlines() if "nothing saved" in x]
    assert len(said) == 1 and "--output DIR" in said[0]
    saved = run(*base, "--output", tmp_path / "out")
    assert saved.exit_code == 0 and "nothing saved" not in saved.stderr
    assert (tmp_path / "out" / "summary.json").is_file()


def test_the_interval_note_names_the_small_file_and_its_count(tmp_path):
    """A safety row of 10 prompts: the note names safety-response's 4, not safety's pooled count;
    chat's 12 prompts are not small. Counted here from the file written."""
    rng = np.random.default_rng(0)
    counts = {"chat": 12, "safety-refuse": 6, "safety-response": 4}
    items = [{"id": i, "domain": d, "score_chosen": rng.normal(size=3).tolist(),
              "score_rejected": rng.normal(size=3).tolist()} for d, n in counts.items() for i in range(n)]
    path = write_json(tmp_path / "results.json", items)
    res = run("accuracy", path, "--bootstrap", 100)
    assert res.exit_code == 0, res.output
    [note] = [x for x in res.stdout.splitlines() if "understate" in x]
    small = {d: sum(x["domain"] == d for x in items) for d in counts}
    small = {d: n for d, n in small.items() if n < 10}
    assert note.startswith(f"note: intervals of safety ({', '.join(f'{d} {n} prompts' for d, n in small.items())})")
    assert "chat" not in note.split("understate")[0]
    assert re.search(r"^safety\s+10\s", res.stdout, re.M)  # the row pools 10: the note does not say 10


def test_sweep_picture_gives_each_meaning_its_own_colour_and_unbroken_titles():
    from matplotlib.colors import to_hex

    from rmbench_fast.results.plots import matrices_figure, sweep_figure

    domains = ["chat", "math", "code", "safety", "all"]
    rows = [{"checkpoint": f"checkpoint-{s}", "step": s, "overall": 0.5, "hard": 0.4, "normal": 0.5, "easy": 0.6,
             **{f"{d}_avg": 0.5 for d in domains}} for s in (1, 2)]
    path = "/data/" + "/".join(f"some-long-folder-{k}" for k in range(8)) + "/rm-bench-filtered"
    about = f"model: 2 model(s): checkpoint-1, checkpoint-2 | mode: rm | data: {path} | limit: none | domains: all"
    fig = sweep_figure(rows, about)
    colours = {}
    for ax in fig.axes:
        for line in ax.get_lines():
            colours.setdefault(to_hex(line.get_color()), set()).add(line.get_label())
    labels = {lab for labs in colours.values() for lab in labs}
    assert labels == {"overall", "hard", "normal", "easy", *domains}
    assert all(len(labs) == 1 for labs in colours.values()), colours  # one meaning per colour
    title = fig._suptitle.get_text().splitlines()
    words = set(" ".join(title).split())
    for w in ("checkpoint-1,", "checkpoint-2", "limit:"):  # no word cut, hyphens kept whole
        assert any(w in line.split() for line in title), (w, title)
    assert all(len(line) <= 130 for line in title)
    shown = next(w for w in words if w.endswith("rm-bench-filtered"))
    assert shown.startswith(".../") and path.endswith(shown[3:])  # shortened at its separators, from the left
    # matrices: the colour bar in the cells' unit, percent
    m = [[0.25, 0.5, 0.75], [0.0, 1.0, 0.5], [0.5, 0.5, 0.5]]
    summary = {"domains": {"chat": {"hard": .5, "normal": .5, "easy": .5, "avg": .5, "n_prompts": 3}},
               "matrices": {"chat": m}, "file_domains": {"chat": {"n_prompts": 3}}}
    fig = matrices_figure(summary)
    image = fig.axes[0].get_images()[0]
    assert image.get_clim() == (0, 100)
    np.testing.assert_allclose(image.get_array(), 100 * np.array(m))
    assert fig.axes[-1].get_ylabel() == "accuracy (%)"
    assert [t.get_text() for t in fig.axes[0].texts][:3] == ["25", "50", "75"]


def test_demo_model_files_are_ordinary_files(tmp_path):
    from rmbench_fast.tiny.models import build_trio, train_tokenizer

    tok = train_tokenizer(["a few words to build a vocabulary"] * 3, vocab_size=120)
    old = os.umask(0o022)
    try:
        paths = build_trio(tmp_path / "demo", tok, hidden=16, layers=1, heads=2)
        os.umask(0o027)
        other = build_trio(tmp_path / "group", tok, hidden=16, layers=1, heads=2)
    finally:
        os.umask(old)
    files = [p for p in (tmp_path / "demo").rglob("*")]
    assert any(p.name == "model.safetensors" for p in files)
    assert {oct(p.stat().st_mode & 0o777) for p in files if p.is_file()} == {"0o644"}
    assert {oct(p.stat().st_mode & 0o777) for p in [tmp_path / "demo", *files] if p.is_dir()} == {"0o755"}
    assert {oct(p.stat().st_mode & 0o777) for p in (tmp_path / "group").rglob("*") if p.is_file()} == {"0o640"}
    assert set(paths) == set(other) == {"rm", "policy", "reference"}


def full_items(refuse: int, response: int):
    """Items of the benchmark's sizes (chat 129, math 529, code 228) and the given safety split."""
    rng = np.random.default_rng(1)
    counts = {"chat": 129, "math": 529, "code": 228, "safety-refuse": refuse, "safety-response": response}
    return [{"id": i, "domain": d, "score_chosen": rng.normal(size=3).tolist(),
             "score_rejected": rng.normal(size=3).tolist()} for d, n in counts.items() for i in range(n)]


@pytest.mark.parametrize("refuse, response, complete", [(284, 157, True), (300, 141, False), (284, 150, False)])
def test_the_leaderboard_follows_summary_jsons_completeness_rule(tmp_path, refuse, response, complete):
    """300 safety-refuse + 141 safety-response pool to the benchmark's 441 but are not its files:
    summary.json, the leaderboard's row and its warnings agree (by hand: the files' own counts)."""
    from rmbench_fast.results.files import read_results
    from rmbench_fast.results.leaderboard import row, warnings
    from rmbench_fast.results.metrics import summarize

    items = full_items(refuse, response)
    by_hand = ({d: sum(x["domain"] == d for x in items) for d in FILES}
               == {"chat": 129, "code": 228, "math": 529, "safety-refuse": 284, "safety-response": 157})
    assert by_hand is complete
    kind, *data, domains, subsets, names = read_results(write_json(tmp_path / "results.json", items))
    summary = summarize(*data, domains, subsets, names)
    assert summary["complete"] is complete
    assert row(summary, "m")["complete"] is complete
    said = warnings(summary, "m")
    assert (said == []) is complete
    if refuse + response == 441 and not complete:
        assert len(said) == 1 and "safety has the benchmark's 441 prompts but not its files'" in said[0]
        assert f"safety-refuse {refuse} of 284, safety-response {response} of 157" in said[0]
    (tmp_path / "run").mkdir()
    write_json(tmp_path / "run" / "summary.json", summary)
    res = run("leaderboard", tmp_path / "run", "--json")
    assert res.exit_code == 0 and json.loads(res.stdout)[0]["complete"] is complete
    assert ("warning" in res.stderr) is not complete

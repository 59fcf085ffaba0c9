"""Hardening: bad inputs end to end (one line, status 2), out-of-memory retries, SIGKILL and resume,
safe model loading, determinism, and a fuzzed loader."""

import json
import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rmbench_fast.engine as engine
from conftest import make_item
from rmbench_fast.cli import main
from rmbench_fast.data import load_dataset
from rmbench_fast.engine import ScoreOptions, score
from rmbench_fast.errors import DataError, UsageError
from rmbench_fast.metrics import summarize
from rmbench_fast.tiny import build_model, llama_config, save_model, train_tokenizer
from test_data import BAD as BAD_DATA
from test_metrics import official_summary

DOMAINS = ["chat", "code", "math", "safety-refuse", "safety-response"]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Good and broken models and data, built once."""
    root = tmp_path_factory.mktemp("hard")
    data = root / "data.json"
    data.write_text(json.dumps([make_item(i, d) for d in DOMAINS for i in range(2)]))
    texts = [json.dumps(make_item(i)) for i in range(30)]
    tok = train_tokenizer(texts, vocab_size=300)
    other_tok = train_tokenizer(texts[::-1] + ["other words entirely"], vocab_size=300)
    cfg = dict(vocab_size=len(tok), hidden=32, layers=1, heads=4)
    w = {"root": root, "data": str(data)}
    w["rm"] = str(save_model(build_model("rm", llama_config(**cfg), 0), tok, root / "rm"))
    w["policy"] = str(save_model(build_model("lm", llama_config(**cfg), 1), tok, root / "policy"))
    w["ref"] = str(save_model(build_model("lm", llama_config(**cfg), 2), tok, root / "ref"))
    w["ref_vocab"] = str(save_model(build_model("lm", llama_config(**{**cfg, "vocab_size": len(tok) + 8}), 3), tok,
                                    root / "ref_vocab"))
    w["ref_tok"] = str(save_model(build_model("lm", llama_config(**{**cfg, "vocab_size": len(other_tok)}), 4),
                                  other_tok, root / "ref_tok"))
    no_config = root / "no_config"
    no_config.mkdir()
    (no_config / "model.safetensors").write_bytes(b"")
    w["no_config"] = str(no_config)
    m = build_model("lm", llama_config(**cfg), 5)
    m.save_pretrained(root / "no_tokenizer")
    w["no_tokenizer"] = str(root / "no_tokenizer")
    bare = train_tokenizer(texts, vocab_size=300)
    bare.eos_token = None
    w["no_eos"] = str(save_model(build_model("lm", llama_config(**cfg), 6), bare, root / "no_eos"))
    pickled = save_model(build_model("lm", llama_config(**cfg), 7), tok, root / "pickled")
    state = build_model("lm", llama_config(**cfg), 7).state_dict()
    (pickled / "model.safetensors").unlink()  # the same weights as a pickle file only
    torch.save(state, pickled / "pytorch_model.bin")
    w["pickled"] = str(pickled)
    nan = build_model("rm", llama_config(**cfg), 8)
    with torch.no_grad():
        nan.score.weight[0, 0] = float("nan")
    w["nan"] = str(save_model(nan, tok, root / "nan"))
    other = root / "other_run"
    r = CliRunner().invoke(main, ["score", "--model", w["rm"], "--data", w["data"], "--output", str(other), "-q"])
    assert r.exit_code == 0, r.output
    w["other_run"] = str(other)
    chat_tmpl = root / "missing-template.jinja"
    w["missing_template"] = str(chat_tmpl)
    return w


def score_args(w, *extra, model="policy"):
    return ["score", "--model", w[model] if model in w else model, "--data", w["data"], "-q", *extra]


# (name, argv builder, expected text in the one line)
CASES = [
    ("model path missing", lambda w: score_args(w, model=str(w["root"] / "nope")), "no such folder"),
    ("folder without config", lambda w: score_args(w, model="no_config"), "has no config.json"),
    ("tokenizer missing", lambda w: score_args(w, model="no_tokenizer"), "tokenizer"),
    ("tokenizer without eos", lambda w: score_args(w, model="no_eos"), "EOS"),
    ("vocabularies differ", lambda w: score_args(w, "--ref-model", w["ref_vocab"]), "vocabularies differ"),
    ("tokenizers differ", lambda w: score_args(w, "--ref-model", w["ref_tok"]), "tokenizers differ"),
    ("classifier as DPO policy", lambda w: score_args(w, "--mode", "dpo", model="rm"), "sequence classifier"),
    ("causal LM as reward model", lambda w: score_args(w, "--mode", "rm"), "not a sequence classifier"),
    ("classifier as reference", lambda w: score_args(w, "--ref-model", w["rm"]), "sequence classifier"),
    ("ref-free with ref-model", lambda w: score_args(w, "--ref-free", "avg", "--ref-model", w["ref"]),
     "exclude each other"),
    ("ref-model with a reward model", lambda w: score_args(w, "--ref-model", w["ref"], model="rm"), "DPO models"),
    ("other run in output", lambda w: score_args(w, "--output", w["other_run"]), "another run's results"),
    ("unknown dtype", lambda w: score_args(w, "--dtype", "float8"), "--dtype"),
    ("unknown device", lambda w: score_args(w, "--device", "tpu9"), "--device"),
    ("cuda without cuda", lambda w: score_args(w, "--device", "cuda"), "CUDA is not available"),
    ("unknown mode", lambda w: score_args(w, "--mode", "ranker"), "--mode"),
    ("zero token budget", lambda w: score_args(w, "--max-tokens-per-batch", "0"), "max-tokens-per-batch"),
    ("zero limit", lambda w: score_args(w, "--limit", "0"), "--limit"),
    ("unknown domain", lambda w: score_args(w, "--domains", "poetry"), "unknown domain 'poetry'"),
    ("missing chat template file", lambda w: score_args(w, "--chat-template", w["missing_template"]),
     "neither a built-in template"),
    ("label index out of range", lambda w: score_args(w, "--label-index", "3", model="rm"), "--label-index 3"),
    ("pickle weights", lambda w: score_args(w, model="pickled"), "--allow-pickle-weights"),
    ("NaN scores", lambda w: score_args(w, model="nan"), "not finite"),
    ("missing data", lambda w: ["score", "--model", w["policy"], "--data", str(w["root"] / "none.json")],
     "no such file"),
    ("unknown command", lambda w: ["rescore"], "No such command"),
    ("accuracy of a missing file", lambda w: ["accuracy", str(w["root"] / "none.json")], "no such file"),
]


@pytest.mark.parametrize("name, argv, expected", CASES, ids=[c[0] for c in CASES])
def test_bad_input_one_line(world, name, argv, expected):
    r = CliRunner().invoke(main, argv(world))
    assert r.exit_code == 2, (name, r.output, r.exception)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "Traceback" not in r.output
    assert expected in lines[0], lines[0]


@pytest.mark.parametrize("case", sorted(BAD_DATA))
def test_bad_data_one_line(tmp_path, case):
    name, content, expected = BAD_DATA[case]
    p = tmp_path / name
    p.write_text(content if isinstance(content, str) else json.dumps(content))
    r = CliRunner().invoke(main, ["data", "validate", str(p)])
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1 and expected in r.stderr


def test_debug_shows_traceback(world, monkeypatch):
    monkeypatch.setenv("RMBENCH_DEBUG", "1")
    r = CliRunner().invoke(main, score_args(world, model="no_config"))
    assert isinstance(r.exception, UsageError)


def test_pickle_weights_with_flag(world):
    run = score(ScoreOptions(model=world["pickled"], data=world["data"], allow_pickle_weights=True, progress=False,
                             cache=False))
    assert run.summary["n_prompts"] == 10


def test_out_of_memory_halves_the_batch(world, monkeypatch):
    o = ScoreOptions(model=world["rm"], data=world["data"], progress=False, cache=False)
    clean = score(o)
    real = engine.score_rm
    sizes = []

    def flaky(model, seqs, batches, *args, **kw):
        for b in batches:
            if len(b.indices) > 4:
                raise torch.cuda.OutOfMemoryError("CUDA out of memory (injected)")
            sizes.append(len(b.indices))
        return real(model, seqs, batches, *args, **kw)

    monkeypatch.setattr(engine, "score_rm", flaky)
    retried = score(o)
    assert max(sizes) <= 4 and sum(sizes) == 60
    np.testing.assert_allclose(retried.chosen, clean.chosen, atol=1e-5, rtol=0)

    def always(model, seqs, batches, *args, **kw):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory (injected)")

    monkeypatch.setattr(engine, "score_rm", always)
    with pytest.raises(UsageError, match=r"out of memory scoring sample \S+, (chosen|rejected) \w+ \(\d+ tokens\)"):
        score(o)


def test_same_command_same_bytes(world, tmp_path):
    for d in ("a", "b"):
        score(ScoreOptions(model=world["policy"], ref_model=world["ref"], data=world["data"], output=str(tmp_path / d),
                           progress=False, cache=False))
    for f in ("results.json", "summary.json"):
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes()
    ra, rb = (json.loads((tmp_path / d / "run.json").read_text()) for d in ("a", "b"))
    timing = {"wall_s", "tokenize_s", "score_s", "tokens_per_s", "options", "models"}
    assert {k: v for k, v in ra.items() if k not in timing} == {k: v for k, v in rb.items() if k not in timing}


def test_sigkill_at_random_points_then_resume(world, tmp_path):
    """A real process killed with SIGKILL mid-run; the same command again ends with the same bytes
    as an uninterrupted run."""
    big = build_model("lm", llama_config(vocab_size=300, hidden=256, layers=4, heads=4), 11)  # a few seconds of work
    tok = train_tokenizer([json.dumps(make_item(i)) for i in range(30)], vocab_size=300)
    model = str(save_model(big, tok, tmp_path / "model"))
    env = {**os.environ, "RMBENCH_FLUSH_SECONDS": "0", "RMBENCH_CACHE": str(tmp_path / "cache")}
    cmd = [sys.executable, "-m", "rmbench_fast.cli", "score", "--model", model, "--data", world["data"], "-q",
           "--max-tokens-per-batch", "200", "--ref-free", "sum"]
    clean = subprocess.run(cmd + ["--output", str(tmp_path / "clean"), "--no-cache"], env=env, capture_output=True)
    assert clean.returncode == 0, clean.stderr
    rng = random.Random(7)
    partial = tmp_path / "cache" / "store" / "partial"
    killed_mid_run = 0
    for attempt in range(2):
        proc = subprocess.Popen(cmd + ["--output", str(tmp_path / "killed")], env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        deadline = time.time() + 120
        # wait until the run has saved some progress (a partial entry), then a random moment more
        while proc.poll() is None and time.time() < deadline and not any(partial.rglob("*.npz")):
            time.sleep(0.02)
        time.sleep(rng.uniform(0.0, 0.2))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            killed_mid_run += 1
        proc.wait()
    assert killed_mid_run >= 1
    again = subprocess.run(cmd + ["--output", str(tmp_path / "killed")], env=env, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    for f in ("results.json", "summary.json"):
        assert (tmp_path / "clean" / f).read_bytes() == (tmp_path / "killed" / f).read_bytes()


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                          max_size=4), max_leaves=10)
good_item = st.builds(
    lambda i, d, c, r: {"id": i, "domain": d, "prompt": "p", "chosen": c, "rejected": r},
    st.integers(0, 5), st.sampled_from(DOMAINS), st.lists(st.text(max_size=3), min_size=3, max_size=3),
    st.lists(st.text(max_size=3), min_size=3, max_size=3))
maybe_broken = st.one_of(good_item, good_item.map(lambda x: {k: v for k, v in x.items() if k != "chosen"}),
                         st.tuples(good_item, st.sampled_from(["id", "domain", "prompt", "chosen", "rejected"]),
                                   json_values).map(lambda t: {**t[0], t[1]: t[2]}), json_values)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(items=st.one_of(st.lists(maybe_broken, max_size=8), json_values), seed=st.integers(0, 2**16))
def test_fuzzed_files_load_or_fail_cleanly(tmp_path, items, seed):
    p = tmp_path / "fuzz.json"
    p.write_text(json.dumps(items))
    try:
        samples = load_dataset(p)
    except DataError as e:
        assert str(p) in str(e) and "\n" not in e.one_line()
        return
    rng = np.random.default_rng(seed)
    chosen = rng.integers(0, 3, (len(samples), 3)).astype(float)
    rejected = rng.integers(0, 3, (len(samples), 3)).astype(float)
    ours = summarize(chosen, rejected, [s.domain for s in samples])
    ref = official_summary([{"domain": s.domain, "score_chosen": c.tolist(), "score_rejected": r.tolist()}
                            for s, c, r in zip(samples, chosen, rejected)])
    assert abs(ours["overall"] - ref["overall"]) <= 1e-12

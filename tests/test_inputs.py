"""Bad input end to end: every fault of options, models, data or files is one line on stderr with
exit status 2 and no traceback (RMBENCH_DEBUG=1 shows it)."""

import json

import pytest
from click.testing import CliRunner
from test_data import BAD as BAD_DATA

from rmbench_fast.cli.main import main
from rmbench_fast.errors import UsageError


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
     "no such Jinja file"),
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

"""rmbench_fast.compare of Results in memory (issue 31): two Results of the same model path are told
apart by step, options or order, not refused as "a run is given twice"; the numbers are those of
the same runs written to folders and compared by the command line. No model runs here: the Results
are built from scores drawn at random."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

import rmbench_fast
from rmbench_fast.cli.main import main
from rmbench_fast.engine.api import Result
from rmbench_fast.errors import UsageError
from rmbench_fast.results.metrics import summarize

DOMAINS = [d for d, n in {"chat": 4, "math": 5, "code": 3, "safety-refuse": 3, "safety-response": 2}.items()
           for _ in range(n)]


def result(seed, output=None, model="org/policy", **options):
    rng = np.random.default_rng(seed)
    chosen, rejected = rng.normal(size=(len(DOMAINS), 3)), rng.normal(size=(len(DOMAINS), 3))
    ids = list(range(len(DOMAINS)))
    return Result(summarize(chosen, rejected, DOMAINS), ids, list(DOMAINS), [None] * len(DOMAINS), chosen, rejected,
                  {"options": {"model": model, "limit": None, "output": output, **options}}, output)


def write(folder, r: Result):
    folder.mkdir(parents=True)
    items = [{"id": i, "domain": d, "score_chosen": c.tolist(), "score_rejected": j.tolist()}
             for i, d, c, j in zip(r.ids, r.domains, r.chosen, r.rejected)]
    (folder / "results.json").write_text(json.dumps(items))
    return folder


def test_two_results_of_one_model_are_named_by_step(tmp_path):
    a, b = result(1, str(tmp_path / "step-100")), result(2, str(tmp_path / "step-200"))
    got = rmbench_fast.compare(b, a, bootstrap=300)
    assert list(got["runs"]) == ["org/policy (step 200)", "org/policy (step 100)"]
    # the numbers are the command line's on the same runs written to folders
    fa, fb = write(tmp_path / "step-100", a), write(tmp_path / "step-200", b)
    res = CliRunner().invoke(main, ["compare", str(fb), str(fa), "--bootstrap", "300", "--json", "-"])
    cli = json.loads(res.stdout)
    assert [v for v in got["runs"].values()] == [v for v in cli["runs"].values()]
    assert got["pairs"][0]["metrics"] == cli["pairs"][0]["metrics"]


def test_then_by_the_options_that_differ_then_by_order():
    got = rmbench_fast.compare(result(1, limit=1), result(2, limit=2), bootstrap=0)
    assert list(got["runs"]) == ["org/policy (limit=1)", "org/policy (limit=2)"]
    got = rmbench_fast.compare(result(1, bootstrap=10), result(2, bootstrap=20), bootstrap=0)
    assert list(got["runs"]) == ["org/policy (bootstrap=10)", "org/policy (bootstrap=20)"]
    same = rmbench_fast.compare(result(1), result(2), result(3, model="other"), bootstrap=0)
    assert list(same["runs"]) == ["org/policy (run 1)", "org/policy (run 2)", "other"]
    # the difference is the summaries' own: run 2 - run 1
    diff = same["pairs"][0]["metrics"]["overall"]["diff"]
    assert diff == pytest.approx(result(2).summary["overall"] - result(1).summary["overall"], abs=1e-12)
    # names given are kept; the same Result twice is refused in one line
    r = result(1)
    assert list(rmbench_fast.compare(r, result(2), names=["x", "y"], bootstrap=0)["runs"]) == ["x", "y"]
    with pytest.raises(UsageError, match=r"^runs 1 and 2 are the same Result"):
        rmbench_fast.compare(r, r, bootstrap=0)


@pytest.mark.parametrize("kw, line", [
    (dict(level=2), "level=2: the intervals' level is between 0 and 1 (e.g. 0.95)"),
    (dict(bootstrap=-1), "bootstrap=-1: resamples are a whole number >= 0 (0: no intervals)"),
    (dict(top=1.5), "top=1.5: prompts listed per pair, a whole number >= 0"),
    (dict(baseline=5), "baseline=5: not one of the 2 runs (a sweep counts one per checkpoint)"),
])
def test_a_bad_option_names_its_keyword(kw, line):
    """The command line's click types refuse these naming --level, --bootstrap...; the API names
    the keyword argument, before reading any run."""
    with pytest.raises(UsageError) as e:
        rmbench_fast.compare(result(1), result(2), **kw)
    assert str(e.value) == line and "--" not in str(e.value)

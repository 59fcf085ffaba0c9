"""The cyclic garbage collector around a run: `rmbench-fast score` pauses it for its start-up (the
imports and loading, whose million lasting objects made its full collections cost 0.3-0.6 s), every
model pass computed here runs with it on, and whoever paused it gets it back paused."""

import gc

import pytest
from click.testing import CliRunner

import rmbench_fast.engine.score as score_mod
from rmbench_fast.cli.main import main
from rmbench_fast.engine.runtime import pauses_collector, startup_without_collector
from rmbench_fast.engine.score import ScoreOptions, score


@pytest.fixture
def collector():
    """Leaves the collector as the test found it."""
    was = gc.isenabled()
    yield
    if was:
        gc.enable()
    else:
        gc.disable()


def test_a_pass_collects_though_its_caller_paused_the_collector(world, collector):
    seen = []
    gc.disable()
    score(ScoreOptions(model=world["rm"], data=world["data"], cache=False),
          hooks=lambda role, batch: seen.append(gc.isenabled()))
    assert seen and all(seen)
    assert not gc.isenabled()  # the caller's pause, back
    gc.enable()
    seen.clear()
    score(ScoreOptions(model=world["rm"], data=world["data"], cache=False),
          hooks=lambda role, batch: seen.append(gc.isenabled()))
    assert seen and all(seen) and gc.isenabled()


def test_command_line_score_pauses_the_collector_until_its_pass(world, tmp_path, monkeypatch, collector):
    seen = {}

    def recorded(name, real):
        def call(*a, **kw):
            seen.setdefault(name, gc.isenabled())
            return real(*a, **kw)
        return call

    monkeypatch.setattr(score_mod, "prepare", recorded("prepare", score_mod.prepare))
    monkeypatch.setattr(score_mod, "run_batches", recorded("pass", score_mod.run_batches))
    monkeypatch.setattr(score_mod, "finish", recorded("finish", score_mod.finish))
    gc.enable()
    r = CliRunner().invoke(main, ["score", "--model", world["rm"], "--data", world["data"], "--no-cache",
                                  "-o", str(tmp_path / "out"), "--quiet"])
    assert r.exit_code == 0, r.output
    assert seen == {"prepare": False, "pass": True, "finish": False}
    assert gc.isenabled()


def test_the_pause_only_where_passes_run_in_this_process(collector):
    assert pauses_collector("local", 1)
    assert not pauses_collector("ray", 1) and not pauses_collector("local", 2)
    gc.enable()
    with startup_without_collector() as resume:
        assert not gc.isenabled()
        resume()
        assert gc.isenabled()
    assert gc.isenabled()
    for before in (True, False):  # a failing run leaves it as it was
        gc.enable() if before else gc.disable()
        with pytest.raises(KeyError), startup_without_collector():
            assert not gc.isenabled()
            raise KeyError("a failing run")
        assert gc.isenabled() is before


def test_a_failing_pass_gives_the_pause_back(world, collector):
    def fail(role, batch):
        assert gc.isenabled()
        raise KeyError("a failing batch")

    gc.disable()
    with pytest.raises(KeyError):
        score(ScoreOptions(model=world["rm"], data=world["data"], cache=False), hooks=fail)
    assert not gc.isenabled() and gc.get_freeze_count() == 0

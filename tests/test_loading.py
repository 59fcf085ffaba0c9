"""Loading models safely: pickle weights only when asked."""

from rmbench_fast.engine import ScoreOptions, score


def test_pickle_weights_with_flag(world):
    run = score(ScoreOptions(model=world["pickled"], data=world["data"], allow_pickle_weights=True, progress=False,
                             cache=False))
    assert run.summary["n_prompts"] == 10

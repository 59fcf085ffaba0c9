"""--score-span after:TEXT on models scored by an adapter: each family reads the response with everything up
to and including the last TEXT removed, exactly as it reads that cut response given as data (whose scores
tests/test_adapters.py checks against each family's plain reference)."""

import json

import numpy as np
import pytest
from adapter_families import FAMILIES
from adapter_world import build, options, world  # noqa: F401 (world: the fixture)

from rmbench_fast.engine.score import score

THINK = "</think>"
# one family per way of encoding a response (adapters' encode overrides and scorer classes): the default
# (grm), Starling's, InternLM2's reward token, plain text without special tokens (WorldPM, and ArmoRM's
# subclass), QRM's, and LDL's dropped BOS; every family is checked against its reference in test_adapters
ENCODINGS = ["grm-llama", "starling", "internlm2", "worldpm", "armorm", "qrm", "ldl"]


def thinking(path, out):
    """The world's data with a reasoning part and TEXT before every response (two TEXTs in one: the last counts)."""
    items = json.loads(open(path).read())
    for n, item in enumerate(items):
        for key in ("chosen", "rejected"):
            item[key] = [f"Let me think {n}{k} {THINK} twice {THINK}" + r if k == 1 else f"Hmm {THINK}" + r
                         for k, r in enumerate(item[key])]
    out.write_text(json.dumps(items))
    return str(out)


def test_the_encodings_are_families():
    assert set(ENCODINGS) <= set(FAMILIES)


@pytest.mark.parametrize("name", ENCODINGS)
def test_adapter_span_reads_what_follows_the_last_text(world, name, tmp_path):
    d, _, spec, _, _ = build(world, name)
    remote = "remote" in spec
    cut = score(options(d, world, trust_remote_code=remote))  # the answers alone, as data
    think = thinking(world["data"], tmp_path / "think.json")
    span = score(options(d, {**world, "data": think}, trust_remote_code=remote, score_span="after:" + THINK))
    whole = score(options(d, {**world, "data": think}, trust_remote_code=remote))
    np.testing.assert_allclose(span.chosen, cut.chosen, atol=1e-6, rtol=0)
    np.testing.assert_allclose(span.rejected, cut.rejected, atol=1e-6, rtol=0)
    assert np.abs(whole.chosen - cut.chosen).max() > 1e-4  # the reasoning, when read, moves the scores
    assert span.run["score_span"]["without_text"] == 0
    assert span.run["adapter"] == cut.run["adapter"]

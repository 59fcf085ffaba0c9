"""Precision as the official scripts choose it under --compat official: float16, 8-bit unless the
model path has a Llama-3 spelling (or the entry is unquantized / pins a dtype, or bfloat16 is asked
for); on CPU that is impossible: float32, said and recorded."""

import pytest
import torch

from rmbench_fast.engine.score import ScoreOptions, score
from rmbench_fast.models.precision import choose

CUDA = torch.device("cuda")  # a device object only: nothing runs on it here


def opts(model="/m/Org/some-rm", **kw):
    return ScoreOptions(model=model, compat="official", **kw)


@pytest.mark.parametrize("model, mode, int8", [
    ("/m/Org/some-rm", "rm", True), ("/m/meta/Llama-3-8B-rm", "rm", False), ("/m/x/llama3-rm", "rm", False),
    ("/m/x/llama3-dpo", "dpo", True),  # run_dpo.py's list has no "llama3"
    ("/m/x/LLaMA3-dpo", "dpo", False)])
def test_official_rules_on_cuda(model, mode, int8):
    p = choose(opts(model), CUDA, mode)
    assert p.dtype == torch.float16 and p.int8 is int8


def test_entry_settings_and_bfloat16():
    assert choose(opts(), CUDA, "rm", quantized=False).int8 is False
    pinned = choose(opts(), CUDA, "rm", pinned=torch.bfloat16)
    assert pinned.dtype == torch.bfloat16 and not pinned.int8
    bf16 = choose(opts(dtype="bfloat16"), CUDA, "rm")
    assert bf16.dtype == torch.bfloat16 and not bf16.int8


def test_default_is_untouched():
    assert choose(ScoreOptions(model="m"), CUDA, "rm").dtype == torch.bfloat16
    assert choose(ScoreOptions(model="m", dtype="float16"), CUDA, "rm").int8 is False


def test_cpu_says_it_cannot(world, tmp_path, caplog):
    p = choose(opts(), torch.device("cpu"), "rm")
    assert p.dtype == torch.float32 and not p.int8 and "needs CUDA" in p.note
    run = score(ScoreOptions(model=world["rm"], data=world["data"], compat="official", progress=False, cache=False))
    assert run.run["precision"]["dtype"] == "float32" and "needs CUDA" in run.run["precision"]["note"]
    assert any("needs CUDA" in r.message for r in caplog.records)


def test_dpo_keeps_8bit_under_bfloat16():
    """run_dpo.py: bfloat16 when asked, float16 otherwise, and 8-bit either way (only a Llama-3
    spelling turns it off); run_rm.py turns 8-bit off for bfloat16."""
    p = choose(opts(dtype="bfloat16"), CUDA, "dpo")
    assert p.dtype == torch.bfloat16 and p.int8 is True
    p = choose(opts(dtype="float32"), CUDA, "dpo")
    assert p.dtype == torch.float16 and p.int8 is True
    assert choose(opts(dtype="bfloat16"), CUDA, "rm").int8 is False

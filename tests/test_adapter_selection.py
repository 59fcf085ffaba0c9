"""Reward-model adapters: selection by official name, --adapter, the one-line errors of out-of-scope
entries and of missing flags or ids, and what run.json records, on the families' tiny folders
(tests/adapter_families.py, built by tests/adapter_world.py)."""

import json
import shutil

import numpy as np
import pytest
from adapter_world import build, options, world  # noqa: F401 (world: the fixture)
from click.testing import CliRunner
from transformers import LlamaConfig

from rmbench_fast.adapters import ADAPTERS, by_name, select
from rmbench_fast.cli.main import main
from rmbench_fast.engine.score import score
from rmbench_fast.errors import UsageError
from rmbench_fast.models.versions import transformers_version


def test_selection_by_official_name_first():
    """An official REWARD_MODEL_CONFIG name (a `RewardModels/` prefix stripped, as run_rm.py does)
    picks its adapter whatever the config says; other names fall through to the config."""
    plain = LlamaConfig(architectures=["LlamaForSequenceClassification"])
    for a in ADAPTERS:
        for name in a.official_names:
            assert select(f"RewardModels/{name}", plain) is a and select(name, plain) is a
    assert select("RewardModels/someone/else", plain) is None
    assert select("x", LlamaConfig(architectures=["GRewardModel"])).name == "grm"
    assert select("x", LlamaConfig(architectures=["LlamaForRewardModelWithGating"], num_quantiles=19)).name == "qrm"
    assert select("x", LlamaConfig(architectures=["LlamaForRewardModelWithGating"])).name == "armorm"
    assert select("x", LlamaConfig(architectures=["LlamaForScore"], score_type="cost")).name == "beaver-cost"
    assert select("x", plain, "ultrarm").name == "ultrarm"


def test_official_name_selects_in_a_run(world, tmp_path, monkeypatch):
    d, *_ = build(world, "grm-llama")
    dest = tmp_path / "RewardModels" / "Ray2333" / "GRM-Gemma-2B-sftreg"
    shutil.copytree(d, dest)
    cfg = json.loads((dest / "config.json").read_text())
    cfg["architectures"] = ["LlamaForCausalLM"]  # the name alone decides
    (dest / "config.json").write_text(json.dumps(cfg))
    monkeypatch.chdir(tmp_path)
    run = score(options("RewardModels/Ray2333/GRM-Gemma-2B-sftreg", world))
    direct = score(options(d, world))
    assert run.run["adapter"] == "grm"
    np.testing.assert_array_equal(run.chosen, direct.chosen)


def test_adapter_override(world):
    """--adapter beaver-cost on a beaver reward model: its scores (normalised as its config says), negated."""
    d, *_ = build(world, "beaver")
    cfg = json.loads(open(f"{d}/config.json").read())
    assert cfg["score_type"] == "reward"
    own = score(options(d, world))
    cost = score(options(d, world, adapter="beaver-cost"))
    assert cost.run["adapter"] == "beaver-cost" and "negated" in cost.run["scores"]
    np.testing.assert_allclose(cost.chosen, -own.chosen, atol=1e-6)
    with pytest.raises(UsageError, match="no such adapter"):
        by_name("nope")


@pytest.mark.parametrize("name, words", [("llm-blender/PairRM-hf", "compares two responses"),
                                         ("Skywork/Skywork-VL-Reward-7B", "vision-language")])
def test_out_of_scope_entries_are_one_line_errors(world, tmp_path, monkeypatch, name, words):
    d, *_ = build(world, "ultrarm")
    dest = tmp_path / "RewardModels" / name
    shutil.copytree(d, dest)
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(main, ["score", "--model", f"RewardModels/{name}", "--data", world["data"], "--no-cache",
                                  "-q", "--output", str(tmp_path / "out")])
    assert r.exit_code == 2 and words in r.output and "out of scope" in r.output
    assert len(r.output.strip().splitlines()) == 1


def test_remote_code_needs_the_flag(world):
    d, *_ = build(world, "eurus")
    with pytest.raises(UsageError, match="--trust-remote-code"):
        score(options(d, world))


def test_published_code_for_transformers_4_is_a_one_line_error(world, tmp_path):
    """Published reward-model code that never calls post_init() (Eurus, Ziya) loads under
    transformers 4 but not 5: a one-line error that says which transformers runs it."""
    d, *_ = build(world, "eurus")
    quirky = tmp_path / "eurus-as-published"
    shutil.copytree(d, quirky)
    code = next(quirky.glob("modeling_*.py"))
    code.write_text(code.read_text().replace("self.post_init()", "pass  # as published: no post_init()"))
    if transformers_version() < (5,):
        assert score(options(str(quirky), world, trust_remote_code=True)).run["n_sequences"] > 0
        return
    with pytest.raises(UsageError, match=r"does not run under transformers 5.*pip install 'transformers>=4.51,<5'"):
        score(options(str(quirky), world, trust_remote_code=True))


def test_remote_code_leaves_the_auto_classes_alone(world):
    """A remote class declared for a stock config class (the InternLM2 stand-in's LlamaConfig, as
    ArmoRM's real one is) is loaded as itself: transformers 4.51's Auto path would register it for
    LlamaConfig process-wide, and every later plain Llama in the process (GRM's decoder) became it."""
    from transformers import AutoModel

    d, *_ = build(world, "internlm2")
    assert score(options(d, world, trust_remote_code=True)).run["n_sequences"] > 0
    tiny = LlamaConfig(vocab_size=32, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                       num_attention_heads=2, num_key_value_heads=2)
    assert type(AutoModel.from_config(tiny)).__name__ == "LlamaModel"


def test_qrm_needs_llama3_header_ids(world):
    """QRM's gating reads at Llama-3's assistant header ids: another tokenizer is a clear error."""
    d, *_ = build(world, "qrm")
    other, *_ = build(world, "inf-orm")  # a tokenizer without those ids
    with pytest.raises(UsageError, match="lack Llama-3"):
        score(options(d, world, tokenizer=other))


def test_batch_dependent_official_pipelines_are_recorded(world):
    """Starling's pipeline pads with EOS here but reads before the first id 0: run.json says the
    official score depends on the batch and how this run scored."""
    d, *_ = build(world, "starling")
    run = score(options(d, world))
    assert any("depends on the batch" in w for w in run.run["adapter_warnings"])
    assert any("alone" in n for n in run.run["adapter_notes"])


def test_adapters_command_lists_every_family():
    r = CliRunner().invoke(main, ["adapters", "--json"])
    names = {a["name"] for a in json.loads(r.output)}
    assert {"grm", "beaver", "beaver-cost", "starling", "starling-7b", "ultrarm", "eurus", "ziya", "internlm2", "qrm",
            "armorm", "inf-orm", "ldl", "worldpm", "pairwise", "vision-language"} <= names

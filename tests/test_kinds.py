"""What a model is, from the one table of architecture kinds (models.kinds) every caller uses, and
the one version parser. Before the table, adapter selection counted only *ForCausalLM / *LMHeadModel
as language models, while mode detection also counted *ForConditionalGeneration: a multimodal
decoder (Gemma 3's ForConditionalGeneration) carrying a value head's weights was then taken for a
reward-model family by its weight names. Now it is a language model everywhere."""

import json
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import save_file

from rmbench_fast.adapters import select
from rmbench_fast.engine.checks import check_kind
from rmbench_fast.errors import UsageError
from rmbench_fast.models.kinds import architecture_kind, detect_mode, is_language_model, is_reward_model
from rmbench_fast.models.versions import parse_version


def config(*archs):
    return SimpleNamespace(architectures=list(archs), auto_map=None)


@pytest.mark.parametrize("arch, kind", [("LlamaForSequenceClassification", "rm"), ("LlamaForCausalLM", "lm"),
                                        ("GPT2LMHeadModel", "lm"), ("Gemma3ForConditionalGeneration", "lm"),
                                        ("GRewardModel", None), ("LlamaModel", None)])
def test_one_table(arch, kind):
    assert architecture_kind(arch) == kind
    assert is_reward_model(config(arch)) == (kind == "rm")
    assert is_language_model(config(arch)) == (kind == "lm")
    if kind is None:
        with pytest.raises(UsageError, match="cannot tell the mode"):
            detect_mode(config(arch))
    else:
        assert detect_mode(config(arch)) == {"rm": "rm", "lm": "dpo"}[kind]


def test_a_conditional_generation_model_is_a_language_model_everywhere(tmp_path):
    """A folder whose weights carry GRM's value head: a language model's config keeps it a DPO
    model (no adapter), whatever the suffix; a config naming no known kind is matched by weights."""
    save_file({"v_head.summary.0.weight": torch.zeros(2, 2), "model.embed_tokens.weight": torch.zeros(4, 2)},
              tmp_path / "model.safetensors")
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["X"]}))
    for arch in ("LlamaForCausalLM", "GPT2LMHeadModel", "Gemma3ForConditionalGeneration"):
        assert select(str(tmp_path), config(arch)) is None, arch  # was the grm adapter for the last one
    assert select(str(tmp_path), config("SomethingElse")).name == "grm"
    with pytest.raises(UsageError, match="not a sequence classifier"):
        check_kind("m", config("Gemma3ForConditionalGeneration"), "rm", "model")
    with pytest.raises(UsageError, match="is a sequence classifier"):
        check_kind("m", config("LlamaForSequenceClassification"), "dpo", "model")


@pytest.mark.parametrize("text, parsed", [("4.51.0", (4, 51, 0)), ("4.56.0.dev0", (4, 56, 0)), ("5.0rc1", (5, 0)),
                                          ("5.24.0", (5, 24, 0)), ("4.57.1+cu121", (4, 57, 1))])
def test_version_parser(text, parsed):
    assert parse_version(text) == parsed

"""Nemotron reward LMs (adapters.nemotron): a tiny LlamaForCausalLM saved under an official Nemotron
name is scored as the model card reads it - the chat-templated conversation alone, the full model,
logits[0, -1, 0] - within 1e-5 in fp32, with the same accuracies, with and without shared prefixes;
a self-check mismatch falls back to the model's own logits and says so; --adapter nemotron-reward
works on any path; a causal LM named like a reward model, given without --ref-model / --ref-free,
is refused in one line listing the choices, and a plain DPO policy is not."""

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from conftest import TEST_TEMPLATE, make_item
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

from rmbench_fast.cli.main import main
from rmbench_fast.engine.checks import check_reward_lm
from rmbench_fast.engine.score import ScoreOptions, score
from rmbench_fast.errors import UsageError
from rmbench_fast.scorers.logprobs import LMHead
from rmbench_fast.tiny.models import build_model, llama_config, save_model, train_tokenizer

OFFICIAL = "nvidia/Llama-3.1-Nemotron-70B-Reward-HF"


def items():
    return [make_item(i, "chat", prompt=f"Q{i}: " + "why is it so " * (3 * i + 1)) for i in range(4)]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("nemo")
    data = root / "data.json"
    data.write_text(json.dumps(items()))
    tok = train_tokenizer([json.dumps(x) for x in items()] * 3, vocab_size=300, chat_template=TEST_TEMPLATE)
    model = build_model("lm", llama_config(vocab_size=len(tok), hidden=32, layers=1, heads=4), seed=3)
    official = save_model(model, tok, root / "RewardModels" / OFFICIAL)
    anywhere = save_model(model, tok, root / "some" / "checkpoint")
    policy = save_model(model, tok, root / "plain" / "policy-7b")
    return {"root": root, "data": str(data), "official": official, "anywhere": str(anywhere), "policy": str(policy)}


def options(model, world, **kw):
    return ScoreOptions(model=model, data=world["data"], progress=False, cache=False, dtype="float32", **kw)


def reference(folder, samples):
    """The model card's reward of every response: its conversation alone through the chat template
    (tokenize=True: the template's tokens, none added), the full model, the logit of id 0 at the last position."""
    tok = PreTrainedTokenizerFast.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder).float().eval()
    out = {"chosen": np.zeros((len(samples), 3)), "rejected": np.zeros((len(samples), 3))}
    for i, s in enumerate(samples):
        for side in ("chosen", "rejected"):
            for k in range(3):
                messages = [{"role": "user", "content": s["prompt"]}, {"role": "assistant", "content": s[side][k]}]
                ids = tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=False, return_dict=True)
                with torch.no_grad():
                    logits = model(input_ids=torch.tensor([list(ids["input_ids"])])).logits
                out[side][i, k] = float(logits[0, -1, 0])
    return out["chosen"], out["rejected"]


def accuracies(chosen, rejected):
    """RM-Bench's compute_accuracy, plainly: hard, normal, easy."""
    m = np.zeros((3, 3))
    for c, r in zip(chosen, rejected):
        m += c[:, None] > r[None, :]
    m /= len(chosen)
    return np.triu(m, 1).sum() / 3, np.diag(m).mean(), np.tril(m, -1).sum() / 3


@pytest.mark.parametrize("share_prefix", [False, True])
def test_official_name_scores_the_card_read_out(world, monkeypatch, share_prefix):
    monkeypatch.chdir(world["root"])
    run = score(options(f"RewardModels/{OFFICIAL}", world, share_prefix=share_prefix))
    assert run.run["adapter"] == "nemotron-reward"
    assert run.run["models"]["model"]["logprob_head"] == "fused"
    chosen, rejected = reference(world["official"], items())
    assert np.abs(run.chosen - chosen).max() <= 1e-5 and np.abs(run.rejected - rejected).max() <= 1e-5
    assert np.ptp(chosen) > 1e-3  # the read-out tells responses apart: a wrong position or row would show
    assert accuracies(run.chosen, run.rejected) == accuracies(chosen, rejected)


def test_a_head_the_check_rejects_falls_back_to_model_logits(world, monkeypatch):
    """A 2% logit scale the model does not apply: the self-check sees it, the pass uses the model's
    own logits (still the card's numbers) and run.json says why."""
    from rmbench_fast.scorers import verdict

    real = verdict.lm_head_of  # the head the adapter's reader (scorers.verdict.rows_reader) builds on

    def scaled(model):
        h = real(model)
        return LMHead(h.weight, h.bias, 1.02, h.softcap, h.divisor)

    monkeypatch.setattr(verdict, "lm_head_of", scaled)
    run = score(options(world["anywhere"], world, adapter="nemotron-reward"))
    assert run.run["models"]["model"]["logprob_head"].startswith("model logits: the LM head's logits differ")
    chosen, rejected = reference(world["anywhere"], items())
    assert np.abs(run.chosen - chosen).max() <= 1e-5 and np.abs(run.rejected - rejected).max() <= 1e-5


def test_adapter_flag_on_any_path(world):
    run = score(options(world["anywhere"], world, adapter="nemotron-reward"))
    assert run.run["adapter"] == "nemotron-reward"
    chosen, _ = reference(world["anywhere"], items())
    assert np.abs(run.chosen - chosen).max() <= 1e-5


def test_a_reward_named_causal_lm_without_a_reference_is_refused(world, tmp_path):
    named = tmp_path / "Llama-3.3-Nemotron-70B-Reward-Multilingual"
    named.symlink_to(world["official"], target_is_directory=True)
    r = CliRunner().invoke(main, ["score", "--model", str(named), "--data", world["data"], "--no-cache", "-q",
                                  "--output", str(tmp_path / "out")])
    assert r.exit_code == 2, r.output
    line = r.output.strip()
    assert len(line.splitlines()) == 1
    for choice in ("--adapter nemotron-reward", "--ref-model PATH", "--ref-free {sum,avg,norm}"):
        assert choice in line
    # the official name at the tail of any local path, another reward word, a reward config field
    plain = SimpleNamespace(architectures=["LlamaForCausalLM"])
    with pytest.raises(UsageError, match="official nemotron-reward entry"):
        check_reward_lm(f"/models/{OFFICIAL}", plain)
    with pytest.raises(UsageError, match="says reward model") as e:
        check_reward_lm("/models/someone/Llama-3-8B-RM", plain)
    assert "--adapter" not in str(e.value)  # not a Nemotron: the adapter is not offered
    with pytest.raises(UsageError, match="config has reward_token_id"):
        check_reward_lm("/models/x", SimpleNamespace(architectures=["LlamaForCausalLM"], reward_token_id=0))


def test_a_plain_policy_and_an_explicit_choice_are_not_refused(world, tmp_path):
    assert score(options(world["policy"], world)).run["mode"] == "dpo"
    for path in ("/runs/reward-sweep/checkpoint-1", "/models/llama-rmsnorm-7b", "/x/warm-start"):
        check_reward_lm(path, SimpleNamespace(architectures=["LlamaForCausalLM"], rms_norm_eps=1e-5))
    named = tmp_path / "my-reward-lm"
    named.symlink_to(world["policy"], target_is_directory=True)
    assert score(options(str(named), world, ref_free="avg")).run["mode"] == "dpo"


def test_head_offloaded_to_disk_by_a_device_map(world, tmp_path):
    """--device-map with a CPU budget under the model's size: accelerate offloads the last modules
    (the LM head among them) to disk, behind its hook; row 0 is read through the hook, not from the
    head's empty (meta) weight, and the self-check still passes."""
    from rmbench_fast.models.memory import weights_from_files

    tok = PreTrainedTokenizerFast.from_pretrained(world["anywhere"])
    model = build_model("lm", llama_config(vocab_size=len(tok), hidden=32, layers=4, heads=4), seed=5)
    folder = str(save_model(model, tok, tmp_path / "deeper"))
    budget = weights_from_files(Path(folder), 4).bytes // 2
    run = score(options(folder, world, adapter="nemotron-reward", device_map="auto", max_memory={"cpu": str(budget)}))
    placement = run.run["models"]["model"]["placement"]["hf_device_map"]
    assert placement.get("lm_head") == "disk" and "cpu" in placement.values(), placement
    assert run.run["models"]["model"]["logprob_head"] == "fused"
    chosen, rejected = reference(folder, items())
    assert np.abs(run.chosen - chosen).max() <= 1e-5 and np.abs(run.rejected - rejected).max() <= 1e-5


@pytest.mark.slow  # two processes that import torch and transformers
def test_row_0_read_from_its_shard_under_tp(world):
    """--tp 2 shards the LM head over the vocabulary: row 0 is rank 0's, gathered for every rank."""
    run = score(options(world["anywhere"], world, adapter="nemotron-reward", tp=2))
    assert run.run["models"]["model"]["tp"] == 2 and run.run["models"]["model"]["logprob_head"] == "fused"
    chosen, rejected = reference(world["anywhere"], items())
    assert np.abs(run.chosen - chosen).max() <= 1e-5 and np.abs(run.rejected - rejected).max() <= 1e-5
    assert accuracies(run.chosen, run.rejected) == accuracies(chosen, rejected)

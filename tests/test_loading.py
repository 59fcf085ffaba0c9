"""Loading models safely: pickle weights only when asked, and never a head the files do not hold."""

from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file, save_file

from rmbench_fast.cli.main import main
from rmbench_fast.engine.score import ScoreOptions, score
from rmbench_fast.tiny.models import build_model, llama_config, save_model


def test_pickle_weights_with_flag(world):
    run = score(ScoreOptions(model=world["pickled"], data=world["data"], allow_pickle_weights=True, progress=False,
                             cache=False))
    assert run.summary["n_prompts"] == 10


def test_a_head_under_other_names_is_refused(world, tmp_path):
    """A reward model whose head is stored under names its class does not use (here a two-layer
    `reward_head.*` under a LlamaForSequenceClassification config): loading it would leave the
    class's `score` head random and drop the real one. Exit 2, naming both, before any pass."""
    model = build_model("rm", llama_config(**world["cfg"]), 3)
    folder = save_model(model, world["tok"], tmp_path / "odd-head")
    weights = load_file(folder / "model.safetensors")
    del weights["score.weight"]
    weights["reward_head.0.weight"] = torch.randn(16, 32)
    weights["reward_head.2.weight"] = torch.randn(1, 16)
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    r = CliRunner().invoke(main, ["score", "--model", str(folder), "--data", world["data"], "-q", "--no-cache"])
    assert r.exit_code == 2, r.output
    line = r.stderr.strip().splitlines()
    assert len(line) == 1 and "Traceback" not in r.output
    assert "score.weight" in line[0] and "random" in line[0]
    assert "reward_head.0.weight" in line[0] and "unused" in line[0]


POINTER = "version https://git-lfs.github.com/spec/v1\noid sha256:00\nsize 123456789\n"


def _broken(src, dest, fault):
    """A copy of the model folder `src` whose weights have `fault`."""
    import json
    import shutil
    import struct

    shutil.copytree(src, dest)
    weights = dest / "model.safetensors"
    if fault == "pointer":
        weights.write_text(POINTER)
    elif fault == "cut":  # a download interrupted after the header and part of the data
        data = weights.read_bytes()
        weights.write_bytes(data[: len(data) - 100])
    elif fault == "header":
        weights.write_bytes(struct.pack("<Q", 12) + b"{not json!!}" + b"\0" * 64)
    elif fault == "shard":  # an index naming a shard that is not there
        (dest / "model.safetensors.index.json").write_text(json.dumps(
            {"weight_map": {"a": "model.safetensors", "b": "model-00002-of-00002.safetensors"}}))
    return dest


FAULTS = {"pointer": ("git-lfs pointer", "git lfs pull"), "cut": ("cut short", "download it again"),
          "header": ("not a safetensors file", "header does not parse"),
          "shard": ("model-00002-of-00002.safetensors", "missing from the folder")}


@pytest.mark.parametrize("fault", sorted(FAULTS))
@pytest.mark.parametrize("role", ["rm", "policy", "ref"])
def test_an_unreadable_weight_file_is_one_line_naming_it(world, tmp_path, role, fault):
    """A reward model's, a DPO policy's or its reference's weights that cannot be weights: exit 2
    with one line naming the file and what it is, before any pre-flight or load (no traceback)."""
    args = {"rm": ["--model", world["rm"]], "policy": ["--model", world["policy"], "--ref-model", world["ref"]],
            "ref": ["--model", world["policy"], "--ref-model", world["ref"]]}[role]
    broken = _broken(Path(world[role]), tmp_path / "broken", fault)
    args[args.index(world[role])] = str(broken)
    r = CliRunner().invoke(main, ["score", *args, "--data", world["data"], "-q", "--no-cache"])
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.output, r.output
    what, hint = FAULTS[fault]
    assert what in lines[0] and hint in lines[0] and str(broken) in lines[0], lines[0]


def test_a_pointer_for_pickle_weights_is_named_too(world, tmp_path):
    import shutil

    folder = tmp_path / "pickled"
    shutil.copytree(world["pickled"], folder)
    (folder / "pytorch_model.bin").write_text(POINTER)
    r = CliRunner().invoke(main, ["score", "--model", str(folder), "--data", world["data"], "-q", "--no-cache",
                                  "--allow-pickle-weights"])
    assert r.exit_code == 2 and "pytorch_model.bin is a git-lfs pointer" in r.stderr, r.output


@pytest.mark.slow  # two ranks would start
def test_a_pointer_under_tp_is_one_line(world, tmp_path):
    broken = _broken(Path(world["ref"]), tmp_path / "ref", "pointer")
    r = CliRunner().invoke(main, ["score", "--model", world["policy"], "--ref-model", str(broken), "--data",
                                  world["data"], "-q", "--no-cache", "--tp", "2"])
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "git-lfs pointer" in lines[0] and "Traceback" not in r.output, r.output

"""Loading models safely: pickle weights only when asked, and never a head the files do not hold."""

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


def test_a_git_lfs_pointer_is_a_one_line_error(world, tmp_path):
    """A checkpoint whose safetensors file is a git-lfs pointer (not downloaded) is named, not a
    MemoryError traceback from reading its "header"."""
    import shutil

    folder = tmp_path / "lfs"
    shutil.copytree(world["rm"], folder)
    (folder / "model.safetensors").write_text("version https://git-lfs.github.com/spec/v1\noid sha256:00\n"
                                              "size 123456789\n")
    r = CliRunner().invoke(main, ["score", "--model", str(folder), "--data", world["data"], "-q", "--no-cache"])
    assert r.exit_code == 2, r.output
    assert "not a safetensors file" in r.stderr and "Traceback" not in r.output

"""The Python API (rmbench_fast.score / compare) against the command line, which it must equal for
the same options: summaries, per-sample scores and one-line errors (the API's naming the keyword
argument where the CLI's name its flag). Loaded model objects score as
their saved folders do (also under accelerate's mixed-precision forward wrapper), in one dtype for a
policy and its reference, and are handed back untouched. Tiny random-weight models (conftest.world)."""

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

import rmbench_fast
from rmbench_fast.cli.main import main
from rmbench_fast.errors import UsageError

PREFIX = "rmbench-fast: error: "


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def cli_score(tmp_path, name, model, data, *extra):
    out = tmp_path / name
    r = cli("score", "--model", model, "--data", data, "--output", out, "-q", "--no-cache", *extra)
    assert r.exit_code == 0, r.output
    return json.loads((out / "summary.json").read_text()), json.loads((out / "results.json").read_text())


def same_json(x):
    return json.loads(json.dumps(x))


def runs(world):
    """(name, model, CLI options, API options) of the runs compared: RM, DPO with a reference, DPO
    reference-free, each with options that change the batches and the interval."""
    return [
        ("rm", world["rm"], ["--max-batch-size", 3, "--bootstrap", 300], dict(max_batch_size=3, bootstrap=300)),
        ("dpo", world["policy"], ["--ref-model", world["ref"], "--max-tokens-per-batch", 64, "--limit", 1],
         dict(ref_model=world["ref"], max_tokens_per_batch=64, limit=1)),
        ("ref-free", world["policy"], ["--ref-free", "sum", "--domains", "chat,math"],
         dict(ref_free="sum", domains="chat,math")),
    ]


@pytest.mark.parametrize("which", [0, 1, 2], ids=["rm", "dpo", "ref-free"])
def test_the_summary_is_the_clis_for_the_same_options(world, tmp_path, which):
    name, model, cli_opts, api_opts = runs(world)[which]
    summary, items = cli_score(tmp_path, name, model, world["data"], *cli_opts)
    ref = api_opts.pop("ref_model", None)
    got = rmbench_fast.score(model, ref_model=ref, data=world["data"], no_cache=True, quiet=True, **api_opts)
    assert same_json(got.summary) == summary
    assert summary["intervals"] is not None  # the intervals are part of what is compared
    assert got.names == [f"{it['domain']}/{it['id']}" for it in items]
    np.testing.assert_array_equal(got.chosen, [it["score_chosen"] for it in items])
    np.testing.assert_array_equal(got.rejected, [it["score_rejected"] for it in items])
    assert got.run["options"]["model"] == model and got.run["passes_computed"] == got.run["passes"]


def test_the_api_writes_what_the_cli_writes(world, tmp_path):
    summary, items = cli_score(tmp_path, "cli", world["rm"], world["data"], "--limit", 1)
    out = tmp_path / "api"
    got = rmbench_fast.score(world["rm"], data=world["data"], output=out, limit=1, quiet=True)
    assert json.loads((out / "summary.json").read_text()) == summary
    assert json.loads((out / "results.json").read_text()) == items
    assert got.output == str(out) and json.loads((out / "run.json").read_text())["options"]["limit"] == 1
    # the same call again reads the finished run back from its folder, as the CLI does
    again = rmbench_fast.score(world["rm"], data=world["data"], output=out, limit=1, quiet=True)
    assert again.run["reused"] is True and again.run["passes_computed"] == 0
    assert (again.names, again.domains, again.subsets) == (got.names, got.domains, got.subsets)
    np.testing.assert_array_equal(again.chosen, got.chosen)
    assert again.summary == summary


@pytest.mark.parametrize("with_tokenizer", [True, False], ids=["tokenizer-given", "tokenizer-from-path"])
def test_loaded_objects_score_as_their_folders(world, with_tokenizer):
    """fp32 objects loaded by the user (transformers' own loaders) give the path run's scores exactly,
    for a reward model and for a DPO policy with its reference."""
    rm = AutoModelForSequenceClassification.from_pretrained(world["rm"], torch_dtype=torch.float32)
    policy = AutoModelForCausalLM.from_pretrained(world["policy"], torch_dtype=torch.float32)
    ref = AutoModelForCausalLM.from_pretrained(world["ref"], torch_dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(world["rm"]) if with_tokenizer else None
    for model, path, ref_obj, ref_path in ((rm, world["rm"], None, None), (policy, world["policy"], ref, world["ref"])):
        by_path = rmbench_fast.score(path, ref_model=ref_path, data=world["data"], quiet=True, max_batch_size=4)
        by_object = rmbench_fast.score(model, ref_model=ref_obj, tokenizer=tok, data=world["data"], quiet=True,
                                       max_batch_size=4)
        np.testing.assert_array_equal(by_object.chosen, by_path.chosen)
        np.testing.assert_array_equal(by_object.rejected, by_path.rejected)
        assert by_object.summary == by_path.summary
        models = by_object.run["models"]
        assert all(m["in_memory"] and m["sha256"] is None and not m["cached"] for m in models.values())
        assert by_object.run["options"]["device"] == "cpu" and by_object.run["options"]["dtype"] == "float32"
        assert by_object.run["tokenizer_in_memory"] is with_tokenizer and by_path.run["tokenizer_in_memory"] is False


def test_a_loaded_model_is_handed_back_untouched(world):
    model = AutoModelForSequenceClassification.from_pretrained(world["rm"], torch_dtype=torch.float32)
    model.train()
    model.model.layers[0].eval()  # a module the caller keeps in eval mode inside a training model
    model.config.pad_token_id = None  # the scorer sets the official pad id for its pass, and only then
    model.score.weight.grad = torch.full_like(model.score.weight, 0.5)  # an accumulated gradient
    flags = {n: m.training for n, m in model.named_modules()}
    weights = {n: p.detach().clone() for n, p in model.named_parameters()}
    needs_grad = {n: p.requires_grad for n, p in model.named_parameters()}
    got = rmbench_fast.score(model, tokenizer=AutoTokenizer.from_pretrained(world["rm"]), data=world["data"],
                             quiet=True, limit=1)
    assert got.run["n_prompts"] == 5
    assert {n: m.training for n, m in model.named_modules()} == flags
    assert model.config.pad_token_id is None
    for n, p in model.named_parameters():
        assert torch.equal(p, weights[n]) and p.requires_grad == needs_grad[n] and p.dtype == torch.float32
        assert p.device.type == "cpu"
    assert torch.equal(model.score.weight.grad, torch.full_like(model.score.weight, 0.5))
    assert sum(p.grad is not None for p in model.parameters()) == 1


def test_a_loaded_model_is_never_moved_or_cast(world):
    model = AutoModelForSequenceClassification.from_pretrained(world["rm"], torch_dtype=torch.float32)
    with pytest.raises(UsageError, match=r"^dtype='bfloat16': the loaded model is float32, in which it is scored"):
        rmbench_fast.score(model, data=world["data"], dtype="bfloat16")
    with pytest.raises(UsageError, match=r"^device='cuda': the loaded model is on cpu, where it is scored"):
        rmbench_fast.score(model, data=world["data"], device="cuda")
    with pytest.raises(UsageError, match=r"^ref_model is the model itself"):
        rmbench_fast.score(model, ref_model=model, data=world["data"])
    with pytest.raises(UsageError, match=r"^model \S+: scored through the grm adapter, which loads the model its own"):
        rmbench_fast.score(model, data=world["data"], adapter="grm")


@pytest.mark.parametrize("cli_args, api_kw, api_line", [
    (["--max-batch-size", "0"], dict(max_batch_size=0), "max_batch_size= must be at least 1"),
    (["--limit", "x"], dict(limit="x"), "limit='x': not a valid integer"),
    (["--limit", "0"], dict(limit=0), "limit= must be at least 1"),
    (["--ref-free", "sum", "--ref-model", "REF"], dict(ref_free="sum", ref_model="REF"),
     "ref_free= and ref_model= exclude each other: the reference-free rewards use no reference"),
    (["--prefix-cache-mb", "0"], dict(prefix_cache_mb=0), "prefix_cache_mb= must be at least 1"),
    (["--mode", "bogus"], dict(mode="bogus"), "mode='bogus': expected one of 'auto', 'rm', 'dpo'"),
    (["--dtype", "float64"], dict(dtype="float64"), "dtype='float64': expected one of 'float32', 'bfloat16', "
                                                     "'float16'"),
    (["--ref-free", "mean"], dict(ref_free="mean"), "ref_free='mean': expected one of 'sum', 'avg', 'norm'"),
    (["--compat", "exact"], dict(compat="exact"), "compat='exact': expected one of 'official'"),
    (["--logprob-impl", "cuda"], dict(logprob_impl="cuda"), "logprob_impl='cuda': expected one of 'auto', "
                                                             "'triton', 'torch', 'plain'"),
    (["--engine", "Ray"], dict(engine="Ray"), "engine='Ray': expected one of 'local', 'ray'"),
    (["--offload-folder", "x"], dict(offload_folder="x"), "offload_folder= is where device_map= offloads to disk: "
                                                          "pass device_map='auto' too, or drop it"),
], ids=["range", "type", "limit", "conflict", "prefix-cache", "mode", "dtype", "ref-free", "compat", "logprob-impl",
        "engine", "placement"])
def test_a_bad_option_is_one_line_naming_the_keyword(world, cli_args, api_kw, api_line):
    """The same fault on the command line and from Python: one line each; the CLI's names the flag
    (--limit), the API's the keyword argument (limit=), and no API line names a flag."""
    cli_args = [world["ref"] if a == "REF" else a for a in cli_args]
    api_kw = {k: world["ref"] if v == "REF" else v for k, v in api_kw.items()}
    r = cli("score", "--model", world["policy"], "--data", world["data"], "-q", *cli_args)
    assert r.exit_code == 2
    line = r.stderr.strip()
    assert line.startswith(PREFIX) and "\n" not in line, r.stderr
    assert cli_args[0] in line  # the CLI names its flag
    with pytest.raises(UsageError) as e:
        rmbench_fast.score(world["policy"], data=world["data"], quiet=True, **api_kw)
    assert str(e.value) == api_line
    assert "--" not in str(e.value)


def test_an_output_folder_of_another_run_names_the_keywords(world, tmp_path):
    out = tmp_path / "run"
    rmbench_fast.score(world["rm"], data=world["data"], output=out, limit=1, quiet=True, no_cache=True)
    with pytest.raises(UsageError) as e:
        rmbench_fast.score(world["rm"], data=world["data"], output=out, limit=2, quiet=True, no_cache=True)
    assert str(e.value) == (f"output={str(out)!r}: holds another run's results (different limit); pass "
                            "overwrite=True to replace them, or choose another folder")
    r = cli("score", "--model", world["rm"], "--data", world["data"], "--output", out, "--limit", 2, "-q", "--no-cache")
    assert r.exit_code == 2 and f"--output {out}: holds another run's results" in r.stderr
    assert "pass --overwrite to replace them" in r.stderr


@pytest.fixture
def fresh_accelerate(monkeypatch):
    """accelerate's process-wide state reset around a test that builds its own Accelerator (and
    ACCELERATE_MIXED_PRECISION, which transformers 4's TrainingArguments set, restored)."""
    from accelerate.state import AcceleratorState

    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "no")
    AcceleratorState._reset_state(reset_partial_state=True)
    yield
    AcceleratorState._reset_state(reset_partial_state=True)


def test_mixed_precision_wrappers_are_set_aside(world, fresh_accelerate):
    """accelerate's bf16 prepare_model (as a Trainer with bf16=True) replaces forward with an autocast
    wrapper on the objects: the policy and its reference are still scored in float32, as their folders
    (also inside the caller's autocast region), and handed back with the wrappers."""
    import accelerate

    acc = accelerate.Accelerator(mixed_precision="bf16", cpu=True)
    policy = AutoModelForCausalLM.from_pretrained(world["policy"], torch_dtype=torch.float32)
    ref = AutoModelForCausalLM.from_pretrained(world["ref"], torch_dtype=torch.float32)
    assert acc.prepare_model(policy) is policy and acc.prepare_model(ref) is ref
    wrappers = [m.__dict__["forward"] for m in (policy, ref)]
    by_path = rmbench_fast.score(world["policy"], ref_model=world["ref"], data=world["data"], quiet=True, limit=1)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # nor does a caller's autocast region cast them
        by_object = rmbench_fast.score(policy, ref_model=ref, data=world["data"], quiet=True, limit=1)
    np.testing.assert_array_equal(by_object.chosen, by_path.chosen)
    np.testing.assert_array_equal(by_object.rejected, by_path.rejected)
    assert by_object.run["dtype"] == "float32"
    assert all(m.__dict__["forward"] is w for m, w in zip((policy, ref), wrappers))


def test_a_policy_and_its_reference_are_scored_in_one_dtype(world):
    policy = AutoModelForCausalLM.from_pretrained(world["policy"], torch_dtype=torch.float32)
    ref16 = AutoModelForCausalLM.from_pretrained(world["ref"], torch_dtype=torch.bfloat16)
    with pytest.raises(UsageError, match=r"^model is float32 and ref_model is bfloat16: a policy and its reference "
                                         r"are scored in one dtype"):
        rmbench_fast.score(policy, ref_model=ref16, data=world["data"], quiet=True)
    with pytest.raises(UsageError, match=r"^dtype='float32': the loaded ref_model is bfloat16, in which it is scored"):
        rmbench_fast.score(world["policy"], ref_model=ref16, data=world["data"], quiet=True, dtype="float32")
    # a policy given by its path is loaded as the loaded reference is: in bfloat16, on its device
    got = rmbench_fast.score(world["policy"], ref_model=ref16, data=world["data"], quiet=True, limit=1, no_cache=True)
    assert got.run["options"]["dtype"] == "bfloat16" and got.run["dtype"] == "bfloat16"
    assert got.run["options"]["device"] == "cpu" and ref16.dtype == torch.bfloat16


def test_an_unknown_option_is_one_line_naming_the_nearest(world):
    with pytest.raises(UsageError, match=r"^no such option: limt=; did you mean limit=\?$"):
        rmbench_fast.score(world["rm"], data=world["data"], limt=3)
    with pytest.raises(UsageError, match=r"^no_cache and cache set the same option"):
        rmbench_fast.score(world["rm"], data=world["data"], no_cache=True, cache=True)


def test_compare_is_the_clis(world, tmp_path):
    a = rmbench_fast.score(world["rm"], data=world["data"], output=tmp_path / "a", quiet=True)
    b = rmbench_fast.score(world["policy"], data=world["data"], output=tmp_path / "b", quiet=True, ref_free="sum")
    r = cli("compare", tmp_path / "a", tmp_path / "b", "--bootstrap", 500, "--json", "-")
    assert r.exit_code == 0, r.output
    expected = json.loads(r.stdout)
    assert same_json(rmbench_fast.compare(str(tmp_path / "a"), str(tmp_path / "b"), bootstrap=500)) == expected
    # Results in memory compare as their folders do; baseline= puts one first, as --baseline
    got = rmbench_fast.compare(b, a, baseline=a, names=[str(tmp_path / "b"), str(tmp_path / "a")], bootstrap=500)
    assert same_json(got) == expected
    assert got.table().splitlines()[0].startswith("2 runs compared on 10 common prompts")


def test_import_stays_light():
    code = ("import sys, rmbench_fast; assert 'torch' not in sys.modules and 'transformers' not in sys.modules; "
            "assert callable(rmbench_fast.score) and callable(rmbench_fast.compare); assert 'torch' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)

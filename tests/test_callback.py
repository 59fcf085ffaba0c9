"""RMBenchCallback in tiny CPU Trainer runs of a few steps: its metrics reach the trainer's other
callbacks (a recorder's on_log), each step's folder is written and equals the Python API scoring the
checkpoint saved at that step, a resumed run reads finished steps back instead of scoring them, and
training is not disturbed (weights, gradients, training flags, RNG states, the trainer's own logs).
Under bf16 training the checkpoint's float32 numbers still; the tokenizer from the folder the
trainer's came from; the step training stops at; what distributed training needs (stand-ins).
DPO: against the reference a duck-typed trainer holds (its pass computed once per training run),
and with TRL's DPOTrainer when trl is installed."""

import json
import random
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import make_item
from transformers import (AutoModelForCausalLM, AutoTokenizer, Trainer, TrainerCallback, TrainingArguments,
                          default_data_collator)

import rmbench_fast
import rmbench_fast.engine.score as engine_score
from rmbench_fast.errors import UsageError
from rmbench_fast.integrations import RMBenchCallback
from rmbench_fast.integrations.callback import _unwrap
from rmbench_fast.integrations import steps
from rmbench_fast.integrations.steps import MARKER, check_distributed, identity, rng_kept, weights_digest
from rmbench_fast.tiny.models import build_model, llama_config, train_tokenizer

BOOT = 300  # resamples of the intervals: the callback and the API runs it is compared with use the same


class Recorder(TrainerCallback):
    """What reaches the trainer's reporting: every on_log, with its step."""

    def __init__(self):
        self.logs = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.logs.append((state.global_step, dict(logs)))

    def at(self, step, key):
        return [logs[key] for s, logs in self.logs if s == step and key in logs]


class Snapshot(TrainerCallback):
    """Before the RM-Bench callback at every step end: what scoring must leave as it was."""

    def on_step_end(self, args, state, control, model=None, **kwargs):
        self.state = {"python": random.getstate(), "numpy": np.random.get_state()[1].copy(),
                      "torch": torch.get_rng_state(), "flags": [m.training for m in model.modules()],
                      "weights": [p.detach().clone() for p in model.parameters()],
                      "grads": [None if p.grad is None else p.grad.clone() for p in model.parameters()]}


class Unchanged(TrainerCallback):
    """After the RM-Bench callback: everything Snapshot saw, unchanged."""

    def __init__(self, before):
        self.before, self.checked = before, 0

    def on_step_end(self, args, state, control, model=None, **kwargs):
        b = self.before.state
        assert random.getstate() == b["python"] and np.array_equal(np.random.get_state()[1], b["numpy"])
        assert torch.equal(torch.get_rng_state(), b["torch"])
        assert [m.training for m in model.modules()] == b["flags"] and b["flags"][0]
        for p, w, g in zip(model.parameters(), b["weights"], b["grads"]):
            assert torch.equal(p, w) and (p.grad is None if g is None else torch.equal(p.grad, g))
        self.checked += 1


@pytest.fixture
def passes(monkeypatch):
    """Model passes the engine computes or takes from the store (not a read-back step): a count."""
    count = {"n": 0}
    real = engine_score.model_pass

    def counted(*args, **kwargs):
        count["n"] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(engine_score, "model_pass", counted)
    return count


def training_args(out, **kw):
    kw = {"save_strategy": "no", **kw}
    return TrainingArguments(output_dir=str(out), per_device_train_batch_size=2, report_to=[], logging_steps=1,
                             use_cpu=True, learning_rate=1e-3, disable_tqdm=True, seed=0, **kw)


def token_rows(tok, n, labels):
    g = torch.Generator().manual_seed(0)
    rows = [torch.randint(2, len(tok), (12,), generator=g) for _ in range(n)]
    return [{"input_ids": r, "labels": r.clone() if labels == "lm" else torch.rand((), generator=g)} for r in rows]


def rm_training(world, out, seed, max_steps, every, tok=None, **kw):
    """A tiny reward model trained for max_steps (regression on random labels), the callback between
    a Snapshot and an Unchanged probe, and a Recorder. tok: the trainer's processing_class (default
    world's, built in memory)."""
    tok = tok or world["tok"]
    model = build_model("rm", llama_config(len(tok), hidden=32, layers=1, heads=4), seed)
    model.config.pad_token_id = tok.eos_token_id  # batches of 2 need one to pool
    before, rec = Snapshot(), Recorder()
    trainer = Trainer(model=model, args=training_args(out, max_steps=max_steps, **kw), train_dataset=token_rows(
        tok, 16, "rm"), data_collator=default_data_collator, processing_class=tok, callbacks=[before, rec])
    cb = RMBenchCallback(trainer, every=every, data=world["data"], bootstrap=BOOT)
    after = Unchanged(before)
    trainer.add_callback(cb)
    trainer.add_callback(after)
    return trainer, cb, rec, after


def test_reward_model_training(world, tmp_path, passes):
    out = tmp_path / "run"
    trainer, cb, rec, after = rm_training(world, out, seed=1, max_steps=4, every=2, save_strategy="steps",
                                          save_steps=2)
    trainer.train()
    assert cb.scored == [2, 4] and cb.steps_read_back == [] and passes["n"] == 2 and after.checked == 4
    for step in (1, 2, 3, 4):  # the trainer's own logs (loss) still at every step
        assert len(rec.at(step, "loss")) == 1
    for step in (2, 4):
        folder = out / "rmbench" / f"step-{step}"
        summary = json.loads((folder / "summary.json").read_text())
        assert {"results.json", "run.json", "callback.json"} <= {p.name for p in folder.iterdir()}
        assert rec.at(step, "rmbench/overall") == [summary["overall"]]
        assert rec.at(step, "rmbench/chat/hard") == [summary["domains"]["chat"]["hard"]]
        assert rec.at(step, "rmbench/overall_low") == [summary["intervals"]["metrics"]["overall"]["low"]]
        assert [h["rmbench/overall"] for h in trainer.state.log_history if h.get("step") == step
                and "rmbench/overall" in h] == [summary["overall"]]
        # the checkpoint saved at that step, scored by the API from its folder: the same numbers
        api = rmbench_fast.score(str(out / f"checkpoint-{step}"), data=world["data"], bootstrap=BOOT, quiet=True,
                                 no_cache=True)
        assert json.loads(json.dumps(api.summary)) == summary
        np.testing.assert_array_equal(cb.results[step].chosen, api.chosen)
        np.testing.assert_array_equal(cb.results[step].rejected, api.rejected)
    assert not np.array_equal(cb.results[2].chosen, cb.results[4].chosen)  # training moved the model

    # resumed from checkpoint-2: step 4 comes again with the same weights and is read back, not scored
    passes["n"] = 0
    trainer, cb2, rec2, _ = rm_training(world, out, seed=1, max_steps=4, every=2, save_strategy="steps",
                                        save_steps=2)
    trainer.train(resume_from_checkpoint=str(out / "checkpoint-2"))
    assert cb2.scored == [] and cb2.steps_read_back == [4] and passes["n"] == 0
    assert rec2.at(4, "rmbench/overall") == rec.at(4, "rmbench/overall")
    np.testing.assert_array_equal(cb2.results[4].chosen, cb.results[4].chosen)

    # another training run (other initial weights) in the same output folder: its step 2 is scored
    trainer, cb3, rec3, _ = rm_training(world, out, seed=2, max_steps=2, every=2)
    trainer.train()
    assert cb3.scored == [2] and passes["n"] == 1
    summary = json.loads((out / "rmbench" / "step-2" / "summary.json").read_text())
    assert rec3.at(2, "rmbench/overall") == [summary["overall"]]
    assert not np.array_equal(cb3.results[2].chosen, cb.results[2].chosen)


@pytest.fixture
def fresh_accelerate(monkeypatch):
    """accelerate's process-wide state reset around a bf16 training, and ACCELERATE_MIXED_PRECISION
    (transformers 4's TrainingArguments set it, and every later Accelerator would train in bf16) restored."""
    from accelerate.state import AcceleratorState

    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "no")
    AcceleratorState._reset_state(reset_partial_state=True)
    yield
    AcceleratorState._reset_state(reset_partial_state=True)


def test_bf16_training_is_scored_in_float32_with_the_tokenizers_files(world, tmp_path, fresh_accelerate):
    """bf16=True: accelerate wraps the model's forward in bf16 autocast; the callback's numbers are still
    those of the float32 checkpoint scored from its folder. The trainer's tokenizer came from a folder
    of tokenizer files: the run loads those files, as the CLI does."""
    out = tmp_path / "run"
    tok = AutoTokenizer.from_pretrained(world["rm"])
    trainer, cb, rec, _ = rm_training(world, out, seed=1, max_steps=2, every=2, tok=tok, save_strategy="steps",
                                      save_steps=2, bf16=True)
    trainer.train()
    assert "_original_forward" in trainer.model.__dict__  # the wrapper the trainer trained through, kept
    assert cb.scored == [2]
    run = cb.results[2].run
    assert run["dtype"] == "float32" and run["options"]["tokenizer"] == world["rm"]
    assert run["tokenizer_in_memory"] is False
    assert json.loads((out / "rmbench" / "step-2" / "run.json").read_text())["tokenizer_in_memory"] is False
    api = rmbench_fast.score(str(out / "checkpoint-2"), data=world["data"], bootstrap=BOOT, quiet=True, no_cache=True)
    np.testing.assert_array_equal(cb.results[2].chosen, api.chosen)
    np.testing.assert_array_equal(cb.results[2].rejected, api.rejected)
    assert cb.results[2].summary == api.summary


def test_the_tokenizer_source(world):
    """The trainer's tokenizer: its folder when it holds the same tokenizer, else the object as it is;
    tokenizer= as given."""
    cb = RMBenchCallback(every=1)
    assert cb._tokenizer(None, AutoTokenizer.from_pretrained(world["rm"])) == world["rm"]
    changed = AutoTokenizer.from_pretrained(world["rm"])
    changed.add_tokens(["zzz-added-in-memory"])
    assert RMBenchCallback(every=1)._tokenizer(None, changed) is changed
    assert RMBenchCallback(every=1)._tokenizer(None, world["tok"]) is world["tok"]  # built in memory: no folder
    given = AutoTokenizer.from_pretrained(world["rm"])
    assert RMBenchCallback(every=1, tokenizer=given)._tokenizer(None, None) is given


class Stop(TrainerCallback):
    """Stops training at a step, after the RM-Bench callback's on_step_end (as a stop it cannot see coming)."""

    def __init__(self, at):
        self.at = at

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.at:
            control.should_training_stop = True


def test_the_step_training_stops_at_is_scored(world, tmp_path, passes):
    trainer, cb, rec, _ = rm_training(world, tmp_path / "run", seed=1, max_steps=8, every=2)
    trainer.add_callback(Stop(3))
    trainer.train()
    assert trainer.state.global_step == 3 and cb.scored == [2, 3] and passes["n"] == 2
    assert len(rec.at(3, "rmbench/overall")) == 1


def test_a_step_scored_again_loses_its_old_marker_first(world, tmp_path, monkeypatch):
    folder = tmp_path / "run" / "rmbench" / "step-1"
    folder.mkdir(parents=True)
    (folder / MARKER).write_text(json.dumps({"step": 1, "identity": {}}))  # another run's finished step

    def fails(*args, **kwargs):
        raise RuntimeError("interrupted")

    monkeypatch.setattr(engine_score, "model_pass", fails)
    trainer, cb, _, _ = rm_training(world, tmp_path / "run", seed=1, max_steps=1, every=1)
    with pytest.raises(RuntimeError, match="interrupted"):
        trainer.train()
    assert not (folder / MARKER).exists()


def test_a_step_of_other_code_is_not_read_back(monkeypatch):
    before = identity({"limit": 1}, "digest", None)
    assert before["version"] == rmbench_fast.__version__ and before["code"]
    monkeypatch.setattr(rmbench_fast, "__version__", "0.0.1-older")
    assert identity({"limit": 1}, "digest", None) != before
    monkeypatch.undo()
    monkeypatch.setattr(steps, "code_fingerprint", lambda roots: "other sources")
    assert identity({"limit": 1}, "digest", None) != before
    assert identity({"limit": 1}, "digest", None, tokenizer_in_memory=True) != identity({"limit": 1}, "digest", None)


def test_sharded_training_is_refused():
    def zero(stage):
        return SimpleNamespace(accelerator=SimpleNamespace(state=SimpleNamespace(
            deepspeed_plugin=SimpleNamespace(zero_stage=stage))))

    with pytest.raises(UsageError, match=r"^RMBenchCallback: FSDP: the main process scores the model it holds whole"):
        RMBenchCallback(SimpleNamespace(is_fsdp_enabled=True), every=1).on_train_begin(None, None, None)
    with pytest.raises(UsageError, match=r"^RMBenchCallback: DeepSpeed ZeRO-3: "):
        RMBenchCallback(zero(3), every=1).on_train_begin(None, None, None)
    check_distributed(zero(2))  # ZeRO-2: every rank holds the whole weights
    check_distributed(SimpleNamespace(is_fsdp_enabled=False, accelerator=None))
    partitioned, emptied = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    partitioned.weight.ds_id = 3
    emptied.weight.data = torch.empty(0)
    emptied.weight.ds_shape = torch.Size([2, 2])
    for model in (partitioned, emptied):
        with pytest.raises(UsageError, match=r"^RMBenchCallback: weight is a DeepSpeed ZeRO-3 partition"):
            weights_digest(model)


def test_the_other_ranks_wait_for_the_main_one():
    """Every rank calls accelerator.wait_for_everyone() at a step due, after the main process scored."""
    order = []
    unwrap_kwargs = {}

    def unwrap_model(model, keep_fp32_wrapper=True, keep_torch_compile=True):
        unwrap_kwargs.update(keep_torch_compile=keep_torch_compile)
        return model

    trainer = SimpleNamespace(accelerator=SimpleNamespace(wait_for_everyone=lambda: order.append("wait"),
                                                          unwrap_model=unwrap_model))
    control = SimpleNamespace(should_training_stop=False)
    other = RMBenchCallback(trainer, every=2)  # a rank other than the main one: it scores nothing
    for step in (1, 2, 3):
        other.on_step_end(None, SimpleNamespace(global_step=step, max_steps=9, is_world_process_zero=False), control)
    assert order == ["wait"] and other.results == {}
    main = RMBenchCallback(trainer, every=2)
    main.score_step = lambda *args, **kwargs: order.append("score")
    main.on_step_end(None, SimpleNamespace(global_step=2, max_steps=9, is_world_process_zero=True), control)
    assert order == ["wait", "score", "wait"]
    model = torch.nn.Linear(2, 2)
    assert _unwrap(trainer, model) is model and unwrap_kwargs == {"keep_torch_compile": False}  # not the compiled one


class RefTrainer(Trainer):
    """A DPO-style trainer, duck-typed: it holds `ref_model` as TRL's DPOTrainer does."""

    def __init__(self, *args, ref_model=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.ref_model = ref_model


def dpo_training(world, out, ref, max_steps, **options):
    policy = AutoModelForCausalLM.from_pretrained(world["policy"], torch_dtype=torch.float32)
    rec = Recorder()
    trainer = RefTrainer(model=policy, args=training_args(out, max_steps=max_steps), ref_model=ref,
                         train_dataset=token_rows(world["tok"], 8, "lm"), data_collator=default_data_collator,
                         processing_class=world["tok"], callbacks=[rec])
    cb = RMBenchCallback(trainer, every=1, data=world["data"], bootstrap=BOOT, **options)
    trainer.add_callback(cb)
    return trainer, cb, rec


def test_dpo_against_the_trainers_reference(world, tmp_path):
    ref = AutoModelForCausalLM.from_pretrained(world["ref"], torch_dtype=torch.float32)
    calls = []
    ref.register_forward_pre_hook(lambda module, args: calls.append(1))
    trainer, cb, rec = dpo_training(world, tmp_path / "run", ref, max_steps=3)

    class RefCalls(TrainerCallback):
        seen = {}

        def on_step_end(self, args, state, control, **kwargs):
            self.seen[state.global_step] = len(calls)

    counter = RefCalls()
    trainer.add_callback(counter)
    trainer.train()
    assert cb.scored == [1, 2, 3] and [len(rec.at(s, "rmbench/overall")) for s in (1, 2, 3)] == [1, 1, 1]
    assert counter.seen[1] > 0 and counter.seen[3] == counter.seen[1]  # the reference's pass ran once
    # the trained policy against the reference's folder, through the API: the step-3 numbers
    api = rmbench_fast.score(trainer.model, ref_model=world["ref"], tokenizer=world["tok"], data=world["data"],
                             bootstrap=BOOT, quiet=True, no_cache=True)
    np.testing.assert_array_equal(cb.results[3].chosen, api.chosen)
    assert cb.results[3].summary == api.summary


def test_a_dpo_trainer_without_its_reference(world, tmp_path):
    trainer, cb, _ = dpo_training(world, tmp_path / "a", None, max_steps=1)
    with pytest.raises(UsageError, match=r"^the trainer holds no ref_model .* or ref_free='avg'"):
        trainer.train()
    assert cb.scored == []
    trainer, cb, rec = dpo_training(world, tmp_path / "b", None, max_steps=1, ref_free="norm")
    trainer.train()
    api = rmbench_fast.score(trainer.model, tokenizer=world["tok"], data=world["data"], ref_free="norm",
                             bootstrap=BOOT, quiet=True)
    assert cb.results[1].summary == api.summary and rec.at(1, "rmbench/overall") == [api.overall]


def test_bad_callback_options_fail_at_once(world, tmp_path):
    with pytest.raises(UsageError, match=r"^max_batch_size= must be at least 1$"):
        RMBenchCallback(every=2, max_batch_size=0)
    with pytest.raises(UsageError, match=r"^every=0: a number of steps"):
        RMBenchCallback(every=0)
    trainer = Trainer(model=build_model("rm", llama_config(len(world["tok"]), hidden=32, layers=1, heads=4), 0),
                      args=training_args(tmp_path, max_steps=1), train_dataset=token_rows(world["tok"], 2, "rm"))
    trainer.add_callback(RMBenchCallback(every=1, data=world["data"]))  # never given its trainer
    with pytest.raises(UsageError, match=r"^RMBenchCallback needs its trainer"):
        trainer.train()


def test_scoring_leaves_the_random_generators_as_they_were():
    """Scoring itself draws nothing today; rng_kept makes that hold whatever a model or library draws."""
    random.seed(1), np.random.seed(1), torch.manual_seed(1)
    expected = (random.random(), np.random.rand(), torch.rand(2))
    random.seed(1), np.random.seed(1), torch.manual_seed(1)
    with rng_kept():
        random.random(), np.random.rand(), torch.rand(5), torch.nn.Dropout(0.5).train()(torch.ones(9))
    got = (random.random(), np.random.rand(), torch.rand(2))
    assert got[:2] == expected[:2] and torch.equal(got[2], expected[2])


def test_trl_dpo_trainer(world, tmp_path):
    trl = pytest.importorskip("trl", reason="TRL is not installed (pip install trl)")
    datasets = pytest.importorskip("datasets", reason="TRL's trainers take a datasets.Dataset")
    tok = train_tokenizer([json.dumps(make_item(i)) for i in range(30)], vocab_size=300, pad=True)  # TRL pads
    cfg = llama_config(len(tok), hidden=32, layers=1, heads=4)
    policy, ref = build_model("lm", cfg, 1), build_model("lm", llama_config(len(tok), hidden=32, layers=1, heads=4), 2)
    items = [make_item(i) for i in range(8)]
    ds = datasets.Dataset.from_dict({"prompt": [it["prompt"] for it in items],
                                     "chosen": [it["chosen"][1] for it in items],
                                     "rejected": [it["rejected"][1] for it in items]})
    args = trl.DPOConfig(output_dir=str(tmp_path / "trl"), max_steps=2, per_device_train_batch_size=2, report_to=[],
                         logging_steps=1, save_strategy="no", use_cpu=True, bf16=False, max_length=64,
                         disable_tqdm=True, learning_rate=1e-3)
    trainer = trl.DPOTrainer(model=policy, ref_model=ref, args=args, train_dataset=ds, processing_class=tok)
    rec = Recorder()
    cb = RMBenchCallback(trainer, every=1, data=world["data"], bootstrap=BOOT)
    trainer.add_callback(rec)
    trainer.add_callback(cb)
    trainer.train()
    assert cb.scored == [1, 2]
    for step in (1, 2):
        assert len(rec.at(step, "rmbench/overall")) == 1
        # TRL's own accumulated metrics still reach its loss log of the step (Trainer.log was not called)
        assert len(rec.at(step, "loss")) == 1 and len(rec.at(step, "rewards/chosen")) == 1
    api = rmbench_fast.score(trainer.model, ref_model=ref, tokenizer=tok, data=world["data"], bootstrap=BOOT,
                             quiet=True)
    np.testing.assert_array_equal(cb.results[2].chosen, api.chosen)
    assert cb.results[2].summary == api.summary

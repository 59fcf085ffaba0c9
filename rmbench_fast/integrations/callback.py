"""RMBenchCallback: RM-Bench accuracy of the model a transformers Trainer (or TRL's DPOTrainer) is
training, every N steps, through the trainer's own reporting.

    trainer = Trainer(model=model, args=args, train_dataset=ds, processing_class=tokenizer)
    trainer.add_callback(RMBenchCallback(trainer, every=500, data="../shared/rm-bench", limit=100))
    trainer.train()

What it scores: the trainer's model objects as they are (the Python API's in-memory path,
engine.api.lent): a reward model, or a DPO policy against the reference the trainer holds
(`trainer.ref_model`, TRL's), or `ref_model=` given here. A causal LM trained by a trainer without
a reference attribute is scored reference-free (`ref_free`, default avg), as the CLI scores a DPO
model without --ref-model; a DPO trainer whose ref_model is None (TRL's PEFT or precomputed
log-probs) is refused unless ref_model= or ref_free= says how to score it. The reference's pass is
computed once per training run and kept in memory, keyed by a digest of its weights (TRL's
sync_ref_model changes them: then it is scored again).

How it reports: the metrics (`rmbench/overall`, `rmbench/hard`, ..., `rmbench/chat`,
`rmbench/chat/hard`, ..., and overall's 95% interval) go through the trainer's callback handler's
on_log, as Trainer.log sends them, so TensorBoard, W&B and every other reporting callback get them,
and into state.log_history. Not through Trainer.log itself: TRL's DPOTrainer.log adds and clears its
own accumulated training metrics, which an extra call would steal from the trainer's next log.

Where: `<output>/step-<N>/` (default output: `<args.output_dir>/rmbench`) holds results.json,
summary.json, run.json and callback.json; a step whose folder already holds a finished scoring of
the same options and weights (a resumed run reaching it again) is read back and logged, not scored.

Without disturbing training: only the main process scores; the model is scored in eval mode without
gradients on its own device and dtype (under bf16 / fp16 training, without accelerate's autocast
wrapper: engine.api.lent), and handed back with every module's training flag as it was; the RNG states
(Python, numpy, torch, CUDA) are restored; gradients are never touched. With several processes
(DDP), the others wait at a barrier while it scores; FSDP and DeepSpeed ZeRO-3 are refused.

The tokenizer: when the trainer's (its processing_class) was loaded from a local folder of
tokenizer files, and that folder still holds the same one (vocabulary, chat template), its files are
what the run loads, as the CLI loads them (models.tokenizer_loading, with their fingerprint);
otherwise the object itself is used (run.json: tokenizer_in_memory).
"""

from __future__ import annotations

import inspect
import os
from dataclasses import asdict
from pathlib import Path

from transformers import TrainerCallback

from ..engine.api.lent import config_of, name_of
from ..engine.api.run import Result, build, option_values, result_of, score_built
from ..engine.checks import check_options
from ..engine.option_names import api_name
from ..engine.options import ScoreOptions
from ..errors import UsageError
from ..inputs.data import HUB_DEFAULT
from ..models.kinds import is_reward_model
from .steps import (check_distributed, identity, mark_finished, read_back, rng_kept, step_folder, unmark,
                    weights_digest)

NO_REFERENCE = ("the trainer holds no ref_model (TRL then uses the model with its adapters disabled, or "
                "precomputed log-probs): pass ref_model= (a path or a loaded model) or ref_free='avg' to score "
                "reference-free")


def metrics(summary: dict, prefix: str = "rmbench") -> dict[str, float]:
    """The summary as flat scalars to log: every metric of results.intervals, and overall's interval."""
    from ..results.intervals import metric_values

    out = {f"{prefix}/{k}": v for k, v in metric_values(summary).items()}
    ci = ((summary.get("intervals") or {}).get("metrics") or {}).get("overall")
    if ci:
        out.update({f"{prefix}/overall_low": ci["low"], f"{prefix}/overall_high": ci["high"]})
    return out


def _tokenizer_of(processing_class):
    """The tokenizer in a trainer's processing_class (a processor holds one), or None."""
    if processing_class is None or callable(getattr(processing_class, "get_vocab", None)):
        return processing_class
    return getattr(processing_class, "tokenizer", None)


def _files_of(tok, trust_remote_code: bool) -> str | None:
    """The local folder a tokenizer object was loaded from (its name_or_path), when it holds tokenizer
    files that the project's loader reads as the same tokenizer (vocabulary and chat template: one
    changed in memory since, or a hub id, is not found there); else None."""
    from ..models.loading import load_tokenizer

    name = name_of(tok)
    folder = Path(name).expanduser() if name else None
    if folder is None or not folder.is_dir():
        return None
    try:
        files = load_tokenizer(str(folder), trust_remote_code)
    except UsageError:
        return None
    template = getattr(tok, "chat_template", None)
    if files.get_vocab() != tok.get_vocab() or getattr(files, "chat_template", None) != template:
        return None
    return str(folder)


def _unwrap(trainer, model):
    """The model under accelerate's wrappers (DDP, DeepSpeed's engine, torch.compile's OptimizedModule:
    unwrap_model keeps that one unless told not to), as the trainer saves it. Under bf16 / fp16 the
    object's forward stays accelerate's autocast wrapper (the trainer trains through it): each pass
    sets it aside (engine.api.lent.plain_forward)."""
    acc = getattr(trainer, "accelerator", None)
    if acc is None or model is None:
        return model
    if "keep_torch_compile" in inspect.signature(acc.unwrap_model).parameters:
        return acc.unwrap_model(model, keep_torch_compile=False)
    return acc.unwrap_model(model)


class RMBenchCallback(TrainerCallback):
    """Score the model being trained on RM-Bench every `every` steps (and at the last step, with
    at_end), log the metrics through the trainer's reporting and write them per step.

    trainer: the Trainer (a callback is not given it: pass it here, or call attach(trainer)).
    data: RM-Bench (a folder, a file or a hub id); ref_model: the DPO reference (default the
    trainer's ref_model); tokenizer: a path (loaded from its files) or an object (used as it is);
    default the trainer's processing_class, loaded from the folder it came from when that folder
    holds it (see the module's docstring); output: where the step folders go (default
    <args.output_dir>/rmbench); prefix: of the logged names. options: the CLI's score options
    (limit=, domains=, ref_free=, max_batch_size=, bootstrap=, ...); progress bars are off unless
    quiet=False. at_end: also score the step training ends at (max_steps, early stopping) when no
    `every` fell on it. After training, `results` maps each step to its Result; `scored` and
    `steps_read_back` list the steps scored and those read back from their folders.

    Several processes (DDP): the main process scores while the others wait for it at
    accelerator.wait_for_everyone(); a scoring longer than TrainingArguments.ddp_timeout (default
    1800 s) makes their wait time out, so raise ddp_timeout above a scoring's time (or score fewer
    prompts, limit=). FSDP and DeepSpeed ZeRO-3 are refused when training begins."""

    def __init__(self, trainer=None, *, every: int | None = None, at_end: bool = True, data=HUB_DEFAULT,
                 ref_model=None, tokenizer=None, output=None, prefix: str = "rmbench", **options):
        if every is not None and (isinstance(every, bool) or not isinstance(every, int) or every < 1):
            raise UsageError(f"every={every!r}: a number of steps, at least 1 (None: only at the end)")
        for name in ("output", "overwrite"):
            if name in options:
                raise UsageError(f"{name}: the callback writes each step into its own folder under output=")
        if "quiet" not in options and "progress" not in options:
            options["quiet"] = True  # no progress bars inside the training's output
        # a bad option fails now, not at step N
        check_options(ScoreOptions(model="-", ref_model=None if ref_model is None else "-", **option_values(options)),
                      api_name)
        self.trainer, self.every, self.at_end, self.data = trainer, every, at_end, data
        self.ref_model, self.tokenizer, self.output, self.prefix, self.options = (ref_model, tokenizer, output,
                                                                                 prefix, options)
        self.results: dict[int, Result] = {}
        self.scored: list[int] = []
        self.steps_read_back: list[int] = []
        self._handled: set[int] = set()  # steps scored or read back, or left to the main process (every rank)
        self._tokenizer_source = None  # (the trainer's tokenizer, what the run is given for it: its folder or it)
        self._reuse = {}  # the data (and tokenizers loaded from paths), loaded once per training run
        self._ref_key, self._ref_passes = None, {}

    def attach(self, trainer):
        """Give the callback its trainer (when it was built before the trainer); returns it."""
        self.trainer = trainer
        return self

    def _trainer(self):
        if self.trainer is None:
            raise UsageError("RMBenchCallback needs its trainer to log through: RMBenchCallback(trainer, ...) or "
                             "callback.attach(trainer)")
        return self.trainer

    def _reference(self, trainer, model, digest: bool):
        """(the reference to score against, what identifies it) -- (None, None) for a reward model or
        reference-free scoring. digest=False: only check that there is one."""
        if self.options.get("mode") == "rm" or is_reward_model(config_of(model)):
            return None, None
        ref = self.ref_model
        if ref is None:
            if self.options.get("ref_free") is not None or not hasattr(trainer, "ref_model"):
                return None, None  # asked for, or no reference in the trainer: reference-free, as the CLI's
            ref = trainer.ref_model
            if ref is None:
                raise UsageError(NO_REFERENCE)
        if isinstance(ref, (str, os.PathLike)):
            return os.fspath(ref), os.fspath(ref)
        ref = _unwrap(trainer, ref)
        return ref, weights_digest(ref) if digest else None

    def _tokenizer(self, trainer, processing_class):
        """What the run is given as its tokenizer: tokenizer= as given, else the trainer's (its files'
        folder when _files_of finds it, else the object), else None (the model's folder's)."""
        if self.tokenizer is not None:
            return self.tokenizer
        tok = _tokenizer_of(processing_class or getattr(trainer, "processing_class", None)
                            or getattr(trainer, "tokenizer", None))
        if tok is None:
            return None
        if self._tokenizer_source is None or self._tokenizer_source[0] is not tok:  # decided once a tokenizer
            self._tokenizer_source = (tok, _files_of(tok, bool(self.options.get("trust_remote_code"))) or tok)
        return self._tokenizer_source[1]

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        trainer = self._trainer()  # what would fail at step N fails before the first step
        check_distributed(trainer)
        self._reference(trainer, _unwrap(trainer, model or trainer.model), digest=False)

    def on_step_end(self, args, state, control, model=None, processing_class=None, **kwargs):
        step = state.global_step
        due = self.every is not None and step % self.every == 0
        last = self.at_end and (control.should_training_stop or 0 < state.max_steps <= step)
        if due or last:
            self._step(args, state, control, model, processing_class or kwargs.get("tokenizer"))

    def _at_stop(self, args, state, control, model=None, processing_class=None, **kwargs):
        """With at_end, the step training stops at, once a callback said so (early stopping, in
        on_evaluate): scored here, after the step's evaluation and saving, before the trainer may load
        its best checkpoint back."""
        if self.at_end and control.should_training_stop and state.global_step > 0:
            self._step(args, state, control, model, processing_class or kwargs.get("tokenizer"))

    on_evaluate = on_save = _at_stop

    def on_train_end(self, args, state, control, model=None, processing_class=None, **kwargs):
        """With at_end, the step training ended at, if nothing scored it yet (a stop no earlier hook
        saw). Not when the trainer has loaded its best checkpoint back (load_best_model_at_end): the
        model then holds that checkpoint's weights, not the last step's."""
        best = getattr(args, "load_best_model_at_end", False) and getattr(state, "best_model_checkpoint", None)
        if self.at_end and state.global_step > 0 and not best:
            self._step(args, state, control, model, processing_class or kwargs.get("tokenizer"))

    def _step(self, args, state, control, model, processing_class) -> None:
        """On every rank, the same steps: the main process scores, the others wait for it (their next
        collectives would otherwise start while it still scores)."""
        if state.global_step in self._handled:
            return
        self.score_step(args, state, control, model, processing_class)
        self._handled.add(state.global_step)
        acc = getattr(self.trainer, "accelerator", None)
        if acc is not None:
            acc.wait_for_everyone()

    def score_step(self, args, state, control, model=None, processing_class=None) -> Result | None:
        """Score (or read back) the model at state.global_step, log it and keep it in `results`."""
        if not state.is_world_process_zero:  # the other processes hold the same weights
            return None
        trainer = self._trainer()
        step = state.global_step
        model = _unwrap(trainer, model or trainer.model)
        tok = self._tokenizer(trainer, processing_class)
        in_memory = tok is not None and not isinstance(tok, (str, os.PathLike))
        folder = step_folder(self.output or Path(args.output_dir) / "rmbench", step)
        with rng_kept():
            ref, ref_id = self._reference(trainer, model, digest=True)
            o, given = build(model, ref_model=ref, data=self.data, tokenizer=tok, output=str(folder), overwrite=True,
                             **self.options)
            ident = identity(asdict(o), weights_digest(model), ref_id, in_memory)
            back = read_back(folder, ident)
            if back is not None:
                *numbers, run_record = back
                result = Result(*numbers, run_record, str(folder))
                self.steps_read_back.append(step)
            else:
                unmark(folder)  # a scoring that fails half-way leaves no finished-looking folder
                if "ref_model" in given.models:  # the reference's pass: once per training run
                    key = (ref_id, repr(ident["options"]), tok if isinstance(tok, str) else id(tok))
                    if key != self._ref_key:
                        self._ref_key, self._ref_passes = key, {"ref_model": None}
                    given.passes = self._ref_passes
                result = result_of(score_built(o, given, self._reuse), o)
                mark_finished(folder, step, ident)
                self.scored.append(step)
        self.results[step] = result
        self._log(trainer, args, state, control, metrics(result.summary, self.prefix))
        return result

    def _log(self, trainer, args, state, control, logs: dict) -> None:
        """As Trainer.log sends logs (epoch added, state.log_history, every callback's on_log), without
        a Trainer subclass's log override (TRL's takes and clears its own accumulated metrics). The
        handler's on_log clears control.should_log: set back, or the trainer's own log due at this
        step (its loss) would be skipped."""
        if state.epoch is not None:
            logs = {**logs, "epoch": state.epoch}
        state.log_history.append({**logs, "step": state.global_step})
        due = control.should_log
        trainer.callback_handler.on_log(args, state, control, logs)
        control.should_log = due

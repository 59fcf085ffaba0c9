"""RMBenchCallback: RM-Bench accuracy of the model a transformers Trainer (or TRL's DPOTrainer) is
training, every N steps, through the trainer's own reporting.

    trainer = Trainer(model=model, args=args, train_dataset=ds, processing_class=tokenizer)
    trainer.add_callback(RMBenchCallback(trainer, every=500, data="../shared/rm-bench", limit=100))
    trainer.train()

What it scores: the trainer's model objects as they are (the Python API's in-memory path,
engine.lent): a reward model, or a DPO policy against the reference the trainer holds
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
gradients on its own device and dtype, and handed back with every module's training flag as it was;
the RNG states (Python, numpy, torch, CUDA) are restored; gradients are never touched.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path

from transformers import TrainerCallback

from ..engine.api import Result, build, option_values, result_of, score_built
from ..engine.checks import check_options
from ..engine.lent import config_of
from ..engine.options import ScoreOptions
from ..errors import UsageError
from ..inputs.data import HUB_DEFAULT
from ..models.kinds import is_reward_model
from .steps import identity, mark_finished, read_back, rng_kept, step_folder, weights_digest

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


def _unwrap(trainer, model):
    """The model under accelerate's wrappers (DDP, torch.compile), as the trainer saves it."""
    acc = getattr(trainer, "accelerator", None)
    return acc.unwrap_model(model) if acc is not None and model is not None else model


class RMBenchCallback(TrainerCallback):
    """Score the model being trained on RM-Bench every `every` steps (and at the last step, with
    at_end), log the metrics through the trainer's reporting and write them per step.

    trainer: the Trainer (a callback is not given it: pass it here, or call attach(trainer)).
    data: RM-Bench (a folder, a file or a hub id); ref_model: the DPO reference (default the
    trainer's ref_model); tokenizer: default the trainer's processing_class; output: where the step
    folders go (default <args.output_dir>/rmbench); prefix: of the logged names. options: the CLI's
    score options (limit=, domains=, ref_free=, max_batch_size=, bootstrap=, ...); progress bars are
    off unless quiet=False. After training, `results` maps each step to its Result; `scored` and
    `read_back` list the steps scored and those read back from their folders."""

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
        check_options(ScoreOptions(model="-", ref_model=None if ref_model is None else "-", **option_values(options)))
        self.trainer, self.every, self.at_end, self.data = trainer, every, at_end, data
        self.ref_model, self.tokenizer, self.output, self.prefix, self.options = (ref_model, tokenizer, output,
                                                                                 prefix, options)
        self.results: dict[int, Result] = {}
        self.scored: list[int] = []
        self.read_back: list[int] = []
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

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        trainer = self._trainer()  # what would fail at step N fails before the first step
        self._reference(trainer, _unwrap(trainer, model or trainer.model), digest=False)

    def on_step_end(self, args, state, control, model=None, processing_class=None, **kwargs):
        step = state.global_step
        due = self.every is not None and step % self.every == 0
        last = self.at_end and state.max_steps > 0 and step >= state.max_steps
        if (due or last) and step not in self.results:
            self.score_step(args, state, control, model, processing_class or kwargs.get("tokenizer"))

    def score_step(self, args, state, control, model=None, processing_class=None) -> Result | None:
        """Score (or read back) the model at state.global_step, log it and keep it in `results`."""
        if not state.is_world_process_zero:  # the other processes hold the same weights
            return None
        trainer = self._trainer()
        step = state.global_step
        model = _unwrap(trainer, model or trainer.model)
        tok = self.tokenizer or _tokenizer_of(processing_class or getattr(trainer, "processing_class", None)
                                              or getattr(trainer, "tokenizer", None))
        folder = step_folder(self.output or Path(args.output_dir) / "rmbench", step)
        with rng_kept():
            ref, ref_id = self._reference(trainer, model, digest=True)
            o, given = build(model, ref_model=ref, data=self.data, tokenizer=tok, output=str(folder), overwrite=True,
                             **self.options)
            ident = identity(asdict(o), weights_digest(model), ref_id)
            back = read_back(folder, ident)
            if back is not None:
                *numbers, run_record = back
                result = Result(*numbers, run_record, str(folder))
                self.read_back.append(step)
            else:
                if "ref_model" in given.models:  # the reference's pass: once per training run
                    key = (ref_id, repr(ident["options"]), id(tok))
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

"""`score`: prepare the inputs, run each model pass the scorer asks for (through the result store,
locally or on Ray), turn the passes into rewards, metrics and results."""

from __future__ import annotations

import gc
import time
from pathlib import Path

import numpy as np

from ..errors import UsageError
from ..inputs.layout import split_scores
from ..inputs.prefix import PrefixKV
from ..models.device import local_target
from ..results.files import write_results
from ..results.metrics import summarize
from ..results.metrics import warm as warm_metrics
from ..store.atomic import atomic_write_json
from ..store.caching import PassResult, cached_pass
from ..store.entries import Store
from ..store.fingerprints import model_fingerprint
from ..store.keys import pass_key
from ..store.paths import store_root
from .api.lent import describe as describe_lent
from . import benchmarks
from .benchmarks import RM_BENCH
from .checks import check_output
from .finished import file_hashes, finished_run, keep_run, run_stamp, stored_run
from .options import ScoreOptions
from .preflight import pass_plan, placement_key
from .prepare import Prepared, in_memory, prepare
from .progress import Progress
from .report import run_info, timing
from .result import ScoreRun
from .runner import model_for_pass, run_batches

__all__ = ["ScoreOptions", "ScoreRun", "open_store", "prepare", "model_pass", "score"]


def open_store(o: ScoreOptions) -> Store:
    return Store(store_root(o.cache_dir) if o.cache else None)


def _local(prep: Prepared, o: ScoreOptions, model_path: str, lent=None):
    """compute(todo, arrays, on_batch) for a pass in this process; lent: the model, loaded by the
    caller (engine.api.lent), instead of loading the one at model_path."""

    def compute(todo, arrays, on_batch):
        t0 = time.perf_counter()
        model = prefix = None
        # what exists now (the libraries' objects) is not scanned by the collection after the pass; not
        # around a model lent in memory, nor over a caller's own freeze
        freeze = lent is None and prep.given is None and gc.get_freeze_count() == 0
        if freeze:
            gc.freeze()
        # a pass collects its own cycles as they come, over hours of batches, though its caller paused the
        # collector (the command line does for its start-up: engine.runtime.startup_without_collector); paused again after
        paused = not gc.isenabled()
        gc.enable()
        try:
            plan = pass_plan(prep, o, model_path, todo, lent)  # the memory pre-flight and --device-map's placement
            with model_for_pass(prep.scorer, model_path, lent, prep.dtype, prep.target.compute, o.trust_remote_code,
                                o.allow_pickle_weights, plan=plan) as (model, device, info):
                if prep.plan is not None:
                    prefix = PrefixKV(model, [e.ids for e in prep.seqs], prep.plan,
                                      np.concatenate([b.indices for b in todo]), prep.scorer.pad_id, device,
                                      prep.max_tokens)
                info.update(run_batches(prep.scorer, model, prep.seqs, todo, arrays, device, prep.batch_lengths,
                                        prep.name, on_batch, prefix))
                if prefix is not None:
                    info["prefix_sharing"] = prefix.note
                    info["prefix_out_of_memory_halvings"] = prefix.oom_halvings
                    info["prefix_attention"] = prefix.attention_kind()
                info["batches_s"] = time.perf_counter() - t0 - info["load_s"]  # the forwards, after loading
                return info
        finally:
            model = prefix = None  # free them before the next pass loads
            gc.collect()  # the model's cycles: 0.18 s over torch's and transformers' objects too, ~0.01 s without
            if freeze:
                gc.unfreeze()  # what was frozen is collectable again, by the next collection
            if paused:
                gc.disable()

    return compute


def _lent_pass(prep: Prepared, role: str):
    """(the model lent for `role`, what run.json records of it, a result kept from an earlier run to
    use as it is) -- (None, None, None) for a model named by its path."""
    lent = prep.given.model(role) if prep.given is not None else None
    if lent is None:
        return None, None, None
    kept = prep.given.passes.get(role)
    if kept is not None:
        kept = PassResult(kept.arrays, {**kept.info, "cached": True, "kept_in_memory": True, "seconds": 0.0})
    return lent, describe_lent(lent), kept


def model_pass(prep: Prepared, o: ScoreOptions, model_path: str, role: str, store: Store, hooks=None) -> PassResult:
    """One model over every sequence, through the store. hooks(role, batch) runs after each batch
    (tests count forward calls and inject failures with it). A model lent in memory (prep.given) has
    no files: its pass is computed on it as it is, and neither looked up in the store nor kept there
    (engine.api.lent), unless prep.given holds its result from an earlier run."""
    lent, fp, kept = _lent_pass(prep, role)
    if kept is not None:
        return kept
    t0, read = time.perf_counter(), store.hashes.bytes_hashed
    if lent is None:
        fp = model_fingerprint(model_path, store.hashes, content=store.enabled)
        store.hashes.save()
    fp.update(fingerprint_s=time.perf_counter() - t0, bytes_hashed=store.hashes.bytes_hashed - read)
    key = None
    model_key = fp["sha256"] or fp.get("stat_key")  # stat_key: --no-cache, results kept in memory only
    if model_key and prep.tok_key:
        code = prep.scorer.code_modules() + (("rmbench_fast.engine.scaleout.tensor_parallel",) if o.tp > 1 else ())
        key = pass_key(code, model_key, prep.tok_key, prep.target.gpu, prep.precision.int8,
                       prep.plan is not None, str(prep.dtype), prep.device.type, *prep.scorer.pass_key(),
                       prep.max_tokens, o.max_batch_size, *(prep.plan.key() if prep.plan is not None else ()),
                       *((f"tp{o.tp}",) if o.tp > 1 else ()),  # ranks sum in another order: not the same bits
                       # each Ray unit computes its prompts' prefixes in its own batches: not the same bits
                       *(("ray-prefixes",) if o.engine == "ray" and prep.plan is not None else ()),
                       *placement_key(o, prep.target), in_memory=in_memory(o, store))
    if o.engine == "ray" and lent is not None:
        raise UsageError(f"{role} {model_path}: a model loaded in memory is scored in this process; give its path to "
                         "score it on Ray workers")
    if o.tp > 1 and (lent is not None or prep.precision.int8):
        raise UsageError(f"--tp {o.tp}: {'a model loaded in memory' if lent is not None else '8-bit weights'} "
                         "cannot be split over ranks; give its path / another --dtype")
    if o.engine == "ray":
        from .scaleout.distributed import RayConfig, ray_compute

        compute = ray_compute(RayConfig(o.ray_address, o.num_workers, o.gpus_per_worker), prep, o, model_path)
    elif o.tp > 1:
        from .scaleout.tensor_parallel import tp_compute

        compute = tp_compute(prep, o, model_path)
    else:
        compute = _local(prep, o, model_path, lent)
    progress = Progress(len(prep.seqs), prep.batch_lengths, role, o.progress)
    result = cached_pass(store, key, prep.scorer.outputs, len(prep.seqs), prep.batches, compute, progress,
                         None if hooks is None else (lambda b: hooks(role, b)))
    result.info = {**fp, "role": role, **result.info}
    if lent is not None and role in prep.given.passes:  # asked to keep it for later runs
        prep.given.passes[role] = result
    return result


def finish(prep: Prepared, o: ScoreOptions, passes: dict, t_start: float, store: Store,
           stamp: str | None = None, started: float | None = None) -> ScoreRun:
    """rewards -> metrics -> results (written when o.output is set; run.json last, with the stamp
    that lets the same run again read them back: engine.finished)."""
    t_finish = time.perf_counter()
    scores = prep.scorer.rewards({role: p.arrays for role, p in passes.items()})
    if prep.benchmark != RM_BENCH:
        return _finish_benchmark(prep, o, passes, t_start, store, started, t_finish, scores)
    chosen, rejected = split_scores(scores, len(prep.samples))
    samples = prep.samples
    summary = summarize(chosen, rejected, [s.domain for s in samples], [s.subset for s in samples],
                        [s.name for s in samples])
    from ..results.intervals import bootstrap
    from ..results.metrics import cells_from_scores

    # the 95% interval of every summary number (None with --bootstrap 0): a bootstrap over prompts
    summary["intervals"] = bootstrap(cells_from_scores(chosen, rejected), [s.domain for s in samples], o.bootstrap)
    run = run_info(prep, o, passes, store, t_start)
    if o.output:
        write_results(o.output, samples, chosen, rejected, summary)
        run.update(stamp=stamp, result_files=file_hashes(o.output) if stamp else None)
    run["timing"] = timing(run, passes, started, t_start, t_finish)
    if o.output:
        atomic_write_json(Path(o.output) / "run.json", run)
    return ScoreRun(samples, chosen, rejected, summary, run)


def _finish_benchmark(prep: Prepared, o: ScoreOptions, passes: dict, t_start: float, store: Store, started,
                      t_finish: float, scores) -> ScoreRun:
    """finish for another benchmark than RM-Bench (engine.benchmarks): its numbers, results.jsonl,
    summary.json and run.json, never stamped (so never read back instead of computed)."""
    samples = prep.samples
    summary = benchmarks.summarize(o, prep.benchmark, samples, scores, prep.scorer.describe())
    run = run_info(prep, o, passes, store, t_start)
    run["benchmark"] = prep.benchmark
    if o.output:
        benchmarks.write(o.output, prep.benchmark, samples, scores, summary)
    run["timing"] = timing(run, passes, started, t_start, t_finish)
    if o.output:
        atomic_write_json(Path(o.output) / "run.json", run)
    rows = benchmarks.per_row(samples, scores)
    return ScoreRun(samples, [r[:len(s.chosen)] for s, r in zip(samples, rows)],
                    [r[len(s.chosen):] for s, r in zip(samples, rows)], summary, run)


def score(o: ScoreOptions, store: Store | None = None, hooks=None, reuse: dict | None = None,
          read_back: bool = True, started: float | None = None, *, given=None) -> ScoreRun:
    """Score every sample of `o.data` with `o.model`; write results when `o.output` is set.
    Finished work comes from the store (o.cache_dir, default ~/.cache/rmbench-fast/store); `reuse`
    (a dict a caller keeps across runs, as a sweep does) shares loaded data and tokenizers. A run
    already finished in o.output with the same inputs, options, code and versions is read back
    (engine.finished; its run dict says `reused`); read_back=False: the caller has just checked.
    started: time.perf_counter() when the process started (the command line knows), so run.json's timing
    counts the interpreter, the imports and the finished-run check before this run."""
    t_start = time.perf_counter()
    if o.output:
        check_output(o)
    done = finished_run(o) if read_back and hooks is None else None
    if done is not None:
        return done
    own_store = store is None
    store = store or open_store(o)
    try:
        # stamped before anything is read: an input that changes during the run leaves a stamp that no
        # longer matches it
        target = local_target(o.device) if o.output and o.engine == "local" and given is None else None
        stamp = run_stamp(o, target) if target is not None else None
        done = stored_run(o, store, target, started) if stamp and hooks is None else None
        if done is not None:  # the same run finished into another folder: its files, from the store
            return done
        prep = prepare(o, store, reuse, given)  # given: models lent in memory (engine.api.lent), never stamped
        # numba's import overlaps the passes, whose matmuls release the GIL; during the loading, which is
        # Python (imports) holding it, the two would take turns (0.3 s of a 10 s run, farm-bench)
        warm_metrics()
        passes = {role: model_pass(prep, o, path, role, store, hooks) for role, path in prep.scorer.roles(o)}
        result = finish(prep, o, passes, t_start, store, stamp, started)
        if prep.benchmark == RM_BENCH:  # another benchmark's run is never read back (engine.benchmarks)
            keep_run(store, stamp, o.output)
        return result
    finally:
        if own_store:
            store.close()

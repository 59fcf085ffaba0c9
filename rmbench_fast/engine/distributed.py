"""Scale-out on Ray: many workers (GPUs or CPU processes, on one machine or many) for score and sweep.

score --engine ray: the length-sorted batches of a model pass are cut into units (a few batches
each, longest first) and handed out from the driver's queue to Ray actors, each holding the model
on its device; an actor that finishes a unit gets the next (work stealing), so workers stay busy
whatever the lengths. Finished units go into the result store as they arrive (the same partial
entries as the local engine), so nothing finished is redone after a crash.

sweep --engine ray: the reference pass runs first, spread over all workers, and lands in the store;
then every checkpoint is a task that runs the local engine on some worker against the same store
(shared storage), so each checkpoint's model is loaded by one worker only.

Faults: a unit whose worker dies (killed process, lost node) is queued again and a replacement
worker started; a unit or checkpoint that fails `max_attempts` times ends the run with an error
naming it and its last error.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from ..errors import RmbenchError, UsageError, one_line

MAX_ATTEMPTS = 3


def _ray():
    try:
        import ray
    except ImportError:
        raise UsageError("--engine ray needs Ray: pip install -e '.[ray]' (or pip install 'ray>=2.9')") from None
    return ray


@dataclass
class RayConfig:
    address: str | None = None  # None: join RAY_ADDRESS or start a local instance
    num_workers: int = 2
    gpus_per_worker: float = 0.0
    cpus_per_worker: float = 1.0


def ensure_ray(cfg: RayConfig):
    ray = _ray()
    if not ray.is_initialized():
        kw = {"ignore_reinit_error": True, "include_dashboard": False, "log_to_driver": False}
        if cfg.address:
            ray.init(address=cfg.address, **kw)
        elif os.environ.get("RAY_ADDRESS"):
            ray.init(**kw)
        else:
            ray.init(num_cpus=max(1, int(cfg.num_workers * cfg.cpus_per_worker)), **kw)
    return ray


class _Worker:
    """Holds one model on its device and scores units of batches with the run's scorer, through the
    same loop as a local pass (runner.run_batches)."""

    def __init__(self, scorer, model_path, dtype, device, trust_remote_code, allow_pickle, threads):
        import torch

        from .runner import load_for_pass

        if threads:
            torch.set_num_threads(threads)
        if device == "cuda" and not torch.cuda.is_available():
            device = "cpu"
        self.device = torch.device(device)
        self.scorer = scorer
        self.model, _ = load_for_pass(scorer, model_path, getattr(torch, dtype), self.device, trust_remote_code,
                                      allow_pickle)

    def score_unit(self, seqs, batches, batch_lengths, names, plan=None, max_tokens=None):
        """seqs: the unit's sequences (tokenize.Encoded); batches: (index list into them, max length);
        names: how errors name each; plan: the unit's (prefix, group, wave) arrays when prompt
        prefixes are shared."""
        from ..inputs.batching import Batch
        from ..inputs.prefix import PrefixKV, PrefixPlan
        from .runner import run_batches

        _maybe_die()
        n = len(seqs)
        local = [Batch(np.asarray(ix), m) for ix, m in batches]
        prefix = None
        if plan is not None:
            prefix = PrefixKV(self.model, [e.ids for e in seqs], PrefixPlan(*map(np.asarray, plan)), np.arange(n),
                              self.scorer.pad_id, self.device, max_tokens)
        arrays = {name: np.zeros((n, *shape)) for name, shape in self.scorer.outputs.items()}
        info = run_batches(self.scorer, self.model, seqs, local, arrays, self.device, np.asarray(batch_lengths),
                           names.__getitem__, None, prefix)
        info.pop("first_batch_s", None)  # per unit, not per pass: run.json would show an arbitrary one
        return os.getpid(), arrays, info


def _maybe_die():
    """Fault injection for tests and drills: with RMBENCH_FAULT_KILL_WORKER=PATH set when Ray starts,
    creating the file PATH arms one fault: the first worker to start a unit then removes it, writes
    its process id to PATH.died, and dies at once, like a killed process."""
    marker = os.environ.get("RMBENCH_FAULT_KILL_WORKER")
    if marker:
        try:
            os.remove(marker)  # only one worker wins the removal
        except FileNotFoundError:
            return
        with open(marker + ".died", "w") as f:
            f.write(str(os.getpid()))
        os._exit(1)


def make_units(batches, n_workers: int, per_worker: int = 4):
    """Consecutive batches (longest first) grouped into about n_workers x per_worker units of
    similar padded-token totals."""
    total = sum(b.padded_tokens for b in batches)
    target = max(1, total // max(1, n_workers * per_worker))
    units, cur, acc = [], [], 0
    for b in batches:
        cur.append(b)
        acc += b.padded_tokens
        if acc >= target:
            units.append(cur)
            cur, acc = [], 0
    if cur:
        units.append(cur)
    return units


def ray_compute(cfg: RayConfig, prep, o, model_path: str):
    """compute(todo, arrays, on_batch) for a model pass over Ray actors (caching.cached_pass calls
    it): writes into `arrays`, calls on_batch for every batch of every finished unit (which marks
    it done and saves progress)."""

    def compute(todo, arrays, on_batch):
        work, notes = run_pass_on_ray(cfg, prep, o, model_path, todo, arrays, on_batch)
        return {"engine": "ray", "workers": cfg.num_workers, "sequences_per_worker": work, **notes}

    return compute


def run_pass_on_ray(cfg: RayConfig, prep, o, model_path: str, todo, arrays: dict, on_batch) -> tuple[dict, dict]:
    """Returns the sequences each worker process scored ({pid: count}: their sum is the pass's
    sequences when no finished work was redone) and what the scorer noted for run.json."""
    from ..inputs.layout import sequence_name

    ray = ensure_ray(cfg)
    worker_cls = ray.remote(num_cpus=cfg.cpus_per_worker, num_gpus=cfg.gpus_per_worker, max_restarts=0,
                            max_task_retries=0)(_Worker)
    device = "cuda" if cfg.gpus_per_worker > 0 else "cpu"
    dtype = str(prep.dtype).replace("torch.", "")
    threads = max(1, int(cfg.cpus_per_worker)) if device == "cpu" else None

    def spawn():
        return worker_cls.remote(prep.scorer, model_path, dtype, device, o.trust_remote_code, o.allow_pickle_weights,
                                 threads)

    queue = list(enumerate(make_units(todo, cfg.num_workers)))
    attempts = {k: 0 for k, _ in queue}
    idle = [spawn() for _ in range(min(cfg.num_workers, len(queue)))]
    running = {}  # future -> (unit index, unit, actor, sequence indices)
    work, notes = {}, {}
    retried, unit_workers = [], {}  # run.json: what was redone and which process finished each unit
    try:
        while queue or running:
            while queue and idle:
                k, unit = queue.pop(0)
                actor = idle.pop()
                index = np.concatenate([b.indices for b in unit])
                where = {int(g): j for j, g in enumerate(index)}
                local = [([where[int(g)] for g in b.indices], b.max_len) for b in unit]
                plan = None if prep.plan is None else (prep.plan.prefix[index], prep.plan.group[index],
                                                       prep.plan.wave[index])
                fut = actor.score_unit.remote([prep.seqs[g] for g in index], local, prep.batch_lengths[index],
                                              [sequence_name(prep.samples, int(g)) for g in index], plan,
                                              prep.max_tokens)
                running[fut] = (k, unit, actor, index)
            done, _ = ray.wait(list(running), num_returns=1)
            fut = done[0]
            k, unit, actor, index = running.pop(fut)
            try:
                result = ray.get(fut)
            except ray.exceptions.RayActorError as e:  # the worker died: another one takes the unit
                attempts[k] += 1
                retried.append({"unit": k, "attempt": attempts[k], "why": "its worker process died"})
                _give_up_if(attempts[k], k, unit, e)
                queue.insert(0, (k, unit))
                idle.append(spawn())
                continue
            except ray.exceptions.RayTaskError as e:  # the unit itself failed: retry, then report
                if isinstance(getattr(e, "cause", None), RmbenchError):
                    raise e.cause from None  # bad input: the same everywhere, no retry
                attempts[k] += 1
                retried.append({"unit": k, "attempt": attempts[k], "why": one_line(e, 200, tail=True)})
                _give_up_if(attempts[k], k, unit, e)
                queue.insert(0, (k, unit))
                idle.append(actor)
                continue
            pid, result, note = result
            work[str(pid)] = work.get(str(pid), 0) + len(index)
            unit_workers[str(k)] = str(pid)
            notes.update(note)
            for name, values in result.items():
                arrays[name][index] = values
            idle.append(actor)
            for b in unit:
                on_batch(b)
    finally:
        for actor in idle + [a for _, _, a, _ in running.values()]:
            try:
                ray.kill(actor)
            except Exception:
                pass
    notes.update(retried_units=retried, unit_workers=unit_workers)
    return work, notes


def _give_up_if(attempts: int, k: int, unit, error):
    if attempts >= MAX_ATTEMPTS:
        n = sum(len(b.indices) for b in unit)
        last = one_line(error, 400, tail=True)
        raise RmbenchError(f"work unit {k} ({n} sequences, longest {unit[0].max_len} tokens) failed "
                           f"{attempts} times; last error: {last}")


def run_checkpoints_on_ray(cfg: RayConfig, jobs: list, store_dir: str, task_fn):
    """jobs: [(key, ScoreOptions)]; task_fn(options, store_dir) runs each (the local engine) on some
    worker against the shared store. Yields (key, result) in completion order; a job whose worker dies is run again (it
    resumes from the store), up to MAX_ATTEMPTS."""
    ray = ensure_ray(cfg)
    task = ray.remote(num_cpus=cfg.cpus_per_worker, num_gpus=cfg.gpus_per_worker, max_retries=0)(task_fn)
    pending = list(jobs)
    attempts = {k: 0 for k, _ in jobs}
    running = {}
    while pending or running:
        while pending and len(running) < cfg.num_workers:
            k, o = pending.pop(0)
            running[task.remote(o, store_dir)] = (k, o)
        done, _ = ray.wait(list(running), num_returns=1)
        k, o = running.pop(done[0])
        try:
            yield k, ray.get(done[0])
        except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError, ray.exceptions.RayTaskError) as e:
            if isinstance(getattr(e, "cause", None), RmbenchError):
                raise e.cause from None
            attempts[k] += 1
            if attempts[k] >= MAX_ATTEMPTS:
                raise RmbenchError(f"checkpoint {k} failed {attempts[k]} times; last error: "
                                   f"{one_line(e, 400, tail=True)}") from None
            pending.insert(0, (k, o))

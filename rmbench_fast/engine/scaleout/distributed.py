"""Scale-out on Ray: many workers (GPUs or CPU processes, on one machine or many) for score and sweep.

score --engine ray: the length-sorted batches of a model pass are cut into units (a few batches
each, longest first) and handed out from the driver's queue to Ray actors, each holding the model
on its device; an actor that finishes a unit gets the next (work stealing), so workers stay busy
whatever the lengths. Finished units go into the result store as they arrive (the same partial
entries as the local engine), so nothing finished is redone after a crash.

sweep --engine ray: the reference pass runs first, spread over all workers, and lands in the store;
then every checkpoint is a task that runs the local engine on some worker against the same store
(shared storage), so each checkpoint's model is loaded by one worker only.

Devices: decided from what a worker has, not from the driver's (probe_workers; ray_worker has the rest).

Faults: a unit whose worker dies (killed process, lost node) is queued again and a replacement
worker started; a unit or checkpoint that fails `max_attempts` times ends the run with an error
naming it and its last error. Workers are spread over the nodes (Ray's SPREAD strategy).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from ...errors import RmbenchError, UsageError, one_line
from .ray_worker import Worker, probe

MAX_ATTEMPTS = 3
PROBE_TIMEOUT_S = 300  # for a worker's resources to be free: a cluster busy with other jobs


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


def probe_workers(cfg: RayConfig, device: str | None, logprob_impl: str):
    """(Target, resolved --logprob-impl) of the run's workers, asked of one of them. --device, when
    given, must agree with --gpus-per-worker (Ray hands out the GPUs)."""
    wanted = "cuda" if cfg.gpus_per_worker > 0 else "cpu"
    if device is not None and device != wanted:  # an index means nothing here: Ray picks each worker's GPU
        raise UsageError(f"--device {device} with --engine ray: workers compute on "
                         f"{'a GPU' if wanted == 'cuda' else 'the CPU'} (--gpus-per-worker {cfg.gpus_per_worker:g}); "
                         f"drop --device (Ray gives each worker its GPU), or set --gpus-per-worker "
                         f"{'0' if wanted == 'cuda' else '1'}")
    ray = ensure_ray(cfg)
    if cfg.gpus_per_worker > 0:  # what Ray could never place waits forever: say so now
        per_node = [n["Resources"].get("GPU", 0) for n in ray.nodes() if n.get("Alive")]
        total, largest = sum(per_node), max(per_node, default=0)
        if cfg.gpus_per_worker > largest or cfg.num_workers * cfg.gpus_per_worker > total:
            raise UsageError(f"--num-workers {cfg.num_workers} x --gpus-per-worker {cfg.gpus_per_worker:g}: the Ray "
                             f"cluster offers {total:g} GPUs, at most {largest:g} on one node (ray start --num-gpus "
                             f"on its nodes)")
    task = ray.remote(num_cpus=cfg.cpus_per_worker, num_gpus=cfg.gpus_per_worker, max_retries=0)(probe)
    try:
        return ray.get(task.remote(wanted, logprob_impl), timeout=PROBE_TIMEOUT_S)
    except ray.exceptions.GetTimeoutError:
        raise RmbenchError(f"no Ray worker with {cfg.cpus_per_worker:g} CPUs and {cfg.gpus_per_worker:g} GPUs "
                           f"started within {PROBE_TIMEOUT_S} s (is the cluster busy with other work?)") from None
    except ray.exceptions.RayTaskError as e:
        if isinstance(getattr(e, "cause", None), RmbenchError):
            raise e.cause from None
        raise


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
        return {"engine": "ray", "workers": cfg.num_workers, "sequences_per_worker": work, **notes,
                **({"tp_per_worker": o.tp} if o.tp > 1 else {})}

    return compute


def run_pass_on_ray(cfg: RayConfig, prep, o, model_path: str, todo, arrays: dict, on_batch) -> tuple[dict, dict]:
    """Returns the sequences each worker process scored ({pid: count}: their sum is the pass's
    sequences when no finished work was redone) and what the scorer noted for run.json."""

    ray = ensure_ray(cfg)
    worker_cls = ray.remote(num_cpus=cfg.cpus_per_worker, num_gpus=cfg.gpus_per_worker, max_restarts=0,
                            max_task_retries=0, scheduling_strategy="SPREAD")(Worker)
    dtype = str(prep.dtype).replace("torch.", "")
    threads = max(1, int(cfg.cpus_per_worker)) if prep.device.type == "cpu" else None
    nodes = {}  # actor -> (pid, node id), asked once it is up; a dead one keeps its last answer

    def spawn():
        actor = worker_cls.remote(prep.scorer, model_path, dtype, prep.target, o.trust_remote_code,
                                  o.allow_pickle_weights, threads, o.tp)
        nodes[actor] = actor.where.remote()
        return actor

    def node_of(actor) -> str | None:
        where = nodes.get(actor)
        if where is not None and not isinstance(where, tuple):
            try:  # answered long ago by an actor that ran a unit; a dead one fails at once
                where = nodes[actor] = ray.get(where, timeout=5)
            except Exception:  # never came up, or died before answering
                return None
        return where[1] if where else None

    queue = list(enumerate(make_units(todo, cfg.num_workers)))
    attempts = {k: 0 for k, _ in queue}
    idle = [spawn() for _ in range(min(cfg.num_workers, len(queue)))]
    running = {}  # future -> (unit index, unit, actor, sequence indices)
    work, notes = {}, {}
    retried, unit_workers, unit_nodes = [], {}, {}  # run.json: what was redone, who finished each unit, where
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
                                              [prep.name(int(g)) for g in index], plan,
                                              prep.max_tokens)
                running[fut] = (k, unit, actor, index)
            done, _ = ray.wait(list(running), num_returns=1)
            fut = done[0]
            k, unit, actor, index = running.pop(fut)
            try:
                result = ray.get(fut)
            except ray.exceptions.RayActorError as e:  # the worker died: another one takes the unit
                attempts[k] += 1
                retried.append({"unit": k, "attempt": attempts[k], "why": "its worker process died",
                                "node": node_of(actor)})
                _give_up_if(attempts[k], k, unit, e)
                queue.insert(0, (k, unit))
                idle.append(spawn())
                continue
            except ray.exceptions.RayTaskError as e:  # the unit itself failed: retry, then report
                if isinstance(getattr(e, "cause", None), RmbenchError):
                    raise e.cause from None  # bad input: the same everywhere, no retry
                attempts[k] += 1
                retried.append({"unit": k, "attempt": attempts[k], "why": one_line(e, 200, tail=True),
                                "node": node_of(actor)})
                _give_up_if(attempts[k], k, unit, e)
                queue.insert(0, (k, unit))
                idle.append(actor)
                continue
            pid, result, note = result
            work[str(pid)] = work.get(str(pid), 0) + len(index)
            unit_workers[str(k)] = str(pid)
            unit_nodes[str(k)] = node_of(actor)
            _merge(notes, note)
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
    notes.update(retried_units=retried, unit_workers=unit_workers, unit_nodes=unit_nodes)
    return work, notes


# counts a unit's run_batches returns: the pass's is their sum over units
SUMMED = ("out_of_memory_retries", "out_of_memory_halvings", "prefix_out_of_memory_halvings")


def _merge(notes: dict, note: dict) -> None:
    """A finished unit's notes into the pass's: counts summed; a fallback (the log-prob head or prefix
    sharing off) kept once any unit took it."""
    for k, v in note.items():
        if k in SUMMED:
            notes[k] = notes.get(k, 0) + v
        elif k in ("logprob_head", "prefix_sharing") and k in notes and notes[k] != v:
            notes[k] = v if notes[k] in ("fused", "on") else notes[k]
        elif k == "prefix_attention" and k in notes and notes[k] != v:  # every way any unit took
            ways = (set(notes[k].split(" and ")) | set(v.split(" and "))) - {"none"}
            notes[k] = " and ".join(sorted(ways)) or "none"
        else:
            notes[k] = v


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

"""--tp N: one model pass over N tensor-parallel ranks that this process starts and supervises.

Each rank is a process of its own (torch.distributed: NCCL on GPUs, gloo on CPU) that loads the
model with transformers' own tensor parallelism (`distributed_config` where the installed version
has it, else `tp_plan="auto"`) and runs the same batches in the same order. This process is not a
rank: it holds the store and the results, and rank 0 sends it each batch's outputs (every rank
computes the same replicated outputs). Keeping the supervisor out of the collectives is what keeps
one rank's failure from hanging the others: a rank that runs out of memory says so and stops; the
supervisor then stops every rank, cuts that batch in half and starts the group again on what is
left, so every rank always runs exactly the same batches (the decisions are made in one place).
A rank that dies is one line naming it; the batches finished before are kept by the store's
partial entry (store.caching), so the same command resumes.

The DPO scorer keeps the LM head vocabulary-sharded (scorers.dpo.lm_head_of): each rank reduces its
rows to (max, sum-exp) partials and the target's logit, merged over the group
(kernels.logprob_sharded), which measured never slower than gathering the head.
"""

from __future__ import annotations

import os
import tempfile
import time
from multiprocessing.connection import wait

from ..errors import UsageError, one_line
from ..inputs.batching import halves

KILL_ENV = "RMBENCH_FAULT_KILL_RANK"  # "RANK:BATCHES": that rank SIGKILLs itself after that many batches (drills)
OOM_ENV = "RMBENCH_FAULT_OOM_RANK"  # "RANK:BATCH": that rank's first group runs out of memory at that batch (drills)


def _load(job, device):
    """The model of `job` over the process group, as its scorer loads it (an adapter's own class and
    head included) with transformers' tensor-parallel plan applied (models.placement.TensorParallel)."""
    from ..models.placement import TensorParallel, placed

    with placed(TensorParallel(job["n"])):
        return job["scorer"].load(job["path"], job["dtype"], device, job["trust_remote_code"],
                                  job["allow_pickle_weights"])


def _sharded(model) -> int:
    """How many of the model's weights the plan split over the ranks (a DTensor sharded on some dim);
    the rest (an adapter's head, the norms) are replicated."""
    return sum(1 for p in model.parameters() if any(pl.is_shard() for pl in getattr(p, "placements", ())))


def _rank_main(rank: int, job: dict, conn) -> None:
    """One rank: join the group, load, run every batch of `job`; rank 0 sends the outputs."""
    import torch
    import torch.distributed as dist
    from datetime import timedelta

    from ..models.device import OUT_OF_MEMORY

    n = job["n"]
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(n), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(n))
    kill = os.environ.get(KILL_ENV, "")
    kill_rank, kill_after = (int(x) for x in kill.split(":")) if kill else (-1, -1)
    oom = os.environ.get(OOM_ENV, "") if job["attempt"] == 0 else ""
    oom_rank, oom_at = (int(x) for x in oom.split(":")) if oom else (-1, -1)
    try:
        if job["backend"] == "gloo":
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // n))  # the ranks share the cores
        dist.init_process_group(job["backend"], init_method=f"file://{job['rendezvous']}", rank=rank, world_size=n,
                                timeout=timedelta(minutes=30))
        t0 = time.perf_counter()
        scorer = job["scorer"]
        device = torch.device("cuda", rank) if job["backend"] == "nccl" else torch.device("cpu")
        if device.type == "cuda":
            torch.cuda.set_device(device)
        model = _load(job, device)
        info = {"class": type(model).__name__, "load_s": time.perf_counter() - t0, "tp": n,
                "tp_backend": job["backend"], "tp_sharded_weights": _sharded(model)}
        run = scorer.batch_fn(model, device)
        with torch.inference_mode():
            for k, batch in enumerate(job["todo"]):
                if rank == kill_rank and k == kill_after:
                    os.kill(os.getpid(), 9)
                try:
                    if rank == oom_rank and k == oom_at:
                        raise torch.OutOfMemoryError("out of memory (injected)")
                    out = run(job["seqs"], batch, None)
                except OUT_OF_MEMORY:
                    conn.send(("oom", k))
                    return
                if rank == 0:
                    conn.send(("batch", k, out))
        conn.send(("done", {**info, **getattr(run, "info", {})}))
        dist.destroy_process_group()
    except BaseException as e:  # noqa: BLE001  (whatever it is, the supervisor reports it in one line)
        try:
            conn.send(("error", one_line(e) if isinstance(e, UsageError) else f"{type(e).__name__}: {e}"))
        except (OSError, ValueError):
            pass


def _handle(msg, r: int, job: dict, arrays: dict, on_batch, done: dict, got: set):
    """One message from rank r: a batch's outputs (got: the indices received), its end, or why it
    stopped. Returns the index of the batch that ran out of memory, else None."""
    kind = msg[0]
    if kind == "batch":
        got.add(msg[1])
        batch = job["todo"][msg[1]]
        for name, values in msg[2].items():
            arrays[name][batch.indices] = values
        on_batch(batch)
    elif kind == "done":
        done[r] = msg[1]
    elif kind == "oom":
        return msg[1]
    else:
        raise UsageError(f"--tp {job['n']}: rank {r} failed: {msg[1]}")
    return None


def _take_finished(conn, failed: int, job: dict, arrays: dict, on_batch, got: set) -> None:
    """Every batch before `failed` from rank 0, which sent each before it began the next: those not
    read yet are finished work (taken, not run again); one missing is an error, never a zero score."""
    while not set(range(failed)) <= got:
        try:
            msg = conn.recv()
        except EOFError:
            break
        if msg[0] != "batch":
            break
        _handle(msg, 0, job, arrays, on_batch, {}, got)
    if not set(range(failed)) <= got:
        raise UsageError(f"--tp {job['n']}: rank 0 stopped before sending batches it had finished; the batches "
                         "kept before are in the store: the same command resumes")


def _run_group(job: dict, arrays: dict, on_batch) -> tuple[dict, int | None]:
    """Start the ranks on job["todo"] and take rank 0's outputs until every rank finishes (rank 0's
    info, None) or one runs out of memory ({}, the index of its batch)."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    n = job["n"]
    pipes = [ctx.Pipe(duplex=False) for _ in range(n)]
    procs = [ctx.Process(target=_rank_main, args=(r, job, pipes[r][1]), daemon=True) for r in range(n)]
    for p in procs:
        p.start()
    for _, w in pipes:
        w.close()
    done: dict = {}
    got: set = set()
    live = {p.sentinel: r for r, p in enumerate(procs)}
    try:
        while len(done) < n:
            readers = {pipes[r][0]: r for r in live.values()}
            for ready in wait(list(readers) + list(live)):
                r = readers.get(ready, live.get(ready))
                if r is None or r not in live.values():
                    continue
                conn = pipes[r][0]
                while conn.poll():  # everything the rank sent before anything else
                    try:
                        msg = conn.recv()
                    except EOFError:
                        break
                    failed = _handle(msg, r, job, arrays, on_batch, done, got)
                    if failed is not None:
                        _take_finished(pipes[0][0], failed, job, arrays, on_batch, got)
                        return {}, failed
                if ready in live and ready not in readers:  # the process itself ended
                    del live[ready]
                    if r not in done:
                        raise UsageError(f"--tp {n}: rank {r} ended (exit code {procs[r].exitcode}) in the middle of "
                                         "the pass; the batches finished before are kept: the same command resumes")
        return done[0], None
    finally:
        for p in procs:  # the others wait in a collective for the one that stopped: end them all
            if p.is_alive():
                p.kill()
            p.join()


def tp_compute(prep, o, model_path: str):
    """compute(todo, arrays, on_batch) (store.caching) for a pass over `o.tp` ranks."""
    import torch

    def compute(todo, arrays, on_batch):
        t0 = time.perf_counter()
        delivered = []

        def took(batch):
            delivered.append(batch)
            on_batch(batch)

        cuda = prep.target.compute.type == "cuda"
        if cuda and torch.cuda.device_count() < o.tp:
            raise UsageError(f"--tp {o.tp}: this machine has {torch.cuda.device_count()} CUDA device(s)")
        halvings = 0
        with tempfile.TemporaryDirectory(prefix="rmbench-tp-") as tmp:
            remaining = list(todo)
            info = {}
            while remaining:
                rendezvous = os.path.join(tmp, f"group-{halvings}")
                job = {"n": o.tp, "backend": "nccl" if cuda else "gloo", "rendezvous": rendezvous,
                       "scorer": prep.scorer, "mode": prep.scorer.mode, "path": model_path,
                       "dtype": prep.dtype, "trust_remote_code": o.trust_remote_code,
                       "allow_pickle_weights": o.allow_pickle_weights,
                       "seqs": prep.seqs, "todo": remaining, "attempt": halvings}
                got, failed = _run_group(job, arrays, took)
                info = info or got
                if failed is None:
                    break
                batch = remaining[failed]  # every rank stopped there: the batches before it are done
                if len(batch.indices) == 1:
                    i = int(batch.indices[0])
                    raise UsageError(f"out of memory scoring {prep.name(i)} alone over --tp {o.tp} ranks: use a "
                                     "smaller --dtype or more ranks")
                halvings += 1
                remaining = halves(batch, prep.batch_lengths) + remaining[failed + 1:]
        import numpy as np

        want, have = np.concatenate([b.indices for b in todo]), np.concatenate([b.indices for b in delivered] or [[]])
        if set(want.tolist()) - set(have.astype(int).tolist()):  # never store a sequence no rank scored
            raise RuntimeError(f"--tp {o.tp}: {len(set(want.tolist()) - set(have.astype(int).tolist()))} sequence(s) "
                               "were not scored by the ranks")
        info.update(out_of_memory_halvings=halvings, batches_s=time.perf_counter() - t0 - info.get("load_s", 0.0))
        return info

    return compute

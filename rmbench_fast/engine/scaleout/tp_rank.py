"""One rank of a --tp group (engine.scaleout.tensor_parallel starts them): a process of its own that joins the
group (torch.distributed: NCCL on GPUs, one GPU a rank; gloo on CPU), loads the model as its scorer
does with transformers' tensor-parallel plan applied (models.placement.TensorParallel), and then
runs the lists of batches its supervisor sends, in the order sent, the same on every rank. Rank 0
sends each batch's outputs (every rank computes the same replicated outputs); every rank says when
a list is done. Out of memory: the rank says at which batch and stops (the supervisor restarts the
whole group). It runs until told to stop, or until its supervisor goes away.
"""

from __future__ import annotations

import os
import time

from ...errors import UsageError, one_line

# "RANK:BATCHES[:PATH]": that rank SIGKILLs itself after that many batches (drills); with PATH, only
# the first rank to remove the file PATH does (one death among the groups of several Ray workers)
KILL_ENV = "RMBENCH_FAULT_KILL_RANK"
OOM_ENV = "RMBENCH_FAULT_OOM_RANK"  # "RANK:BATCH": that rank's first group runs out of memory at that batch (drills)


def _fault(variable: str, enabled: bool = True) -> tuple[int, int]:
    value = os.environ.get(variable, "") if enabled else ""
    return tuple(int(x) for x in value.split(":")[:2]) if value else (-1, -1)


def _kill_armed() -> bool:
    """Whether this rank, at its kill point, dies: always, or with a PATH only if it removes the file."""
    parts = os.environ.get(KILL_ENV, "").split(":", 2)
    if len(parts) < 3:
        return True
    try:
        os.remove(parts[2])
        return True
    except FileNotFoundError:
        return False


def _load(job, device):
    """The model of `job` over the process group, as its scorer loads it (an adapter's own class and
    head included) with transformers' tensor-parallel plan applied (models.placement.TensorParallel)."""
    from ...models.placement import TensorParallel, placed

    with placed(TensorParallel(job["n"])):
        return job["scorer"].load(job["path"], job["dtype"], device, job["trust_remote_code"],
                                  job["allow_pickle_weights"])


def _sharded(model) -> int:
    """How many of the model's weights the plan split over the ranks (a DTensor sharded on some dim);
    the rest (an adapter's head, the norms) are replicated."""
    return sum(1 for p in model.parameters() if any(pl.is_shard() for pl in getattr(p, "placements", ())))


def _die_with_parent() -> None:
    """Linux: this rank is killed when its supervisor dies (a Ray actor killed mid-unit), rather than
    wait in a collective holding its GPU."""
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def rank_main(rank: int, job: dict, conn) -> None:
    """Join the group, load, then run every (seqs, batches) received on `conn` until None arrives."""
    import torch
    import torch.distributed as dist
    from datetime import timedelta

    from ...models.device import OUT_OF_MEMORY

    n = job["n"]
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(n), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(n))
    kill_rank, kill_after = _fault(KILL_ENV)
    oom_rank, oom_at = _fault(OOM_ENV, job["attempt"] == 0)
    _die_with_parent()
    try:
        if job["backend"] == "gloo":
            torch.set_num_threads(max(1, job["threads"] // n))  # the ranks share the cores
        dist.init_process_group(job["backend"], init_method=f"file://{job['rendezvous']}", rank=rank, world_size=n,
                                timeout=timedelta(minutes=30))
        t0 = time.perf_counter()
        device = torch.device("cuda", rank) if job["backend"] == "nccl" else torch.device("cpu")
        if device.type == "cuda":
            torch.cuda.set_device(device)
        model = _load(job, device)
        conn.send(("ready",))
        info = {"class": type(model).__name__, "load_s": time.perf_counter() - t0, "tp": n,
                "tp_backend": job["backend"], "tp_sharded_weights": _sharded(model)}
        run = job["scorer"].batch_fn(model, device)
        count = 0  # batches this rank ran, over every list (the drills count in these)
        while True:
            try:
                work = conn.recv()
            except EOFError:  # the supervisor went away
                break
            if work is None:
                break
            seqs, todo = work
            with torch.inference_mode():
                for k, batch in enumerate(todo):
                    if rank == kill_rank and count == kill_after and _kill_armed():
                        os.kill(os.getpid(), 9)
                    try:
                        if rank == oom_rank and count == oom_at:
                            raise torch.OutOfMemoryError("out of memory (injected)")
                        out = run(seqs, batch, None)
                    except OUT_OF_MEMORY:
                        conn.send(("oom", k))
                        return
                    count += 1
                    if rank == 0:
                        conn.send(("batch", k, out))
            peak = {"peak_bytes": torch.cuda.max_memory_allocated(device)} if device.type == "cuda" else {}
            conn.send(("done", {**info, **getattr(run, "info", {}), **peak}))
        dist.destroy_process_group()
    except BaseException as e:  # noqa: BLE001  (whatever it is, the supervisor reports it in one line)
        try:
            conn.send(("error", one_line(e) if isinstance(e, UsageError) else f"{type(e).__name__}: {e}"))
        except (OSError, ValueError):
            pass

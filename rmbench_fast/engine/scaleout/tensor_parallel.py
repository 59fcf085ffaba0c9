"""--tp N: model passes over N tensor-parallel ranks that this process starts and supervises.

A Group is N rank processes (engine.scaleout.tp_rank) that load the model once with transformers' own
tensor parallelism and then run the lists of batches this process sends them: a local pass sends
its whole list once; a Ray worker (engine.scaleout.ray_worker) keeps a group over its GPUs and sends each
unit it is given. This process is not a rank: it holds the store and the results, and rank 0 sends
it each batch's outputs. Keeping the supervisor out of the collectives is what keeps one rank's
failure from hanging the others: a rank that runs out of memory says so and stops; the supervisor
then stops every rank, cuts that batch in half and starts the group again on what is left, so every
rank always runs exactly the same batches (the decisions are made in one place). A rank that dies
is one line naming it; the batches finished before are kept by the store's partial entry
(store.caching), so the same command resumes.

The DPO scorer keeps the LM head vocabulary-sharded (scorers.dpo.lm_head_of): each rank reduces its
rows to (max, sum-exp) partials and the target's logit, merged over the group
(kernels.logprob_sharded), which measured never slower than gathering the head.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from multiprocessing.connection import wait

import numpy as np

from ...errors import UsageError
from ...inputs.batching import halves
from .tp_rank import rank_main


class RankLost(RuntimeError):
    """A rank ended in the middle of a list (killed, or its node lost): the group is gone. A local pass
    reports it in one line (the store keeps what finished); a Ray worker dies with it, so that its
    unit goes to another worker."""


def group_job(scorer, model_path: str, dtype, n: int, cuda: bool, trust_remote_code: bool,
              allow_pickle_weights: bool, threads: int | None = None) -> dict:
    """What every rank of a group needs: the scorer (its loader and batch function), the model, and
    how the group talks (NCCL on GPUs, gloo on CPU; `threads`: the CPU cores the ranks share)."""
    return {"n": n, "backend": "nccl" if cuda else "gloo", "scorer": scorer, "path": model_path, "dtype": dtype,
            "trust_remote_code": trust_remote_code, "allow_pickle_weights": allow_pickle_weights,
            "threads": threads or os.cpu_count() or 1}


class Group:
    """N ranks holding one model, started at once and kept until close(); restarted (the model loaded
    again) after an out-of-memory error. Use as a context manager."""

    def __init__(self, job: dict):
        import torch

        n = job["n"]
        if job["backend"] == "nccl" and torch.cuda.device_count() < n:
            raise UsageError(f"--tp {n}: this machine has {torch.cuda.device_count()} CUDA device(s)")
        self.job, self.n, self.attempt, self.runs, self.ready = job, n, 0, 0, False
        self.tmp = tempfile.mkdtemp(prefix="rmbench-tp-")
        self.procs: list = []
        self._start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _start(self):
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        job = {**self.job, "rendezvous": os.path.join(self.tmp, f"group-{self.attempt}"), "attempt": self.attempt}
        pairs = [ctx.Pipe() for _ in range(self.n)]
        self.conns = [a for a, _ in pairs]
        self.procs = [ctx.Process(target=rank_main, args=(r, job, pairs[r][1]), daemon=True) for r in range(self.n)]
        for p in self.procs:
            p.start()
        for _, b in pairs:
            b.close()
        self.ready = False

    def _await_ready(self):
        """Every rank loaded (its ("ready",) message), before any work is sent: a rank that failed to
        load says why here (a send to it would block on a full pipe, or break)."""
        waiting = set(range(self.n))
        while waiting:
            handles = {self.conns[r]: r for r in waiting} | {self.procs[r].sentinel: r for r in waiting}
            for h in wait(list(handles)):
                r = handles[h]
                if r not in waiting:
                    continue
                if h is self.conns[r] or self.conns[r].poll():
                    try:
                        msg = self.conns[r].recv()
                    except EOFError:
                        msg = None
                    if msg is not None and msg[0] == "ready":
                        waiting.discard(r)
                        continue
                    if msg is not None and msg[0] == "error":
                        self._raise_error(r, msg[1])
                raise self._lost(r, "while loading the model")
        self.ready = True

    def _lost(self, r: int, when: str = "in the middle of the pass") -> RankLost:
        """Rank r ended without a word (killed, its node lost): every rank is stopped, and the error
        to raise says what the store kept."""
        code = self.procs[r].exitcode if self.procs else None
        self._stop()
        return RankLost(f"--tp {self.n}: rank {r} ended (exit code {code}) {when}; the batches finished before are "
                        "kept: the same command resumes")

    def _raise_error(self, r: int, text: str):
        """Rank r's one-line error, unless another rank was killed first (its peers then fail in a
        collective with "connection closed": the group was lost, not the input wrong)."""
        wait([p.sentinel for p in self.procs], timeout=1.0)
        killed = [k for k, p in enumerate(self.procs) if p.exitcode is not None and p.exitcode < 0]
        if killed:
            raise self._lost(killed[0])
        self._stop()
        raise UsageError(f"--tp {self.n}: rank {r} failed: {text}")

    def _stop(self):
        """Every rank ended: the others may wait in a collective for one that stopped, so none is asked."""
        for p in self.procs:
            if p.is_alive():
                p.kill()
            p.join()
        for c in self.conns:
            c.close()
        self.procs = []

    def close(self):
        for c in self.conns if self.procs else ():
            try:
                c.send(None)
            except (OSError, ValueError):
                pass
        for p in self.procs:
            p.join(timeout=10)
        self._stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def run(self, seqs, todo, lengths, arrays: dict, on_batch, name) -> dict:
        """Score `todo` (batches of indices into `seqs`) into `arrays`, calling on_batch(batch) after
        each; rank 0's info. lengths: the tokens of each sequence (to halve a batch); name(i): how
        errors name sequence i."""
        t0 = time.perf_counter()
        delivered: list = []

        def took(batch):
            delivered.append(batch)
            on_batch(batch)

        remaining, info, halvings, first = list(todo), {}, 0, self.attempt
        while remaining:
            got, failed = self._run(seqs, remaining, arrays, took)
            info = info or got
            if failed is None:
                break
            batch = remaining[failed]  # every rank stopped there: the batches before it are done
            self._stop()
            if len(batch.indices) == 1:
                raise UsageError(f"out of memory scoring {name(int(batch.indices[0]))} alone over --tp {self.n} "
                                 "ranks: use a smaller --dtype or more ranks")
            halvings += 1
            self.attempt += 1
            self._start()
            remaining = halves(batch, lengths) + remaining[failed + 1:]
        want = set(np.concatenate([b.indices for b in todo]).tolist()) if todo else set()
        have = set(np.concatenate([b.indices for b in delivered]).tolist()) if delivered else set()
        if want - have:  # never store a sequence no rank scored
            raise RuntimeError(f"--tp {self.n}: {len(want - have)} sequence(s) were not scored by the ranks")
        loading = info.get("load_s", 0.0) if first == 0 and not self.runs else 0.0  # the first list waited for it
        self.runs += 1
        return {**info, "out_of_memory_halvings": halvings, "batches_s": time.perf_counter() - t0 - loading}

    def _run(self, seqs, todo, arrays: dict, on_batch) -> tuple[dict, int | None]:
        """Send `todo` to every rank and take rank 0's outputs until every rank is done (rank 0's info,
        None) or one runs out of memory ({}, the index of its batch)."""
        if not self.ready:
            self._await_ready()
        for r, c in enumerate(self.conns):
            try:
                c.send((seqs, todo))
            except OSError:  # the rank is gone: its message, if it left one, says why
                self._await_gone(r)
        done: dict = {}
        got: set = set()
        live = {p.sentinel: r for r, p in enumerate(self.procs)}
        while len(done) < self.n:
            readers = {self.conns[r]: r for r in live.values()}
            for ready in wait(list(readers) + list(live)):
                r = readers.get(ready, live.get(ready))
                if r is None or r not in live.values():
                    continue
                conn = self.conns[r]
                while conn.poll():  # everything the rank sent before anything else
                    try:
                        msg = conn.recv()
                    except EOFError:
                        break
                    failed = self._handle(msg, r, todo, arrays, on_batch, done, got)
                    if failed is not None:
                        self._take_finished(failed, todo, arrays, on_batch, got)
                        return {}, failed
                if ready in live and ready not in readers:  # the process itself ended
                    del live[ready]
                    if r not in done:
                        raise self._lost(r)
        peaks = {str(r): i["peak_bytes"] for r, i in sorted(done.items()) if i.get("peak_bytes") is not None}
        first = {k: v for k, v in done[0].items() if k != "peak_bytes"}
        return {**first, **({"rank_peak_bytes": peaks} if peaks else {})}, None

    def _handle(self, msg, r: int, todo, arrays: dict, on_batch, done: dict, got: set):
        """One message from rank r: a batch's outputs (got: the indices received), its end, or why it
        stopped. Returns the index of the batch that ran out of memory, else None."""
        kind = msg[0]
        if kind == "batch":
            got.add(msg[1])
            batch = todo[msg[1]]
            for name, values in msg[2].items():
                arrays[name][batch.indices] = values
            on_batch(batch)
        elif kind == "done":
            done[r] = msg[1]
        elif kind == "oom":
            return msg[1]
        else:
            self._raise_error(r, msg[1])
        return None

    def _await_gone(self, r: int):
        try:
            msg = self.conns[r].recv() if self.conns[r].poll(1.0) else None
        except (EOFError, OSError):
            msg = None
        if msg is not None and msg[0] == "error":
            self._raise_error(r, msg[1])
        raise self._lost(r)

    def _take_finished(self, failed: int, todo, arrays: dict, on_batch, got: set) -> None:
        """Every batch before `failed` from rank 0, which sent each before it began the next: those not
        read yet are finished work (taken, not run again); one missing is an error, never a zero score."""
        while not set(range(failed)) <= got:
            try:
                msg = self.conns[0].recv()
            except EOFError:
                break
            if msg[0] != "batch":
                break
            self._handle(msg, 0, todo, arrays, on_batch, {}, got)
        if not set(range(failed)) <= got:
            self._stop()
            raise RankLost(f"--tp {self.n}: rank 0 stopped before sending batches it had finished; the batches "
                           "kept before are in the store: the same command resumes")


def tp_compute(prep, o, model_path: str):
    """compute(todo, arrays, on_batch) (store.caching) for a pass over `o.tp` ranks."""

    from .tp_preflight import tp_estimate

    def compute(todo, arrays, on_batch):
        estimate = tp_estimate(prep, o, model_path, todo)  # before any rank loads
        if o.preflight and estimate is not None and not estimate["fits"]:
            raise UsageError(estimate["refusal"])
        job = group_job(prep.scorer, model_path, prep.dtype, o.tp, prep.target.compute.type == "cuda",
                        o.trust_remote_code, o.allow_pickle_weights)
        try:
            with Group(job) as group:
                info = group.run(prep.seqs, todo, prep.batch_lengths, arrays, on_batch, prep.name)
        except RankLost as e:
            raise UsageError(str(e)) from None
        peaks = info.pop("rank_peak_bytes", None)
        measured = ({"peak_bytes": max(peaks.values()), "per_rank": peaks, "how": "torch.cuda.max_memory_allocated "
                     "in each rank since loading began"} if peaks else
                    {"peak_bytes": None, "how": "not measured in --tp ranks on the CPU"})
        return {**info, "memory": {"estimate": estimate, "measured": measured}}

    return compute

"""Ray workers: what a worker has (its device, asked once per run by distributed.probe_workers), the actor that
holds a model and scores units of batches, and the fault injection of tests and drills.

The driver does not compute, so it does not decide from its own device: before a run, one task
with a worker's resources reports the device, the GPU model and memory, and how --logprob-impl
resolves there. The run's dtype, token budget, store keys and run.json follow from that; every
worker then checks that it has the same, and one promised a GPU that sees none fails the run with
one line instead of computing on its CPU.
"""

from __future__ import annotations

import json
import os
import signal

import numpy as np

from ...errors import RmbenchError, UsageError


def _node() -> str:
    import ray

    return ray.get_runtime_context().get_node_id()


def _worker_target(device: str):
    """The Target of this worker process for the run's device ("cpu" or "cuda"): one line naming the
    node when a promised GPU is not there."""
    import socket

    from ...models.device import local_target, missing_gpu

    if device != "cpu":
        why = missing_gpu()
        if why:
            raise UsageError(f"a Ray worker promised a GPU (--gpus-per-worker) on node {_node()[:12]} "
                             f"({socket.gethostname()}) has {why}; give that node a GPU or run with "
                             f"--gpus-per-worker 0 on CPU workers")
    return local_target(device)


def check_worker_device(device: str) -> None:
    """In a Ray task: one line when the device the driver decided for the run is not here."""
    _worker_target(device)


def probe(device: str, logprob_impl: str) -> tuple:
    """Runs as a task with a worker's resources: the Target a worker has and how --logprob-impl
    resolves there (or why it cannot run there: the driver raises that if the run is a DPO run)."""
    from ...scorers import resolve_logprob_impl

    target = _worker_target(device)
    try:
        impl = resolve_logprob_impl(logprob_impl, target.compute)
    except UsageError as e:
        impl = e
    return target, impl


class Worker:
    """Holds one model on its device and scores units of batches with the run's scorer, through the
    same loop as a local pass (runner.run_batches)."""

    def __init__(self, scorer, model_path, dtype, target, trust_remote_code, allow_pickle, threads, tp=1):
        import torch

        self.node, self.error, self.group = _node(), None, None
        if threads:
            torch.set_num_threads(threads)
        try:  # a fault of input here is the run's, not this process's: score_unit raises it (one line, no retry)
            self._load(scorer, model_path, getattr(torch, dtype), target, trust_remote_code, allow_pickle, tp, threads)
        except RmbenchError as e:
            self.error = e

    def _load(self, scorer, model_path, dtype, target, trust_remote_code, allow_pickle, tp, threads):
        from ...scorers import resolve_logprob_impl
        from ..runner import load_for_pass

        here = _worker_target(target.device.type)
        if here.gpu != target.gpu:  # its keys would name another GPU than the one computing
            raise UsageError(f"a Ray worker on node {self.node[:12]} has {here.gpu or 'no GPU'}, the run was "
                             f"decided for {target.gpu or 'the CPU'}: give a run's workers one GPU model")
        self.device = here.compute
        self.scorer = scorer
        impl = getattr(scorer, "impl", None)
        if impl is not None:  # DPO: run.json names the log-prob path the worker asked first resolved
            mine = resolve_logprob_impl(impl, self.device)
            if mine != scorer.resolved:
                raise UsageError(f"--logprob-impl {impl} resolves to {mine} on node {self.node[:12]}, to "
                                 f"{scorer.resolved} on the worker asked first")
        if tp > 1:  # a tensor-parallel group over this worker's GPUs (or CPU cores), loaded once
            from .tensor_parallel import Group, group_job

            self.group = Group(group_job(scorer, model_path, dtype, tp, self.device.type == "cuda", trust_remote_code,
                                         allow_pickle, threads))
            return
        self.model, _ = load_for_pass(scorer, model_path, dtype, self.device, trust_remote_code, allow_pickle)

    def where(self) -> tuple[int, str]:
        return os.getpid(), self.node

    def score_unit(self, seqs, batches, batch_lengths, names, plan=None, max_tokens=None):
        """seqs: the unit's sequences (tokenize.Encoded); batches: (index list into them, max length);
        names: how errors name each; plan: the unit's (prefix, group, wave) arrays when prompt
        prefixes are shared."""
        from ...inputs.batching import Batch
        from ...inputs.prefix import PrefixKV, PrefixPlan
        from ..runner import run_batches

        if self.error is not None:
            raise self.error
        _maybe_die()
        n = len(seqs)
        local = [Batch(np.asarray(ix), m) for ix, m in batches]
        prefix = None
        if plan is not None:
            prefix = PrefixKV(self.model, [e.ids for e in seqs], PrefixPlan(*map(np.asarray, plan)), np.arange(n),
                              self.scorer.pad_id, self.device, max_tokens)
        arrays = {name: np.zeros((n, *shape)) for name, shape in self.scorer.outputs.items()}
        if self.group is not None:
            from .tensor_parallel import RankLost

            try:
                info = self.group.run(seqs, local, np.asarray(batch_lengths), arrays, lambda b: None,
                                      names.__getitem__)
            except RankLost:  # the group is gone: this worker dies with it, and its unit goes to another
                os._exit(1)
            return os.getpid(), arrays, info
        info = run_batches(self.scorer, self.model, seqs, local, arrays, self.device, np.asarray(batch_lengths),
                           names.__getitem__, None, prefix)
        if prefix is not None:  # as a local pass records it
            info.update(prefix_sharing=prefix.note, prefix_out_of_memory_halvings=prefix.oom_halvings,
                        prefix_attention=prefix.attention_kind())
        info.pop("first_batch_s", None)  # per unit, not per pass: run.json would show an arbitrary one
        return os.getpid(), arrays, info


def _armed(variable: str) -> str | None:
    """The marker file of a fault armed through environment `variable`, removed by the one worker
    that wins it; None when unset or not armed."""
    marker = os.environ.get(variable)
    if marker:
        try:
            os.remove(marker)  # only one worker wins the removal
            return marker
        except FileNotFoundError:
            return None
    return None


def _raylet() -> int:
    """The process id of this worker's raylet: the nearest ancestor process named so."""
    pid = os.getppid()
    while pid > 1:
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip() == "raylet":
                    return pid
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            break
    raise RuntimeError("RMBENCH_FAULT_KILL_RAYLET: no raylet among this worker's ancestor processes")


def _maybe_die():
    """Fault injection for tests and drills, armed by creating the file PATH:
    - RMBENCH_FAULT_KILL_WORKER=PATH set when Ray starts: the first worker to start a unit removes
      PATH, writes its process id to PATH.died and dies at once, like a killed process;
    - RMBENCH_FAULT_KILL_RAYLET=PATH set in one node's environment (`ray start`): the first worker
      of that node to start a unit removes PATH, writes {"pid", "raylet", "node"} to PATH.died,
      SIGKILLs its raylet (its node is lost) and dies."""
    marker = _armed("RMBENCH_FAULT_KILL_WORKER")
    if marker:
        with open(marker + ".died", "w") as f:
            f.write(str(os.getpid()))
        os._exit(1)
    marker = _armed("RMBENCH_FAULT_KILL_RAYLET")
    if marker:
        raylet = _raylet()
        with open(marker + ".died", "w") as f:
            json.dump({"pid": os.getpid(), "raylet": raylet, "node": _node()}, f)
        os.kill(raylet, signal.SIGKILL)
        os._exit(1)

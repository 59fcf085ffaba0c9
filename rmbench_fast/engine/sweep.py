"""`sweep`: every checkpoint of a training run, with the shared work done once.

Checkpoints are ordered by step. Each is scored by the engine into its own sub-folder; the result
store makes the reference model's pass and the tokenization happen once for all of them (K + 1
model passes for K DPO checkpoints instead of 2K), and makes a rerun after a crash recompute
nothing that finished. sweep.csv and sweep.json are rewritten after every checkpoint. The sweep
counts its model passes as distinct passes (Passes): the reference's once, however many checkpoints
use it, each either computed or found in the store, so that K DPO checkpoints report K + 1 passes.

Each checkpoint is compared with a baseline (the first, or --baseline) by a paired bootstrap on the
same prompts (engine.versus): neighbouring checkpoints differ by a point or two, which a domain's
~330 prompts move by sampling alone, so each row says whether its difference is more than that
("significant": the interval excludes 0).

Another benchmark than RM-Bench (--benchmark NAME, or detected from --data once for the sweep) goes
through engine.benchmark_sweep: rows of its own numbers, compared with the baseline on the same rows.
"""

from __future__ import annotations

import csv
import glob
import io
import json
import re
import time
from dataclasses import replace
from pathlib import Path

from ..errors import UsageError
from ..store.atomic import atomic_write_json, atomic_write_text
from .benchmarks import RM_BENCH, benchmark_of
from .benchmarks import check as check_benchmark
from .finished import finished_run
from .options import ScoreOptions
from .versus import Comparisons, baseline_index  # noqa: F401  (both long imported from here)

_STEP = re.compile(r"(?:checkpoint|step|ckpt|iter)[-_]?(\d+)$|(\d+)$", re.IGNORECASE)


def checkpoint_step(path: str) -> int | None:
    """The training step: trainer_state.json's global_step, else the number ending the folder's
    name (checkpoint-500, step_1000, ...), else None."""
    p = Path(path)
    state = p / "trainer_state.json"
    if state.is_file():
        try:
            step = json.loads(state.read_text()).get("global_step")
            if isinstance(step, int):
                return step
        except (OSError, ValueError):
            pass
    m = _STEP.search(p.name)
    return int(m.group(1) or m.group(2)) if m else None


def find_checkpoints(models: tuple[str, ...] = (), pattern: str | None = None) -> list[tuple[int | None, str]]:
    paths = list(models)
    if pattern:
        matched = sorted(p for p in glob.glob(pattern) if Path(p).is_dir())
        if not matched:
            raise UsageError(f"--checkpoints {pattern}: no folder matches")
        paths += matched
    if not paths:
        raise UsageError("give checkpoints with --model (several times) or --checkpoints GLOB")
    seen, out = set(), []
    for p in paths:
        key = str(Path(p).resolve()) if Path(p).exists() else p
        if key not in seen:
            seen.add(key)
            out.append((checkpoint_step(p), p))
    # by step; checkpoints without one keep their given order, after the numbered ones
    return sorted(out, key=lambda sp: (sp[0] is None, sp[0] if sp[0] is not None else 0))


class Passes:
    """The sweep's distinct model passes: a pass is named by its model's fingerprint (the reference's
    is the same for every checkpoint), computed when any checkpoint computed it, else from the store.
    Checkpoints read back from their folders look up no pass and add none."""

    def __init__(self):
        self.computed: dict[str, bool] = {}  # pass -> computed in this sweep
        self.roles: dict[str, str] = {}

    def add(self, role: str, info: dict) -> None:
        """One checkpoint's pass of `role` (run.json's models[role]: its fingerprint and `cached`)."""
        name = info.get("sha256") or info.get("stat_key") or f"{role}:{info.get('path')}"
        self.computed[name] = self.computed.get(name, False) or not info.get("cached", False)
        self.roles.setdefault(name, role)

    def add_run(self, run: dict) -> None:
        for role, info in (run.get("models") or {}).items():
            self.add(role, info)

    def counts(self) -> dict:
        """sweep.json's counts: model_passes (distinct), model_passes_computed, model_passes_cached
        (computed + cached = model_passes), reference_passes (those of a reference model)."""
        computed = sum(self.computed.values())
        return {"model_passes": len(self.computed), "model_passes_computed": computed,
                "model_passes_cached": len(self.computed) - computed,
                "reference_passes": sum(r == "ref_model" for r in self.roles.values())}


def passes_line(result: dict, n_checkpoints: int) -> str:
    """What the sweep's passes cost, as the command prints it: '4 model passes (3 checkpoints + 1
    reference): 0 computed, 4 from the result store'; checkpoints read back are said apart."""
    back = result["checkpoints_read_back"]
    if back == n_checkpoints:
        return (f"all {back} checkpoints finished before, read back from their folders or the result store: no model "
                "pass looked up")
    refs = result.get("reference_passes", 0)
    scored = n_checkpoints - back
    what = f"{scored} checkpoint{'s' if scored != 1 else ''}" + (f" + {refs} reference" if refs else "")
    line = (f"{result['model_passes']} model passes ({what}): {result['model_passes_computed']} computed, "
            f"{result['model_passes_cached']} from the result store")
    return line + (f"; {back} checkpoint{'s' if back != 1 else ''} finished before, read back" if back else "")


def _row(name: str, sub: str, path: str, step, summary: dict) -> dict:
    row = {"checkpoint": name, "dir": sub, "path": path, "step": step, "overall": summary["overall"],
           "hard": summary["hard"], "normal": summary["normal"], "easy": summary["easy"]}
    for d, acc in summary["domains"].items():
        row[f"{d}_avg"] = acc["avg"]
    return row


def _csv_row(row: dict) -> dict:
    """A sweep.json row flattened for sweep.csv: vs_baseline's overall difference, its interval and
    whether it excludes 0 (empty for the baseline, or while the baseline is not scored yet)."""
    out = {k: v for k, v in row.items() if k != "vs_baseline"}
    if "vs_baseline" in row:
        o = (row["vs_baseline"] or {}).get("metrics", {}).get("overall")
        for key, name in (("diff", "overall_diff"), ("low", "overall_diff_low"), ("high", "overall_diff_high"),
                          ("significant", "overall_significant")):
            out[name] = o[key] if o else None
    return out


def _write_tables(out: Path, rows: list[dict], meta: dict, flatten=None) -> None:
    """sweep.json and sweep.csv (rows flattened by `flatten`, default an RM-Bench row's _csv_row)."""
    atomic_write_json(out / "sweep.json", {**meta, "checkpoints": rows})
    buf = io.StringIO()
    flat = [(flatten or _csv_row)(r) for r in rows]
    fields = list(dict.fromkeys(k for r in flat for k in r))
    w = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    w.writeheader()
    w.writerows(flat)
    atomic_write_text(out / "sweep.csv", buf.getvalue())


def sweep_text(result: dict, root) -> str:
    """The table the command prints: results.plots' for RM-Bench, engine.benchmark_sweep's for another."""
    if "benchmark" in result:
        from .benchmark_sweep import table

        return table(result["checkpoints"])
    from ..results.plots import sweep_table

    return sweep_table(result["checkpoints"], root=root)


def _sub_dirs(checkpoints) -> list[str]:
    names, subs = set(), []
    for k, (_, path) in enumerate(checkpoints):
        name = Path(path).name or f"checkpoint-{k}"
        sub = name if name not in names else f"{k:03d}-{name}"
        names.add(sub)
        subs.append(sub)
    return subs


def run_sweep(o: ScoreOptions, checkpoints: list[tuple[int | None, str]], output: str, hooks=None, plots: bool = True,
              echo=print, baseline: str | None = None) -> dict:
    """Score each checkpoint in order into output/<name>; returns the sweep table. Every row is
    compared with the baseline checkpoint (the first, or `baseline`: a folder name, path or step)."""
    out = Path(output)
    subs = _sub_dirs(checkpoints)
    b = baseline_index(checkpoints, subs, baseline)
    name = benchmark_of(o)  # --benchmark, else detected from --data (one line when it is not RM-Bench)
    if name != RM_BENCH:
        o = replace(o, benchmark=name)  # detected once: its checkpoints' runs say nothing more
        check_benchmark(o, name)
    out.mkdir(parents=True, exist_ok=True)
    # the resamples of summary.json's intervals (--bootstrap; 0: no intervals, plain differences from the baseline)
    versus = Comparisons(b, subs[b], o.bootstrap)  # named by its sub-folder: unique among the checkpoints
    meta = {"options": {k: v for k, v in vars(o).items() if k != "model"}, "n_checkpoints": len(checkpoints),
            "started": time.strftime("%Y-%m-%d %H:%M:%S"), "baseline": versus.name}
    passes = Passes()
    if name != RM_BENCH:
        from .benchmark_sweep import run_benchmark_sweep
        rows = run_benchmark_sweep(o, name, checkpoints, subs, b, out, {**meta, "benchmark": name}, hooks, echo,
                                   passes, _write_tables)
        t0 = time.perf_counter()
        if plots and rows:
            from ..results.benchmark_plots import plot_benchmark_sweep
            plot_benchmark_sweep(out, rows)
        return {"benchmark": name, "checkpoints": rows, **passes.counts(), "checkpoints_read_back": 0,
                "plots_s": time.perf_counter() - t0}
    if o.engine == "ray":
        rows, reused = _sweep_on_ray(o, checkpoints, subs, out, meta, hooks, echo, versus, passes)
    else:
        store = None  # opened (and the scoring code imported) for the first checkpoint not finished before
        rows, reused = [], 0  # reused: checkpoints finished before, read back (engine.finished)
        reuse = {}  # the data and tokenizers every checkpoint shares, loaded once
        try:
            for k, ((step, path), sub) in enumerate(zip(checkpoints, subs)):
                echo(f"[{k + 1}/{len(checkpoints)}] {Path(path).name} (step {step if step is not None else '-'})")
                ck = replace(o, model=path, output=str(out / sub))
                run = finished_run(ck) if hooks is None else None
                if run is None:
                    from .score import open_store, score

                    store = store or open_store(o)
                    run = score(ck, store=store, hooks=hooks, reuse=reuse, read_back=False)
                if run.run.get("reused"):  # its passes were not looked up at all
                    reused += 1
                else:
                    passes.add_run(run.run)
                rows.append(_row(Path(path).name, sub, path, step, run.summary))
                samples = run.samples  # None: read back (its prompts' names from its results.json)
                versus.add(k, run.chosen, run.rejected, None if samples is None else [s.domain for s in samples],
                           out / sub, None if samples is None else [s.name for s in samples], run.summary)
                versus.fill(dict(enumerate(rows)))
                _write_tables(out, rows, {**meta, **passes.counts(), "checkpoints_read_back": reused})
        finally:
            if store is not None:
                store.close()
    plots_s = 0.0
    if plots and rows:
        from ..results.plots import plot_run

        t0 = time.perf_counter()
        plot_run(out)  # pictures whose inputs did not change are kept
        plots_s = time.perf_counter() - t0
    return {"checkpoints": rows, **passes.counts(), "checkpoints_read_back": reused, "plots_s": plots_s}


def _checkpoint_task(o: ScoreOptions, store_dir: str) -> dict:
    """One checkpoint on a Ray worker: the local engine against the shared store, on the device the
    driver decided (o.device) and this worker must have."""
    from ..store.entries import Store
    from .scaleout.ray_worker import check_worker_device
    from .score import score

    check_worker_device(o.device)
    store = Store(store_dir)
    try:
        run = score(o, store=store)
    finally:
        store.close()
    samples = run.samples  # None: a finished run read back (engine.finished), as on the local path
    return {"summary": run.summary, "models": run.run.get("models") or {},
            "reused": bool(run.run.get("reused")), "chosen": run.chosen, "rejected": run.rejected,
            "domains": None if samples is None else [s.domain for s in samples],
            "names": None if samples is None else [s.name for s in samples]}


def _sweep_on_ray(o: ScoreOptions, checkpoints, subs, out: Path, meta: dict, hooks, echo, versus: Comparisons,
                  passes: Passes):
    """The reference pass first, spread over every worker; then one task per checkpoint, each running
    the local engine on some worker against the shared result store."""
    from .scaleout.distributed import RayConfig, run_checkpoints_on_ray
    from .prepare import run_target
    from .score import model_pass, open_store, prepare

    if not o.cache:
        raise UsageError("--engine ray shares work through the result store: drop --no-cache (and put --cache-dir "
                         "on storage every worker sees)")
    store = open_store(o)
    cfg = RayConfig(o.ray_address, o.num_workers, o.gpus_per_worker)
    reused = 0
    reuse = {}
    target, _ = run_target(o, reuse)  # every task computes there, so every key names it
    try:
        if o.ref_model:
            echo(f"reference {o.ref_model}: one pass over {o.num_workers} workers")
            prep = prepare(replace(o, model=checkpoints[0][1]), store, reuse)
            ref = model_pass(prep, o, o.ref_model, "ref_model", store, hooks)
            passes.add("ref_model", ref.info)
    finally:
        store.close()
    jobs = [(k, replace(o, model=path, output=str(out / sub), engine="local", progress=False,
                        device=target.device.type))
            for k, ((_, path), sub) in enumerate(zip(checkpoints, subs))]
    rows = {}
    for k, result in run_checkpoints_on_ray(cfg, jobs, str(store.root), _checkpoint_task):
        step, path = checkpoints[k]
        if result.get("reused"):  # read back by the worker: its passes were not looked up at all
            reused += 1
        else:
            for role, info in result["models"].items():
                passes.add(role, info)
        rows[k] = _row(Path(path).name, subs[k], path, step, result["summary"])
        versus.add(k, result["chosen"], result["rejected"], result["domains"], out / subs[k], result.get("names"),
                   result["summary"])
        versus.fill(rows)
        echo(f"done {Path(path).name} (step {step if step is not None else '-'})")
        ordered = [rows[i] for i in sorted(rows)]
        _write_tables(out, ordered, {**meta, **passes.counts(), "checkpoints_read_back": reused})
    return [rows[i] for i in sorted(rows)], reused

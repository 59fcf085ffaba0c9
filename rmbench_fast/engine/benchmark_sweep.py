"""`sweep --benchmark NAME` (or detected from --data): every checkpoint scored as a run of another
benchmark than RM-Bench (reward-bench, reward-bench-2, pairs) into its own sub-folder, with the
rows of sweep.csv / sweep.json holding that benchmark's numbers (engine.benchmarks): `score`, each
subset and (RewardBench) each section, and vs_baseline, the paired comparison with the baseline
checkpoint on the same rows (engine.versus.BenchmarkComparisons, engine.benchmark_paired).

A benchmark run is never read back from its folder or the store as a finished run (engine.score
stamps RM-Bench runs only), so every checkpoint computes its numbers again, which the sweep says
once; its model passes still come from the result store when they are there (a reference model's
pass once for all the checkpoints, as in an RM-Bench sweep). --engine ray as for RM-Bench: the reference
pass first, spread over every worker, then one task per checkpoint, each running the local engine on some
worker against the shared result store; the rows are written as checkpoints finish, in step order.
Pictures and report.md: results.benchmark_plots (the score, sections or subsets against the step).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ..errors import UsageError

PREFIX = {"subsets": "subset:", "sections": "section:"}  # sweep.csv's column names for a subset / section


def bench_row(name: str, sub: str, path: str, step, summary: dict) -> dict:
    """A checkpoint's sweep.json row: its score, its subsets and sections (fractions)."""
    row = {"checkpoint": name, "dir": sub, "path": path, "step": step, "benchmark": summary["benchmark"],
           "n_rows": summary["n_rows"], "score": summary["score"]}
    if "score_with_prior_sets" in summary:
        row["score_with_prior_sets"] = summary["score_with_prior_sets"]
    for part, prefix in PREFIX.items():
        for k, v in (summary.get(part) or {}).items():
            row[f"{prefix}{k}"] = v
    return row


def csv_row(row: dict) -> dict:
    """A sweep.json row flattened for sweep.csv: the score's difference from the baseline, its
    interval, p and whether the interval excludes 0 (empty for the baseline, or while the baseline
    is not scored yet)."""
    out = {k: v for k, v in row.items() if k != "vs_baseline"}
    if "vs_baseline" in row:
        s = (row["vs_baseline"] or {}).get("score")
        for key in ("diff", "low", "high", "p", "significant"):
            out[f"score_{key}" if key != "diff" else "score_diff"] = s[key] if s else None
    return out


def run_benchmark_sweep(o, name: str, checkpoints, subs: list[str], b: int, out: Path, meta: dict, hooks, echo,
                        passes, write_tables) -> list[dict]:
    """Score each checkpoint in order (o: the sweep's options with o.benchmark set); returns the rows."""
    from ..tasks import get
    from .score import open_store, score
    from .versus import BenchmarkComparisons

    bench = get(name, **({"tie_credit": o.tie_credit} if name == "pairs" and o.tie_credit else {}))
    versus = BenchmarkComparisons(name, bench, b, subs[b], o.bootstrap)
    echo(f"--benchmark {name}: a benchmark run is never read back from its folder, so every checkpoint computes its "
         "numbers (its model passes come from the result store when stored there)")
    if o.engine == "ray":
        return _sweep_on_ray(o, checkpoints, subs, out, meta, hooks, echo, passes, write_tables, versus)
    rows: list[dict] = []
    store = open_store(o)
    reuse: dict = {}  # the data and tokenizers every checkpoint shares, loaded once
    try:
        for k, ((step, path), sub) in enumerate(zip(checkpoints, subs)):
            echo(f"[{k + 1}/{len(checkpoints)}] {Path(path).name} (step {step if step is not None else '-'})")
            ck = replace(o, model=path, output=str(out / sub))
            run = score(ck, store=store, hooks=hooks, reuse=reuse, read_back=False)
            passes.add_run(run.run)
            rows.append(bench_row(Path(path).name, sub, path, step, run.summary))
            versus.add(k, [s.row for s in run.samples], _scores(run), out / sub)
            versus.fill(dict(enumerate(rows)))
            write_tables(out, rows, {**meta, **passes.counts(), "checkpoints_read_back": 0}, csv_row)
    finally:
        store.close()
    return rows


def table(rows: list[dict]) -> str:
    """The printed sweep: per checkpoint its score, sections (else subsets) and the score's
    difference from the baseline with its interval (percent; * where it excludes 0)."""
    if not rows:
        return "no checkpoint scored"
    parts = [k for k in dict.fromkeys(k for r in rows for k in r) if k.startswith(PREFIX["sections"])]
    parts = parts or [k for k in dict.fromkeys(k for r in rows for k in r) if k.startswith(PREFIX["subsets"])]
    head = ["checkpoint", "step", "score", *(p.split(":", 1)[1] for p in parts), "vs baseline"]
    lines = [head]
    for r in rows:
        v = r.get("vs_baseline")
        s = (v or {}).get("score")
        said = ("baseline" if v is None and "vs_baseline" in r else "-" if s is None else
                f"{100 * s['diff']:+.2f}" + ("" if s["low"] is None else
                                             f" [{100 * s['low']:+.2f}, {100 * s['high']:+.2f}]")
                + (" *" if s["significant"] else ""))
        lines.append([r["checkpoint"], "-" if r["step"] is None else str(r["step"]), f"{100 * r['score']:.2f}",
                      *("-" if r.get(p) is None else f"{100 * r[p]:.2f}" for p in parts), said])
    widths = [max(len(x[c]) for x in lines) for c in range(len(head))]
    text = ["  ".join(x.ljust(widths[c]) if c == 0 else x.rjust(widths[c]) for c, x in enumerate(line)).rstrip()
            for line in lines]
    text.insert(1, "  ".join("-" * w for w in widths))
    return f"{rows[0]['benchmark']} (percent; vs baseline: paired bootstrap on the same rows, * = excludes 0)\n" + \
        "\n".join(text)


def _scores(run) -> list[list[float]]:
    """Each row's scores, its chosen responses' then its rejected ones' (versus.BenchmarkComparisons.add)."""
    return [list(c) + list(r) for c, r in zip(run.chosen, run.rejected)]


def _checkpoint_task(o, store_dir: str) -> dict:
    """One checkpoint on a Ray worker: the local engine against the shared store, on the device the
    driver decided (o.device) and this worker must have."""
    from ..store.entries import Store
    from .scaleout.ray_worker import check_worker_device
    from .score import score

    check_worker_device(o.device)
    store = Store(store_dir)
    try:
        run = score(o, store=store, read_back=False)
    finally:
        store.close()
    return {"summary": run.summary, "models": run.run.get("models") or {},
            "rows": [s.row for s in run.samples], "scores": _scores(run)}


def _sweep_on_ray(o, checkpoints, subs, out: Path, meta: dict, hooks, echo, passes, write_tables, versus):
    """sweep._sweep_on_ray's plan for a benchmark: the reference pass over every worker, then a task per checkpoint."""
    from .prepare import run_target
    from .scaleout.distributed import RayConfig, run_checkpoints_on_ray
    from .score import model_pass, open_store, prepare

    if not o.cache:
        raise UsageError("--engine ray shares work through the result store: drop --no-cache (and put --cache-dir "
                         "on storage every worker sees)")
    store = open_store(o)
    reuse: dict = {}
    target, _ = run_target(o, reuse)  # every task computes there, so every key names it
    try:
        if o.ref_model:
            echo(f"reference {o.ref_model}: one pass over {o.num_workers} workers")
            prep = prepare(replace(o, model=checkpoints[0][1]), store, reuse)
            passes.add("ref_model", model_pass(prep, o, o.ref_model, "ref_model", store, hooks).info)
    finally:
        store.close()
    jobs = [(k, replace(o, model=path, output=str(out / sub), engine="local", progress=False,
                        device=target.device.type))
            for k, ((_, path), sub) in enumerate(zip(checkpoints, subs))]
    rows: dict = {}
    for k, result in run_checkpoints_on_ray(RayConfig(o.ray_address, o.num_workers, o.gpus_per_worker), jobs,
                                            str(store.root), _checkpoint_task):
        step, path = checkpoints[k]
        for role, info in result["models"].items():
            passes.add(role, info)
        rows[k] = bench_row(Path(path).name, subs[k], path, step, result["summary"])
        versus.add(k, result["rows"], result["scores"], out / subs[k])
        versus.fill(rows)
        echo(f"done {Path(path).name} (step {step if step is not None else '-'})")
        write_tables(out, [rows[i] for i in sorted(rows)], {**meta, **passes.counts(), "checkpoints_read_back": 0},
                     csv_row)
    return [rows[i] for i in sorted(rows)]

"""The table of a comparison of another benchmark's runs (engine.benchmark_compare's dict): a
legend of the runs (with the rows each has beyond the common ones, counted and named), one line per
number (score, RewardBench's sections, each subset: every run's value and interval, every pair's
difference with its paired interval and p, * where the interval excludes 0), then per pair the rows
whose results differ most.
"""

from __future__ import annotations

from .compare import aligned, table_row


def _lines(result: dict) -> list[tuple[str, tuple]]:
    """(label, path into a run's / a pair's numbers) in table order."""
    first = next(iter(result["runs"].values()))
    out = [("score", ("score",))]
    if "score_with_prior_sets" in first:
        out.append(("score (with prior sets)", ("score_with_prior_sets",)))
    out += [(f"section {k}", ("sections", k)) for k in first.get("sections") or {}]
    out += [(f"subset {k}", ("subsets", k)) for k in first["subsets"]]
    return out


def _at(d: dict, path: tuple):
    for k in path:
        d = d[k]
    return d


def format_bench_comparison(result: dict) -> str:
    names = list(result["runs"])
    label = {n: chr(ord("A") + i) if i < 26 else f"R{i}" for i, n in enumerate(names)}
    rows, method = result["rows"], result["method"]
    subsets = ", ".join(f"{k} {n}" for k, n in rows["subsets"].items())
    lines = [f"{result['benchmark']}: {len(names)} runs compared on {rows['common']} common rows ({subsets})"]
    for n in names:
        left = rows["left_out"][n]
        said = (f"  ({left} row(s) not in every run left out: {', '.join(rows['only_in'][n])}"
                f"{', ...' if left > len(rows['only_in'][n]) else ''})" if left else "")
        lines.append(f"  {label[n]}  {n}{said}")
    level = f"{100 * method['level']:g}%"
    if method["resamples"]:
        lines.append(f"{level} intervals: {method['intervals']}; differences: {method['kind']}, two-sided p "
                     f"({method['resamples']} resamples, seed {method['seed']}); * = the interval excludes 0; percent")
    else:
        lines.append("no intervals (--bootstrap 0): values and differences only; percent")
    held = sorted({s for p in result["pairs"] for s in p.get("held", [])})
    if held and method["resamples"]:
        lines.append(f"held at their value in every resample (scored from all their rows together): {', '.join(held)}")
    head = ["number"] + [label[n] for n in names]
    for pair in result["pairs"]:
        head += [f"{label[pair['b']]}-{label[pair['a']]}", "p"]
    table = [head]
    for title, path in _lines(result):
        table.append(table_row(title, [_at(result["runs"][n], path) for n in names],
                               [_at(pair, path) for pair in result["pairs"]]))
    lines.append("")
    lines += aligned(table)
    for pair in result["pairs"]:
        a, b = label[pair["a"]], label[pair["b"]]
        found = pair["disagreements"]
        lines.append("")
        if not found:
            lines.append(f"{b} and {a} have the same result on every row")
            continue
        lines.append(f"{len(found)} row(s) whose results differ most between {b} and {a} (subset/id: {a} -> {b}):")
        lines += [f"  {x['subset']}/{x['id']}: {x['a']:.3g} -> {x['b']:.3g}" for x in found]
    return "\n".join(lines)

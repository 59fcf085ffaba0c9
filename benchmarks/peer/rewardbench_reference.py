"""rewardbench 0.1.4's own numbers for given response scores: what tests/test_tasks_*.py compare
rmbench_fast.tasks with. Runs in the peer environment (benchmarks/peer/.venv: rewardbench 0.1.4 from
PyPI, datasets, pandas); reads one JSON object on stdin, writes one on stdout.

    {"cases": [{"kind": "constants"}
               | {"kind": "v1", "rows": [{"subset", "id", "chosen", "rejected"}]}   # two scores a row
               | {"kind": "v2", "rows": [{"subset", "id", "scores": [..], "num_correct"}]}
               | {"kind": "sections", "metrics": {subset: accuracy}}]}
    -> {"results": [one object a case]}

v1 does what scripts/run_rm.py (and run_dpo.py, the same lines) does once the scores are in: the
per-row results (`1 if chosen > rejected else 0`), the dataset with its subset column, np.unique's
subsets each filtered and counted, then `calculate_scores_per_section(EXAMPLE_COUNTS, SUBSET_MAPPING,
results_grouped)`; and, where every section has a subset, the leaderboard's average from
analysis/get_benchmark_results.py's `get_average_over_rewardbench` (the prior sets from the same
results). v2 does what scripts/run_v2.py does: the unrolled dataset (text, subset, id, scores),
`reroll_and_score_dataset`, num_correct added, and per subset either `process_single_model` (Ties)
or the sum of the results over the rows. Nothing here computes a number itself.
"""

from __future__ import annotations

import ast
import inspect
import json
import math
import sys
import warnings

import numpy as np
import pandas as pd
from datasets import Dataset

from rewardbench.constants import EXAMPLE_COUNTS, SUBSET_MAPPING
from rewardbench.utils import calculate_scores_per_section, process_single_model, reroll_and_score_dataset


def constants():
    """The constants, and the literals of get_average_over_rewardbench (pref_columns, weights)."""
    from analysis import get_benchmark_results

    literals = {}
    tree = ast.parse(inspect.getsource(get_benchmark_results.get_average_over_rewardbench))
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id in ("pref_columns", "weights"):
                literals[node.targets[0].id] = ast.literal_eval(node.value)
    return {"EXAMPLE_COUNTS": EXAMPLE_COUNTS, "SUBSET_MAPPING": SUBSET_MAPPING, **literals}


def v1(rows):
    scores_chosen = [r["chosen"] for r in rows]
    scores_rejected = [r["rejected"] for r in rows]
    subsets = [r["subset"] for r in rows]
    # run_rm.py: "log results"
    results = []
    [results.append(1) if chosen > rejected else results.append(0)
     for chosen, rejected in zip(scores_chosen, scores_rejected)]
    out_dataset = Dataset.from_dict({"text_chosen": ["c"] * len(rows), "text_rejected": ["r"] * len(rows)})
    out_dataset = out_dataset.add_column("results", results)
    out_dataset = out_dataset.add_column("subset", subsets)
    out_dataset = out_dataset.add_column("id", [str(r["id"]) for r in rows])
    results_grouped = {}
    for subset in np.unique(subsets):
        subset_dataset = out_dataset.filter(lambda example: example["subset"] == subset)
        num_correct = sum(subset_dataset["results"])
        num_total = len(subset_dataset["results"])
        results_grouped[str(subset)] = num_correct / num_total
    out = {"results": results, "subsets": results_grouped,
           "sections": calculate_scores_per_section(EXAMPLE_COUNTS, SUBSET_MAPPING, results_grouped)}
    if all(any(t in results_grouped for t in tests) for tests in SUBSET_MAPPING.values()):
        out["leaderboard"] = leaderboard(results_grouped)
    return out


def leaderboard(results_grouped):
    from analysis.get_benchmark_results import get_average_over_rewardbench

    pref = constants()["pref_columns"]
    core = {k: v for k, v in results_grouped.items() if k in EXAMPLE_COUNTS}
    df = pd.DataFrame([{"model": "m", "model_type": "Seq. Classifier", **core}])
    prior = {k: results_grouped.get(k, math.nan) for k in pref}
    present = any(k in results_grouped for k in pref)
    df_prefs = pd.DataFrame([{"model": "m" if present else "other", **prior}])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # nanmean of no prior set
        table = get_average_over_rewardbench(df, df_prefs)
    row = table.iloc[0]
    return {k: float(row[k]) for k in ["average", *SUBSET_MAPPING, "Prior Sets (0.5 weight)"]}


def v2(rows):
    text, subsets, ids, scores = [], [], [], []
    for r in rows:
        for j, s in enumerate(r["scores"]):
            text.append(f"{r['id']}/{j}")
            subsets.append(r["subset"])
            ids.append(r["id"])
            scores.append(s)
    total_completions = [len(r["scores"]) for r in rows]
    num_correct = [r["num_correct"] for r in rows]
    # run_v2.py: the dataset after scoring, then "Print & process results"
    out_dataset = Dataset.from_dict({"text": text})
    out_dataset = out_dataset.add_column("subset", subsets)
    out_dataset = out_dataset.add_column("id", ids)
    out_dataset = out_dataset.add_column("scores", scores)
    out_dataset = reroll_and_score_dataset(out_dataset, total_completions, cols_to_combine=["text", "scores"])
    out_dataset = out_dataset.add_column("num_correct", num_correct)
    per_row = [float(x) for x in out_dataset["results"]]
    results_grouped = {}
    for subset in np.unique(subsets):
        subset_dataset = out_dataset.filter(lambda example: example["subset"] == subset)
        if subset.lower() == "ties":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # np.mean of nothing: NaN
                _, overall_score = process_single_model(subset_dataset)
            results_grouped[str(subset)] = float(overall_score)
        else:
            num_correct = sum(subset_dataset["results"])
            num_total = len(subset_dataset["results"])
            results_grouped[str(subset)] = num_correct / num_total
    return {"results": per_row, "subsets": results_grouped}


def main():
    request = json.load(sys.stdin)
    handlers = {"constants": lambda c: constants(), "v1": lambda c: v1(c["rows"]), "v2": lambda c: v2(c["rows"]),
                "sections": lambda c: calculate_scores_per_section(EXAMPLE_COUNTS, SUBSET_MAPPING, c["metrics"])}
    out = {"results": [handlers[case["kind"]](case) for case in request["cases"]]}
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    from datasets.utils.logging import disable_progress_bar

    disable_progress_bar()
    main()

"""`judge --samples K` on other benchmarks than RM-Bench, against the scripted server whose verdicts
depend on each request's seed (so the K samples of one question differ), recomputed plainly here from
the rule: rb2-4way and rb2-ratings score the mean of K runs, run n taking sample n of every ask (a
ratings row's top share and Ties' score per run, then averaged: not from averaged ratings), with Ties'
formula from rewardbench 0.1.4's process_single_model in the peer environment; a pairwise protocol's
comparison credit is the mean over its orders and samples."""

import json
import re

import pytest
from click.testing import CliRunner

from rmbench_fast.cli.main import main
from rmbench_fast.judges import rb2
from rmbench_fast.judges.options import JudgeOptions
from rmbench_fast.judges.run import judge
from rewardbench_peer import peer

judge_server = pytest.importorskip("judge_server")
pytest.importorskip("httpx2", reason="the openai backend needs httpx2 (pip install -e '.[judge]')")

REFERENCE = "tests/rb2_judge_reference.py"
K = 3
FOUR = {x: re.compile(rf"\[The Start of Assistant {x}'s Answer\]\n(.*?)\n\[The End of Assistant {x}'s Answer\]", re.S)
        for x in "ABCD"}
RATED = re.compile(r"\[Response\]\n(.*)\n\n\[Your judgement\]", re.S)
PAIR_A = re.compile(r"<\|The Start of Assistant A's Answer\|>\n(.*)\n<\|The End of Assistant A's Answer\|>", re.S)
PAIR_B = re.compile(r"<\|The Start of Assistant B's Answer\|>\n(.*)\n<\|The End of Assistant B's Answer\|>", re.S)


def four_rule(seed: int):
    """The letter named (None: no letter) for a 4-way prompt sent with this seed."""
    return None if seed % 7 == 0 else "ABCD"[(seed // 7) % 4]


def rating_rule(response: str, seed: int):
    """The rating given (None: none) to a response asked with this seed."""
    return (len(response) * 3 + seed) % 11 or None


def pair_rule(a: str, b: str, seed: int):
    return ["A", "B", "tie", None][(len(a) + 2 * len(b) + seed) % 4]


def reply(body):
    text, seed = body["messages"][-1]["content"], body["seed"]
    if "[The Start of Assistant D's Answer]" in text:
        w = four_rule(seed)
        return "I cannot choose." if w is None else f"Verdict: [[{w}]]"
    if "[Your judgement]" in text:
        r = rating_rule(RATED.search(text).group(1), seed)
        return "No rating." if r is None else f"Fine.\n\n{r}"
    w = pair_rule(PAIR_A.search(text).group(1), PAIR_B.search(text).group(1), seed)
    return "Both fine." if w is None else {"A": "\\boxed{A>B}", "B": "\\boxed{B>>A}", "tie": "\\boxed{A=B}"}[w]


@pytest.fixture
def server():
    s = judge_server.start_thread(reply=reply)
    yield s
    s.stop()


def write(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return str(path)


def rb2_rows():
    rows = []
    for n in range(8):
        rejected = ["r" * (1 + (n + k) % 5) for k in range(3)]
        rows.append({"id": n, "prompt": f"question {n}", "chosen": ["c" * (2 + n % 4)], "rejected": rejected,
                     "num_correct": 1, "num_incorrect": 3, "total_completions": 4, "models": [],
                     "subset": ["Focus", "Math"][n % 2]})
    ties = [("ref:1", ["aaaa"], ["bb", "ccccccccc"]), ("tied:1", ["dddd", "eeeee"], ["ff", "gg"]),
            ("ref:2", ["hhhhhhh"], ["iii"]), ("tied:2", ["jjjjjjj", "kkkkkkk", "lllll"], ["mm", "nnnnnnnnnnn"]),
            ("ref:3", ["o"], ["pppp", "q"]), ("tied:3", ["rrr", "sssssss"], ["t"])]
    for rid, c, r in ties:
        rows.append({"id": rid, "prompt": f"ties {rid}", "chosen": c, "rejected": r, "num_correct": len(c),
                     "num_incorrect": len(r), "total_completions": len(c) + len(r), "models": [], "subset": "Ties"})
    return rows


def run(server, data, out, **kw):
    return judge(JudgeOptions(model="judge-test", data=data, output=str(out), base_url=server.url, samples=K,
                              temperature=0.7, cache_dir=str(out.parent / "store"), progress=False, bootstrap=0,
                              **kw))


def share(ratings):
    """run_generative_v2.py's ratings value: the first response's share of the top valid rating."""
    valid = [r for r in ratings if r != -1]
    if not valid:
        return 0.25
    winners = [i for i, r in enumerate(ratings) if r == max(valid)]
    return (0 in winners) / len(winners)


def recompute(rows, asked):
    """Per run n: {row id: value} for non-Ties rows, and Ties' entries; from the rule and each ask's seed."""
    by_id = {str(r["id"]): r for r in rows}
    values = [{} for _ in range(K)]
    ratings = [{} for _ in range(K)]  # run -> row id -> {response: rating}
    for a in asked:
        rid, n, seed = a["row"].split("/")[1], a["sample"], a["sampling"]["seed"]
        r = by_id[rid]
        if a["kind"] == "4way":  # the chosen answer sits where the ask says it does
            assert FOUR[a["chosen_slot"]].search(a["messages"][-1]["content"]).group(1) == r["chosen"][0]
            w = four_rule(seed)
            values[n][rid] = 0.25 if w is None else float(w == a["chosen_slot"])
        else:
            rating = rating_rule((r["chosen"] + r["rejected"])[a["response"]], seed)
            ratings[n].setdefault(rid, {})[a["response"]] = -1 if rating is None else rating
    for n in range(K):
        for rid, got in ratings[n].items():
            if by_id[rid]["subset"] != "Ties":
                values[n][rid] = share([got[i] for i in range(len(got))])
    ties = [[{"id": by_id[rid]["id"], "scores": [got[i] for i in range(len(got))],
              "num_correct": by_id[rid]["num_correct"]} for rid, got in ratings[n].items()
             if by_id[rid]["subset"] == "Ties"] for n in range(K)]
    return values, ratings, ties


@pytest.mark.slow  # rewardbench 0.1.4's process_single_model in the peer environment's subprocess
def test_rb2_protocols_score_the_mean_of_k_runs(server, tmp_path):
    rows = rb2_rows()
    data = write(tmp_path / "rb2.jsonl", rows)
    got, runs = {}, {}
    for protocol in ("rb2-4way", "rb2-ratings"):
        out = tmp_path / protocol
        got[protocol] = run(server, data, out, protocol=protocol)
        asked = [json.loads(x) for x in (out / "judgements.jsonl").read_text().splitlines()]
        seeds = {}
        for a in asked:
            seeds.setdefault((a["row"], a.get("response")), set()).add(a["sampling"]["seed"])
        assert all(len(v) == K for v in seeds.values())  # K requests a question, each with its own seed
        slots = {}
        for a in asked:
            if a["kind"] == "4way":
                slots.setdefault(a["row"], {})[a["sample"]] = a["chosen_slot"]
        if protocol == "rb2-4way":  # each sample draws its own slot, sample 0 the one a single sample gets
            assert any(len(set(v.values())) > 1 for v in slots.values())
            assert all(v[0] == "ABCD"[rb2.slot(0, r.split("/")[0], r.split("/")[1])] for r, v in slots.items())
        runs[protocol] = recompute(rows, asked)
    ties_runs = [t for p in runs for t in runs[p][2]]
    # the averaged ratings, scored once: what the runs' mean must NOT be
    _, ratings, ties = runs["rb2-ratings"]
    averaged = [{**e, "scores": [sum(ratings[n][str(e["id"])][i] for n in range(K)) / K
                                 for i in range(len(e["scores"]))]} for e in ties[0]]
    ref = peer([REFERENCE], json.dumps({"ties_runs": ties_runs + [averaged]}))["ties_scores"]
    for k, protocol in enumerate(("rb2-4way", "rb2-ratings")):
        values, _, _ = runs[protocol]
        per_run = []
        for n in range(K):
            subsets = {}
            for r in rows:
                if r["subset"] != "Ties":
                    subsets.setdefault(r["subset"], []).append(values[n][str(r["id"])])
            numbers = {s: sum(x) / len(x) for s, x in subsets.items()}
            numbers["Ties"] = ref[k * K + n]
            per_run.append(numbers)
        summary = got[protocol].summary
        assert summary["samples"] == K
        again = json.loads(CliRunner().invoke(main, ["accuracy", str(tmp_path / protocol), "--json", "--bootstrap",
                                                     "0"]).output)  # the same numbers from results.jsonl alone
        assert {k: again[k] for k in ("score", "subsets", "samples", "per_sample")} == \
            {k: summary[k] for k in ("score", "subsets", "samples", "per_sample")}
        for n in range(K):
            assert summary["per_sample"][n]["subsets"] == pytest.approx(per_run[n], abs=1e-12)
            assert summary["per_sample"][n]["score"] == pytest.approx(sum(per_run[n].values()) / 3, abs=1e-12)
        want = {s: sum(p[s] for p in per_run) / K for s in per_run[0]}
        assert summary["subsets"] == pytest.approx(want, abs=1e-12)
        assert summary["score"] == pytest.approx(sum(sum(p.values()) / 3 for p in per_run) / K, abs=1e-12)
        assert len({p["Ties"] for p in per_run}) > 1 and len({p["Focus"] for p in per_run}) > 1  # runs differ
        # results.jsonl: every sample's values and result; the summary recomputes from them
        lines = [json.loads(x) for x in (tmp_path / protocol / "results.jsonl").read_text().splitlines()]
        for line in lines:
            rid = str(line["id"])
            assert len(line["samples"]) == K
            if line["subset"] == "Ties":
                assert line["result"] is None
                rated = runs[protocol][1]
                assert [s["ties_scores"] for s in line["samples"]] == [
                    [rated[n][rid][i] for i in range(len(rated[n][rid]))] for n in range(K)]
                continue
            assert [s["result"] for s in line["samples"]] == pytest.approx([values[n][rid] for n in range(K)])
            assert line["result"] == pytest.approx(sum(values[n][rid] for n in range(K)) / K)
    # ratings: the top share per run, averaged, is not the share of the averaged ratings (nor Ties')
    values = runs["rb2-ratings"][0]
    normal = [str(r["id"]) for r in rows if r["subset"] != "Ties"]
    mean_share = {rid: sum(values[n][rid] for n in range(K)) / K for rid in normal}
    of_means = {rid: share([sum(ratings[n][rid][i] for n in range(K)) / K for i in range(4)]) for rid in normal}
    assert mean_share != pytest.approx(of_means)
    assert got["rb2-ratings"].summary["subsets"]["Ties"] != pytest.approx(ref[-1])


def test_pairwise_samples_average_into_each_comparison(server, tmp_path):
    rows = [{"prompt": "p1", "chosen": ["aaaa", "bb"], "rejected": ["ccc"], "subset": "math"},
            {"prompt": "p2", "chosen": "dddddd", "rejected": "ee", "subset": "code"},
            {"prompt": "p3", "chosen": ["fff"], "rejected": ["ggg", "h", "iiiiiiii"], "subset": "math"}]
    got = run(server, write(tmp_path / "pairs.jsonl", rows), tmp_path / "out", benchmark="pairs", tie=0.5)
    asked = [json.loads(x) for x in (tmp_path / "out" / "judgements.jsonl").read_text().splitlines()]
    credit = {}
    for a in asked:
        user = a["messages"][-1]["content"]
        w = pair_rule(PAIR_A.search(user).group(1), PAIR_B.search(user).group(1), a["sampling"]["seed"])
        chosen = "A" if a["order"] == "chosen_first" else "B"
        value = 0.0 if w is None else 0.5 if w == "tie" else float(w == chosen)  # rmbench: invalid 0
        credit.setdefault((a["row"], a["better"], a["worse"]), []).append(value)
    assert {len(v) for v in credit.values()} == {2 * K}  # both orders, K samples each
    assert len({tuple(v) for v in credit.values()}) > 1 and any(len(set(v)) > 1 for v in credit.values())
    pooled = {}
    for (row, _, _), v in credit.items():
        pooled.setdefault(row.split("/")[0], []).append(sum(v) / len(v))
    every = [x for v in pooled.values() for x in v]
    assert got.summary["subsets"] == pytest.approx({k: sum(v) / len(v) for k, v in pooled.items()}, abs=1e-12)
    assert got.summary["score"] == pytest.approx(sum(every) / len(every), abs=1e-12)
    assert "per_sample" not in got.summary
    lines = [json.loads(x) for x in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    names = [f"{r['subset']}/{n}" for n, r in enumerate(rows)]
    assert [(names[n], c["better"], c["worse"]) for n, x in enumerate(lines) for c in x["comparisons"]] == list(credit)
    assert [c["credit"] for x in lines for c in x["comparisons"]] == pytest.approx(
        [sum(v) / len(v) for v in credit.values()], abs=1e-12)

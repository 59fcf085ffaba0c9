"""`rmbench-fast judge` on RewardBench v1, RewardBench 2 and users' pairs, end to end against the scripted
server (tests/judge_server.py) whose judge follows a known rule: verdict -> number, checked against
rewardbench 0.1.4's own functions in the peer environment (tests/rb2_judge_reference.py: generative_v2's
prompts, process_judgement, the rating parser, run_judge_ratings_multi; utils.process_single_model;
calculate_scores_per_section) and against the rules written plainly here."""

import hashlib
import json
import math
import re

import pytest
from click.testing import CliRunner

from rmbench_fast.judges.options import JudgeOptions
from rmbench_fast.judges.run import judge
from rewardbench_peer import official, peer

judge_server = pytest.importorskip("judge_server")
pytest.importorskip("httpx2", reason="the openai backend needs httpx2 (pip install -e '.[judge]')")

REFERENCE = "tests/rb2_judge_reference.py"
PAIR_A = re.compile(r"<\|The Start of Assistant A's Answer\|>\n(.*)\n<\|The End of Assistant A's Answer\|>", re.S)
PAIR_B = re.compile(r"<\|The Start of Assistant B's Answer\|>\n(.*)\n<\|The End of Assistant B's Answer\|>", re.S)
FOUR = {x: re.compile(rf"\[The Start of Assistant {x}'s Answer\]\n(.*?)\n\[The End of Assistant {x}'s Answer\]", re.S)
        for x in "ABCD"}
RATED = re.compile(r"\[Response\]\n(.*)\n\n\[Your judgement\]", re.S)


def pair_rule(a: str, b: str):
    """The longer answer wins, equal lengths tie, lengths summing to a multiple of 7: no verdict."""
    if (len(a) + len(b)) % 7 == 0:
        return None
    return "A" if len(a) > len(b) else "B" if len(b) > len(a) else "tie"


def rating_rule(text: str):
    """A rating of len % 11 (0: no rating at all)."""
    return len(text) % 11 or None


def reply(body):
    text = body["messages"][-1]["content"]
    if "[The Start of Assistant D's Answer]" in text:
        answers = [FOUR[x].search(text).group(1) for x in "ABCD"]
        if "nochoice" in text:
            return "I cannot choose between them."
        best = "ABCD"[max(range(4), key=lambda i: len(answers[i]))]
        # a letter quoted before the final one: process_judgement reads [[A]] first wherever it is
        return f"Unlike [[A]], ... final verdict: [[{best}]]" if "quoteA" in text else f"Verdict: [[{best}]]"
    if "[Your judgement]" in text:
        r = rating_rule(RATED.search(text).group(1))
        return "I cannot rate this." if r is None else f"Clear and correct.\n\n{r}\n"
    a, b = PAIR_A.search(text).group(1), PAIR_B.search(text).group(1)
    w = pair_rule(a, b)
    return "Both fine." if w is None else {"A": "\\boxed{A>B}", "B": "\\boxed{B>>A}", "tie": "\\boxed{A=B}"}[w]


@pytest.fixture
def server():
    s = judge_server.start_thread(reply=reply)
    yield s
    s.stop()


def write(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return str(path)


def v1_rows():
    subsets = ["alpacaeval-easy", "mt-bench-hard", "refusals-dangerous", "math-prm", "hep-python"]
    return [{"prompt": f"q{n}", "chosen": "c" * (3 + n % 5), "rejected": "r" * (2 + (n * 3) % 6), "subset": s,
             "id": n, "chosen_model": "x", "rejected_model": "y"} for n, s in enumerate(subsets * 3)]


def rb2_rows(quote=False):
    rows = []
    for n in range(8):
        chosen = ["c" * (4 + n % 3)]
        rejected = ["r" * (2 + (n + k) % 6) for k in range(3)]
        prompt = f"question {n}" + (" nochoice" if n == 5 else "") + (" quoteA" if quote and n % 2 else "")
        rows.append({"id": n, "prompt": prompt, "chosen": chosen, "rejected": rejected, "num_correct": 1,
                     "num_incorrect": 3, "total_completions": 4, "models": [], "subset": ["Focus", "Math"][n % 2]})
    ties = [("ref:1", ["aaaa"], ["bb", "ccccccccc"]), ("tied:1", ["dddd", "eeeee"], ["ff", "gg"]),
            ("ref:2", ["hhhhhhh"], ["iii"]), ("tied:2", ["jjjjjjj", "kkkkkkk", "lllll"], ["mm", "nnnnnnnnnnn"])]
    for rid, c, r in ties:
        rows.append({"id": rid, "prompt": f"ties {rid}", "chosen": c, "rejected": r, "num_correct": len(c),
                     "num_incorrect": len(r), "total_completions": len(c) + len(r), "models": [], "subset": "Ties"})
    return rows


def run(server, data, out, bootstrap=0, **kw):
    return judge(JudgeOptions(model="judge-test", data=data, output=str(out), base_url=server.url,
                              cache_dir=str(out.parent / "store"), progress=False, bootstrap=bootstrap, **kw))


def inside(intervals, summary):
    """Every interval holds its number (a bootstrap of the rows' results around them)."""
    lo, hi = intervals["score"]
    assert lo <= summary["score"] <= hi
    for k, (lo, hi) in intervals["subsets"].items():
        assert lo - 1e-12 <= summary["subsets"][k] <= hi + 1e-12


def pair_credit(better: str, worse: str, tie=0.0, invalid=0.0) -> float:
    """Both orders, as the rmbench protocol scores them."""
    vals = []
    for a, b, chosen in ((better, worse, "A"), (worse, better, "B")):
        w = pair_rule(a, b)
        vals.append(invalid if w is None else tie if w == "tie" else float(w == chosen))
    return sum(vals) / 2


@pytest.mark.slow  # rewardbench 0.1.4's functions in the peer environment's subprocess (5-10 s a call)
def test_reward_bench_pairwise_follows_sections(server, tmp_path):
    rows = v1_rows()
    got = run(server, write(tmp_path / "v1.jsonl", rows), tmp_path / "out", bootstrap=200)
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    inside(summary["intervals"], summary)
    assert set(summary["intervals"]["sections"]) == set(summary["sections"])
    assert summary["benchmark"] == "reward-bench" and got.run["asks"] == 2 * len(rows)
    per = {}
    for r in rows:
        per.setdefault(r["subset"], []).append(pair_credit(r["chosen"], r["rejected"]))
    subsets = {k: sum(v) / len(v) for k, v in per.items()}
    assert summary["subsets"] == pytest.approx(subsets, abs=1e-12)
    sections = official([{"kind": "sections", "metrics": subsets}])[0]
    for k in ("Chat", "Chat Hard", "Safety", "Reasoning"):
        assert summary["sections"][k] == pytest.approx(sections[k], abs=1e-12)
    assert summary["score"] == pytest.approx(sum(sections[k] for k in summary["sections"]) / 4, abs=1e-12)
    lines = [json.loads(x) for x in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert [x["result"] for x in lines] == pytest.approx([pair_credit(r["chosen"], r["rejected"]) for r in rows])


def test_pairs_pool_every_comparison(server, tmp_path):
    rows = [{"prompt": "p1", "chosen": ["aaaa", "bb"], "rejected": ["ccc"], "subset": "math"},
            {"prompt": "p2", "chosen": "dddddd", "rejected": "ee", "subset": "code"},
            {"prompt": "p3", "chosen": ["fff"], "rejected": ["ggg", "h", "iiiiiiii"], "subset": "math"}]
    run(server, write(tmp_path / "pairs.jsonl", rows), tmp_path / "out", benchmark="pairs", tie=0.5, bootstrap=200)
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    inside(summary["intervals"], summary)
    pooled = {}
    for r in rows:
        cs, rs = [r["chosen"]] if isinstance(r["chosen"], str) else r["chosen"], r["rejected"]
        rs = [rs] if isinstance(rs, str) else rs
        pooled.setdefault(r["subset"], []).extend(pair_credit(c, j, tie=0.5) for c in cs for j in rs)
    every = [x for v in pooled.values() for x in v]
    assert summary["subsets"] == pytest.approx({k: sum(v) / len(v) for k, v in pooled.items()}, abs=1e-12)
    assert summary["score"] == pytest.approx(sum(every) / len(every), abs=1e-12)
    assert summary["pairs"] == {"code": 1, "math": 5}
    # `accuracy` on the judge's run prints the numbers its summary holds
    from click.testing import CliRunner

    from rmbench_fast.cli.main import main
    got = CliRunner().invoke(main, ["accuracy", str(tmp_path / "out")])
    assert got.exit_code == 0, got.output
    assert got.output.splitlines()[-1].split() == ["score", f"{100 * summary['score']:.2f}"]


@pytest.mark.slow  # rewardbench 0.1.4's functions in the peer environment's subprocess (5-10 s a call)
def test_reward_bench_2_pairwise(server, tmp_path):
    rows = rb2_rows()
    run(server, write(tmp_path / "rb2.jsonl", rows), tmp_path / "out", bootstrap=200, tie=0.5, invalid="0.5")
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["official"] is False
    inside(summary["intervals"], summary)
    assert summary["intervals"]["held"] == ["Ties"]
    normal = {}
    ties = []
    for r in rows:
        resp = r["chosen"] + r["rejected"]
        if r["subset"] != "Ties":  # the chosen must beat every other response: the product of the credits
            normal.setdefault(r["subset"], []).append(
                math.prod(pair_credit(resp[0], x, tie=0.5, invalid=0.5) for x in resp[1:]))
            continue
        nc = r["num_correct"]
        credit = {(i, j): pair_credit(resp[i], resp[j], tie=0.5, invalid=0.5) for i in range(nc)
                  for j in range(nc, len(resp))}
        scores = [sum(c for (i, _), c in credit.items() if i == k) / (len(resp) - nc) if k < nc else
                  sum(1 - c for (_, j), c in credit.items() if j == k) / nc for k in range(len(resp))]
        ties.append({"id": r["id"], "scores": scores, "num_correct": nc})
    assert 0.25 in normal["Focus"]  # two half credits: the product, not the weakest credit
    want = {k: sum(v) / len(v) for k, v in normal.items()}
    want["Ties"] = peer([REFERENCE], json.dumps({"ties": ties}))["ties_score"]
    assert summary["subsets"] == pytest.approx(want, abs=1e-12)
    assert summary["score"] == pytest.approx(sum(want.values()) / 3, abs=1e-12)


def slot(seed, subset, rid):
    return hashlib.sha256(json.dumps([seed, subset, str(rid)]).encode()).digest()[0] % 4


@pytest.mark.slow  # rewardbench 0.1.4's functions in the peer environment's subprocess (5-10 s a call)
def test_four_way_numbers_slots_and_parse_errors(server, tmp_path):
    rows = rb2_rows(quote=True)
    got = run(server, write(tmp_path / "rb2.jsonl", rows), tmp_path / "a", protocol="rb2-4way", seed=3)
    asked = [json.loads(x) for x in (tmp_path / "a" / "judgements.jsonl").read_text().splitlines()]
    four = [a for a in asked if a["kind"] == "4way"]
    texts = [a["text"] for a in four] + [a["text"] for a in asked if a["kind"] == "rating"]
    ref = peer([REFERENCE], json.dumps({"texts": texts, "four_way": {"question": "Q", "answers": ["a", "b", "c", "d"]},
                                        "rating_prompt": {"question": "Q", "completion": "C"}}))
    # the messages are generative_v2's prompt; the chosen answer sits in the slot drawn from --seed
    from rmbench_fast.judges import rb2

    assert [m["content"] for m in rb2.four_way_messages("Q", ["a", "b", "c", "d"])] == ref["prompts"]["four_way"]
    assert rb2.rating_messages("Q", "C", False)[0]["content"] == ref["prompts"]["ratings"]
    assert rb2.rating_messages("Q", "C", True)[0]["content"] == ref["prompts"]["ratings_ties"]
    normal = [r for r in rows if r["subset"] != "Ties"]
    assert len(four) == len(normal)
    results = {}
    for a, r, winner in zip(four, normal, ref["four_way"]):
        s = slot(3, r["subset"], r["id"])
        assert a["chosen_slot"] == "ABCD"[s]
        assert FOUR["ABCD"[s]].search(a["messages"][-1]["content"]).group(1) == r["chosen"][0]
        want = 1 if winner == "ABCD"[s] else 0 if winner in "ABCD" else 0.25  # run_generative_v2.py's scoring
        assert a["value"] == want
        results.setdefault(r["subset"], []).append(want)
    assert 0.25 in [a["value"] for a in four]  # the row whose answer names no letter
    assert len({a["chosen_slot"] for a in four}) > 1
    # Ties is rated under the 4-way protocol too (run_generative_v2.py), failed ratings as -1
    rated = [a for a in asked if a["kind"] == "rating"]
    assert {a["row"].split("/")[0] for a in rated} == {"Ties"}
    ratings = ref["ratings"][len(four):]
    assert [a["value"] for a in rated] == ratings
    assert -1 in ratings
    ties, k = [], 0
    for r in rows[len(normal):]:
        n = len(r["chosen"]) + len(r["rejected"])
        ties.append({"id": r["id"], "scores": ratings[k:k + n], "num_correct": r["num_correct"]})
        k += n
    want = {s: sum(v) / len(v) for s, v in results.items()}
    want["Ties"] = peer([REFERENCE], json.dumps({"ties": ties}))["ties_score"]
    assert got.summary["subsets"] == pytest.approx(want, abs=1e-12)
    # the same --seed: the same slots (from the store); another seed draws others
    again = run(server, str(tmp_path / "rb2.jsonl"), tmp_path / "b", protocol="rb2-4way", seed=3)
    assert again.run["from_store"] == again.run["requests"] and again.summary["subsets"] == got.summary["subsets"]
    other = run(server, str(tmp_path / "rb2.jsonl"), tmp_path / "c", protocol="rb2-4way", seed=4)
    slots = [json.loads(x).get("chosen_slot") for x in (tmp_path / "c" / "judgements.jsonl").read_text().splitlines()]
    assert slots[:len(normal)] == ["ABCD"[slot(4, r["subset"], r["id"])] for r in normal]
    assert slots[:len(normal)] != [a["chosen_slot"] for a in four]
    assert other.run["four_way"]["chosen_slot"] == {x: slots[:len(normal)].count(x) for x in "ABCD"}


@pytest.mark.slow  # rewardbench 0.1.4's functions in the peer environment's subprocess (5-10 s a call)
def test_ratings_share_tied_top_and_fail_to_a_quarter(server, tmp_path):
    rows = rb2_rows()
    rows[0]["chosen"], rows[0]["rejected"] = ["cccc"], ["r", "zzzz", "rr"]  # a tie at the top rating: credit shared
    rows[2]["chosen"], rows[2]["rejected"] = ["x" * 11], ["y" * 22, "w" * 33, "v" * 44]  # every rating fails
    got = run(server, write(tmp_path / "rb2.jsonl", rows), tmp_path / "out", protocol="rb2-ratings")
    lines = [json.loads(x) for x in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    asked = [json.loads(x) for x in (tmp_path / "out" / "judgements.jsonl").read_text().splitlines()]
    normal = [r for r in rows if r["subset"] != "Ties"]
    texts = [[a["text"] for a in asked if a["row"] == f"{r['subset']}/{r['id']}"] for r in normal]
    ref = peer([REFERENCE], json.dumps({"ratings_rows": texts}))
    assert [x["result"] for x in lines[:len(normal)]] == pytest.approx(ref["rows_value"], abs=1e-12)
    assert ref["rows_value"][0] == 0.5 and ref["rows_value"][2] == 0.25  # the cases are there
    by = {}
    for r, v in zip(normal, ref["rows_value"]):
        by.setdefault(r["subset"], []).append(v)
    ties = [{"id": x["id"], "scores": x["ties_scores"], "num_correct": x["n_chosen"]} for x in lines[len(normal):]]
    assert all(isinstance(s, (int, float)) for t in ties for s in t["scores"])
    want = {s: sum(v) / len(v) for s, v in by.items()}
    want["Ties"] = peer([REFERENCE], json.dumps({"ties": ties}))["ties_score"]
    assert got.summary["subsets"] == pytest.approx(want, abs=1e-12)
    assert "official" not in got.summary


def test_detection_cli_and_refusals(server, tmp_path):
    from rmbench_fast.cli.main import main

    data = write(tmp_path / "rb2.jsonl", rb2_rows())
    args = ["judge", "--model", "judge-test", "--base-url", server.url, "--data", data, "--cache-dir",
            str(tmp_path / "store"), "--bootstrap", "0", "-q"]
    out = CliRunner().invoke(main, args + ["--output", str(tmp_path / "o"), "--protocol", "rb2-4way"])
    assert out.exit_code == 0, out.output
    assert "reward-bench-2" in out.output and "Ties" in out.output
    assert json.loads((tmp_path / "o" / "run.json").read_text())["benchmark"] == "reward-bench-2"
    asked = [json.loads(x) for x in (tmp_path / "o" / "judgements.jsonl").read_text().splitlines()]
    assert [a["value"] for a in asked if "nochoice" in a["messages"][-1]["content"]] == [0.25]  # no letter named
    v1 = write(tmp_path / "v1.jsonl", v1_rows())
    bad = CliRunner().invoke(main, args[:6] + [v1, "--protocol", "rb2-ratings"])
    assert bad.exit_code == 2 and "RewardBench 2's own protocol" in bad.output
    bad = CliRunner().invoke(main, args + ["--protocol", "rb2-4way", "--tie", "0.5"])
    assert bad.exit_code == 2 and "--tie" in bad.output
    for limit in ("0", "-1"):  # one line, not an empty run's ZeroDivisionError
        bad = CliRunner().invoke(main, args + ["--limit", limit])
        assert bad.exit_code == 2 and "--limit must be at least 1" in bad.output, bad.output


def test_domains_name_subsets(server, tmp_path):
    from rmbench_fast.errors import UsageError

    rows = v1_rows()
    data = write(tmp_path / "v1.jsonl", rows)
    got = run(server, data, tmp_path / "out", domains=("math-prm,hep-python",))
    want = [r for r in rows if r["subset"] in ("math-prm", "hep-python")]
    assert sorted(got.summary["subsets"]) == ["hep-python", "math-prm"] and got.run["n_prompts"] == len(want)
    assert got.summary["subsets"]["math-prm"] == pytest.approx(
        sum(pair_credit(r["chosen"], r["rejected"]) for r in want if r["subset"] == "math-prm") / 3)
    with pytest.raises(UsageError, match="--domains chat: no such subset"):
        run(server, data, tmp_path / "bad", domains=("chat",))


@pytest.mark.parametrize("data, kw", [("v1", {}), ("rb2", {}), ("rb2", {"protocol": "rb2-4way"}),
                                      ("rb2", {"protocol": "rb2-ratings"})])
def test_accuracy_recomputes_a_judge_run_from_its_results(server, tmp_path, data, kw):
    """`accuracy` on a judge run: the judge's numbers and intervals again from results.jsonl alone (a row's
    credit changed there moves them), with the validity rates of the summary.json beside it."""
    from click.testing import CliRunner

    from rmbench_fast.cli.main import main

    rows = v1_rows() if data == "v1" else rb2_rows()
    out = tmp_path / "out"
    run(server, write(tmp_path / "d.jsonl", rows), out, bootstrap=200, **kw)
    written = json.loads((out / "summary.json").read_text())
    got = CliRunner().invoke(main, ["accuracy", str(out), "--json", "--bootstrap", "200"])
    assert got.exit_code == 0, got.output
    again = json.loads(got.output)
    for key in ("benchmark", "score", "subsets", "sections", "counts", "intervals", "invalid_rate", "n_rows"):
        assert again.get(key) == written.get(key), key
    lines = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    first = next(n for n, x in enumerate(lines) if x["result"] is not None)
    rec = lines[first]
    if "comparisons" in rec:  # the row's result from 1 to 0, else to 1
        for k, c in enumerate(rec["comparisons"]):
            c["credit"] = (0.0 if k == 0 else 1.0) if rec["result"] == 1.0 else 1.0
    elif "four_way" in rec:
        rec["four_way"] = 1.0 - rec["four_way"]
    else:
        rec["ratings"] = [10.0] + [1.0] * (len(rec["ratings"]) - 1) if rec["result"] != 1.0 else [1.0, 10.0] + \
            [1.0] * (len(rec["ratings"]) - 2)
    (out / "results.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    moved = json.loads(CliRunner().invoke(main, ["accuracy", str(out), "--json", "--bootstrap", "0"]).output)
    assert moved["subsets"][rec["subset"]] != written["subsets"][rec["subset"]]

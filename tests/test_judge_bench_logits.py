"""`judge --verdict logits` on RewardBench v1, RewardBench 2 (with Ties) and users' pairs, with a tiny causal
LM judge: every ask's probability of the better response against a plain forward written here (each prompt
alone through the model, a softmax over the two verdict letters' logits at its last position), for the
comparisons each benchmark's rules name (written here too); then the summary against those rules recomputed
plainly from the probabilities (a comparison won when its mean over the two orders exceeds 0.5; reward-bench's
sections weighted by rewardbench 0.1.4's EXAMPLE_COUNTS, copied below; RewardBench 2's best-of-N and its Ties
formula, utils.process_single_model run in the peer environment; pairs pooled). --share-prefix (a row's asks
one group, groups of different sizes) gives the same numbers, the result store serves a rerun, and the
options logits cannot take are refused in one line."""

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from rmbench_fast.judges.options import JudgeOptions
from rmbench_fast.judges.protocols import get_protocol
from rmbench_fast.judges.run import judge
from rewardbench_peer import peer

WORDS = ("the answer is correct because proof follows from lemma code returns list sorted safely refuses harmful "
         "request polite helpful explains step by step wrong off one error bound loop question user asks how why "
         "what list numbers sum prime safe unsafe kindly declines writes python function").split()
# rewardbench 0.1.4 constants.py: the subsets used here, their EXAMPLE_COUNTS and SUBSET_MAPPING sections
COUNTS = {"alpacaeval-easy": 100, "mt-bench-easy": 28, "mt-bench-hard": 37, "llmbar-natural": 100,
          "refusals-dangerous": 100, "xstest-should-respond": 250, "math-prm": 984, "hep-python": 164}
SECTIONS = {"Chat": ["alpacaeval-easy", "mt-bench-easy"], "Chat Hard": ["mt-bench-hard", "llmbar-natural"],
            "Safety": ["refusals-dangerous", "xstest-should-respond"], "Reasoning": ["math-prm", "hep-python"]}
PROTOCOL = get_protocol("rmbench")
REFERENCE = "tests/rb2_judge_reference.py"


def words(rng, lo, hi):
    return " ".join(rng.choice(WORDS, int(rng.integers(lo, hi))))


def v1_rows():
    rng = np.random.default_rng(1)
    return [{"prompt": "Question: " + words(rng, 12, 20), "chosen": words(rng, 2, 10), "rejected": words(rng, 2, 10),
             "subset": s, "id": n, "chosen_model": "x", "rejected_model": "y"}
            for n, s in enumerate(sorted(COUNTS) * 2)]


def rb2_rows():
    rng = np.random.default_rng(2)
    rows = []
    for n in range(10):
        c, r = [words(rng, 2, 9)], [words(rng, 2, 9) for _ in range(3 if n % 3 else 2)]
        rows.append({"id": n, "prompt": "Question: " + words(rng, 12, 20), "chosen": c, "rejected": r,
                     "num_correct": 1, "num_incorrect": len(r), "total_completions": 1 + len(r), "models": [],
                     "subset": ["Focus", "Math"][n % 2]})
    for rid, nc, ni in (("ref:1", 1, 3), ("tied:1", 2, 2), ("ref:2", 1, 2), ("tied:2", 3, 2)):
        c, r = [words(rng, 2, 9) for _ in range(nc)], [words(rng, 2, 9) for _ in range(ni)]
        rows.append({"id": rid, "prompt": "Question: " + words(rng, 12, 20), "chosen": c, "rejected": r,
                     "num_correct": nc, "num_incorrect": ni, "total_completions": nc + ni, "models": [],
                     "subset": "Ties"})
    return rows


def pair_rows():
    rng = np.random.default_rng(3)
    shapes = [(2, 1, "math"), (1, 1, "code"), (1, 3, "math"), (3, 2, "code"), (2, 2, "math")]
    rows = [{"prompt": "Question: " + words(rng, 12, 20), "chosen": [words(rng, 2, 9) for _ in range(nc)],
             "rejected": [words(rng, 2, 9) for _ in range(nr)], "subset": s} for nc, nr, s in shapes]
    rows[1]["chosen"], rows[1]["rejected"] = rows[1]["chosen"][0], rows[1]["rejected"][0]  # plain strings too
    return rows


def as_list(x):
    return [x] if isinstance(x, str) else list(x)


def comparisons(bench, row):
    """(better, worse) indices into chosen + rejected, as each benchmark's rules read."""
    nc, n = len(as_list(row["chosen"])), len(as_list(row["chosen"])) + len(as_list(row["rejected"]))
    if bench == "reward-bench-2" and row["subset"] != "Ties":
        return [(0, k) for k in range(1, n)]  # best-of-N: the first chosen against every other response
    return [(i, j) for i in range(nc) for j in range(nc, n)]


def row_name(row, n):
    return f"{row['subset']}/{row.get('id', n)}"


def write(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return str(path)


@pytest.fixture(scope="module")
def judge_model(tmp_path_factory):
    from rmbench_fast.tiny.models import CHAT_TEMPLATE, build_model, llama_config, save_model, train_tokenizer

    texts = [" ".join(WORDS)] * 3 + ["\\boxed{A>B} \\boxed{B>A} [[A]] [[B]] Assistant A B"]
    tok = train_tokenizer(texts, vocab_size=300, chat_template=CHAT_TEMPLATE)
    model = build_model("lm", llama_config(vocab_size=len(tok), hidden=32, layers=2, heads=4, initializer_range=0.1), 3)
    with torch.no_grad():  # larger matrices: verdict probabilities spread over (0, 1), not all near one half
        for p in model.parameters():
            p.mul_(4.0 if p.dim() == 2 else 1.0)
    path = save_model(model, tok, tmp_path_factory.mktemp("judge") / "judge")
    return path, model.eval(), tok


def plain_p_better(judge_model, prompt, better, worse, better_first):
    """The prompt alone through the model; softmax over the logits of "A" and "B" after "\\boxed{"."""
    _, model, tok = judge_model
    a, b = (better, worse) if better_first else (worse, better)
    text = tok.apply_chat_template(PROTOCOL.messages(prompt, a, b), tokenize=False,
                                   add_generation_prompt=True) + "\\boxed{"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        z = model(torch.tensor([ids])).logits[0, -1].double()
    p_a = torch.softmax(z[[tok.convert_tokens_to_ids("A"), tok.convert_tokens_to_ids("B")]], 0)[0].item()
    return p_a if better_first else 1.0 - p_a


def run(judge_model, data, out, store, **kw):
    return judge(JudgeOptions(model=str(judge_model[0]), data=data, output=str(out), verdict="logits",
                              cache_dir=str(store), progress=False, max_tokens_per_batch=4096, **kw))


def read(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


def checked_credits(judge_model, bench, rows, out):
    """{(row name, better, worse): credit}: every ask of judgements.jsonl against the plain forward, both
    orders of each comparison the rules name and nothing else; a comparison won when its mean exceeds 0.5."""
    asked = {(x["row"], x["better"], x["worse"], x["order"]): x for x in read(out / "judgements.jsonl")}
    want, credits = {}, {}
    for n, r in enumerate(rows):
        responses = as_list(r["chosen"]) + as_list(r["rejected"])
        for i, j in comparisons(bench, r):
            ps = [plain_p_better(judge_model, r["prompt"], responses[i], responses[j], first)
                  for first in (True, False)]
            want[(row_name(r, n), i, j, "chosen_first")], want[(row_name(r, n), i, j, "rejected_first")] = ps
            credits[(row_name(r, n), i, j)] = float(np.mean(ps) > 0.5)
    assert set(asked) == set(want)
    got = np.array([asked[k]["p_chosen"] for k in want])
    np.testing.assert_allclose(got, list(want.values()), atol=1e-5, rtol=0)
    assert np.ptp(got) > 0.2  # verdicts that differ between asks: a wrong row or position would show
    for k, x in asked.items():
        assert len(x["verdict_logits"]) == 2 and x["value"] == credits[k[:3]]
    assert 0 < sum(credits.values()) < len(credits)  # comparisons won and lost
    return credits


def inside(summary):
    """Every interval holds its number (bench_run's bootstrap over rows within subsets)."""
    lo, hi = summary["intervals"]["score"]
    assert lo <= summary["score"] <= hi
    for k, (lo, hi) in summary["intervals"]["subsets"].items():
        assert lo - 1e-12 <= summary["subsets"][k] <= hi + 1e-12


def test_reward_bench_sections_from_logit_verdicts(judge_model, tmp_path):
    rows = v1_rows()
    got = run(judge_model, write(tmp_path / "v1.jsonl", rows), tmp_path / "out", tmp_path / "store", bootstrap=200)
    credits = checked_credits(judge_model, "reward-bench", rows, tmp_path / "out")
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary == got.summary and summary["benchmark"] == "reward-bench" and "official" not in summary
    per = {}
    for n, r in enumerate(rows):
        per.setdefault(r["subset"], []).append(credits[(row_name(r, n), 0, 1)])
    subsets = {k: sum(v) / len(v) for k, v in per.items()}
    assert summary["subsets"] == pytest.approx(subsets, abs=1e-12)
    sections = {s: sum(subsets[t] * COUNTS[t] for t in ts) / sum(COUNTS[t] for t in ts) for s, ts in SECTIONS.items()}
    assert summary["sections"] == pytest.approx(sections, abs=1e-12)
    assert summary["score"] == pytest.approx(sum(sections.values()) / 4, abs=1e-12)
    inside(summary)
    assert summary["invalid_rate"]["overall"] == 0 and summary["asked"]["overall"] == 2 * len(rows)
    lines = read(tmp_path / "out" / "results.jsonl")
    assert [x["result"] for x in lines] == [credits[(row_name(r, n), 0, 1)] for n, r in enumerate(rows)]
    r = got.run
    assert r["verdict"] == "logits" and r["benchmark"] == "reward-bench" and r["asks"] == 2 * len(rows)
    assert r["pass"]["cached"] is False and r["tokens"]["shared_prefix_saved"] == 0


@pytest.mark.slow  # rewardbench 0.1.4's process_single_model in the peer environment's subprocess (5-10 s)
def test_reward_bench_2_best_of_n_and_ties(judge_model, tmp_path):
    rows = rb2_rows()
    got = run(judge_model, write(tmp_path / "rb2.jsonl", rows), tmp_path / "out", tmp_path / "store",
              benchmark="reward-bench-2", bootstrap=200)
    credits = checked_credits(judge_model, "reward-bench-2", rows, tmp_path / "out")
    summary = got.summary
    assert summary["official"] is False and summary["benchmark"] == "reward-bench-2"
    assert summary["intervals"]["held"] == ["Ties"]
    inside(summary)
    normal, ties, results = {}, [], []
    for n, r in enumerate(rows):
        mine = {(i, j): c for (name, i, j), c in credits.items() if name == row_name(r, n)}
        if r["subset"] != "Ties":  # right when the first chosen beats every other response
            results.append(float(all(mine.values())))
            normal.setdefault(r["subset"], []).append(results[-1])
            continue
        nc, total = r["num_correct"], r["total_completions"]
        scores = [np.mean([c for (i, _), c in mine.items() if i == k]) if k < nc else
                  np.mean([1 - c for (_, j), c in mine.items() if j == k]) for k in range(total)]
        ties.append({"id": r["id"], "scores": [float(s) for s in scores], "num_correct": nc})
    assert 0 < sum(results) < len(results)
    lines = read(tmp_path / "out" / "results.jsonl")
    assert [x["result"] for x in lines[:len(results)]] == results
    for x, t in zip(lines[len(results):], ties, strict=True):
        assert x["ties_scores"] == pytest.approx(t["scores"], abs=1e-12)
    want = {k: sum(v) / len(v) for k, v in normal.items()}
    assert {k: summary["subsets"][k] for k in want} == pytest.approx(want, abs=1e-12)
    want["Ties"] = peer([REFERENCE], json.dumps({"ties": ties}))["ties_score"]
    assert summary["subsets"] == pytest.approx(want, abs=1e-12)
    assert summary["score"] == pytest.approx(sum(want.values()) / 3, abs=1e-12)


def common_prefix(seqs):
    k = 0
    while all(len(s) > k and s[k] == seqs[0][k] for s in seqs):
        k += 1
    return k


def test_pairs_pooled_share_prefix_and_store(judge_model, tmp_path):
    """pairs' numbers from the logit verdicts; --share-prefix gives the same probabilities with one group a
    row (rows of 2 to 12 asks), saving each row's common prefix for all but one of its asks; a rerun
    reads the pass from the store."""
    rows = pair_rows()
    data = write(tmp_path / "pairs.jsonl", rows)
    got = run(judge_model, data, tmp_path / "a", tmp_path / "store", benchmark="pairs", bootstrap=200)
    credits = checked_credits(judge_model, "pairs", rows, tmp_path / "a")
    pooled = {}
    for n, r in enumerate(rows):
        pooled.setdefault(r["subset"], []).extend(credits[(row_name(r, n), i, j)] for i, j in comparisons("pairs", r))
    every = [c for v in pooled.values() for c in v]
    summary = got.summary
    assert summary["subsets"] == pytest.approx({k: sum(v) / len(v) for k, v in pooled.items()}, abs=1e-12)
    assert summary["score"] == pytest.approx(sum(every) / len(every), abs=1e-12)
    assert summary["pairs"] == {k: len(v) for k, v in pooled.items()}
    inside(summary)
    first = read(tmp_path / "a" / "judgements.jsonl")

    shared = run(judge_model, data, tmp_path / "b", tmp_path / "store", benchmark="pairs", bootstrap=200,
                 share_prefix=True)
    again = read(tmp_path / "b" / "judgements.jsonl")
    np.testing.assert_allclose([x["p_chosen"] for x in again], [x["p_chosen"] for x in first], atol=1e-5, rtol=0)
    assert shared.summary == summary and shared.run["pass"]["cached"] is False
    _, _, tok = judge_model
    saved = 0
    for n, r in enumerate(rows):  # each row's asks share their rendered prompts' common prefix
        ids = [tok(tok.apply_chat_template(x["messages"], tokenize=False, add_generation_prompt=True) + "\\boxed{",
                   add_special_tokens=False)["input_ids"] for x in first if x["row"] == row_name(r, n)]
        k = min(common_prefix(ids), min(len(s) for s in ids) - 1)
        saved += k * (len(ids) - 1) if k >= 8 else 0
    assert saved > 0 and shared.run["tokens"]["shared_prefix_saved"] == saved

    stored = run(judge_model, data, tmp_path / "c", tmp_path / "store", benchmark="pairs", bootstrap=200)
    assert stored.run["pass"]["cached"] is True and stored.run["tokens_per_s"] is None
    assert [x["p_chosen"] for x in read(tmp_path / "c" / "judgements.jsonl")] == [x["p_chosen"] for x in first]
    assert stored.summary == summary

    from rmbench_fast.cli.main import main  # the command prints the run

    out = CliRunner().invoke(main, ["judge", "--model", str(judge_model[0]), "--data", data, "--verdict", "logits",
                                    "--benchmark", "pairs", "--cache-dir", str(tmp_path / "store"), "--bootstrap",
                                    "200", "--output", str(tmp_path / "d"), "-q"])
    assert out.exit_code == 0, out.output
    assert f"{len(first)} logit verdicts" in out.output and "prompt tokens" in out.output
    assert json.loads((tmp_path / "d" / "summary.json").read_text())["score"] == summary["score"]


def test_refusals(judge_model, tmp_path):
    from rmbench_fast.cli.main import main

    rb2 = write(tmp_path / "rb2.jsonl", rb2_rows())
    v1 = write(tmp_path / "v1.jsonl", v1_rows())
    args = ["judge", "--model", str(judge_model[0]), "--verdict", "logits", "--cache-dir", str(tmp_path / "store"),
            "--output", str(tmp_path / "out"), "-q"]
    for protocol in ("rb2-4way", "rb2-ratings"):
        for data in (rb2, v1):  # RewardBench 2's protocols with logits: this line, whatever the data
            bad = CliRunner().invoke(main, args + ["--data", data, "--protocol", protocol])
            assert bad.exit_code == 2, bad.output
            assert f"--protocol {protocol} with --verdict logits" in bad.output and "decoded text" in bad.output
    bad = CliRunner().invoke(main, args + ["--data", v1, "--samples", "2", "--temperature", "0.7"])
    assert bad.exit_code == 2 and "--samples is for decoded verdicts" in bad.output
    assert not (tmp_path / "out").exists()

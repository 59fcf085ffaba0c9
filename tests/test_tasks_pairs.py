"""rmbench_fast.tasks.pairs (the user's preference pairs in TRL's formats) and tasks.base (the readers,
detection): every format and how its prompt and responses come out, accuracy per subset and overall
with a tie wrong or credited, the errors naming file, item and key; Parquet and `datasets` folders
where those packages are installed (and in the peer environment, which has both); per-subset accuracy
against run_rm.py's lines in rewardbench 0.1.4 ($RMBENCH_PEER_PYTHON, else benchmarks/peer/.venv)."""

import json
import random

import pytest
from rewardbench_peer import REFERENCE, peer

from rmbench_fast.tasks import BENCHMARKS, TaskDataError, detect, detect_hub_id, get, read_items

PAIRS = get("pairs")



def u(text):
    return {"role": "user", "content": text}


def a(text):
    return {"role": "assistant", "content": text}


def write(tmp_path, items, name="pairs.json"):
    path = tmp_path / name
    path.write_text("".join(json.dumps(i) + "\n" for i in items) if name.endswith(".jsonl") else json.dumps(items))
    return path


def test_every_format(tmp_path):
    items = [
        {"prompt": "p", "chosen": "good", "rejected": "bad"},
        {"chosen": [u("q1"), a("a1"), u("q2"), a("good")], "rejected": [u("q1"), a("a1"), u("q2"), a("bad")],
         "domain": "chat"},
        {"chosen": [u("q"), a("good"), u("more?"), a("yes")], "rejected": [u("q"), a("bad")], "subset": "multi",
         "domain": "ignored"},
        {"prompt": [u("q")], "chosen": [a("good")], "rejected": [a("bad")], "id": "x7"},
        {"prompt": "p", "chosen": ["g1", "g2"], "rejected": ["b1", "b2", "b3"], "subset": "lists"},
    ]
    rows = PAIRS.load(write(tmp_path, items))
    assert [(r.id, r.subset) for r in rows] == [(0, "default"), (1, "chat"), (2, "multi"), ("x7", "default"),
                                                (4, "lists")]
    assert rows[0].prompt == "p" and rows[0].responses == ("good", "bad")
    assert rows[1].prompt == [u("q1"), a("a1"), u("q2")] and rows[1].responses == ([a("good")], [a("bad")])
    assert rows[2].prompt == [u("q")] and rows[2].chosen == ([a("good"), u("more?"), a("yes")],)
    assert rows[3].prompt == [u("q")] and rows[3].rejected == ([a("bad")],)
    assert rows[4].responses == ("g1", "g2", "b1", "b2", "b3")
    assert PAIRS.comparisons(rows[4]) == [(0, 2), (0, 3), (0, 4), (1, 2), (1, 3), (1, 4)]
    assert PAIRS.comparisons(rows[0]) == [(0, 1)]


def naive(items, scores, tie_credit):
    """Expand every row into its chosen x rejected pairs; count each pair once."""
    per = {}
    for it, s in zip(items, scores):
        nc = len(it["chosen"]) if isinstance(it["chosen"], list) else 1
        for c in s[:nc]:
            for r in s[nc:]:
                per.setdefault(it.get("subset", "default"), []).append(1 if c > r else tie_credit if c == r else 0)
    every = [x for v in per.values() for x in v]
    return {k: sum(v) / len(v) for k, v in per.items()}, sum(every) / len(every)


@pytest.mark.parametrize("seed, tie_credit", [(0, 0.0), (1, 0.0), (2, 0.5), (3, 0.5), (4, 1.0)])
def test_accuracy_matches_the_plain_count(tmp_path, seed, tie_credit):
    rng = random.Random(seed)
    items, scores = [], []
    for i in range(60):
        nc, nr = (1, 1) if rng.random() < 0.5 else (rng.randint(1, 3), rng.randint(1, 4))
        item = {"prompt": f"p{i}", "chosen": [f"c{j}" for j in range(nc)], "rejected": [f"r{j}" for j in range(nr)]}
        if nc == nr == 1 and rng.random() < 0.5:
            item = {"prompt": f"p{i}", "chosen": "c", "rejected": "r"}
        if rng.random() < 0.8:
            item["subset"] = rng.choice(["math", "code", "long"])
        items.append(item)
        scores.append([rng.choice([-1.0, 0.0, 0.5, 1.0]) for _ in range(nc + nr)])
    benchmark = get("pairs", tie_credit=tie_credit) if tie_credit else PAIRS
    rows = benchmark.load(write(tmp_path, items, "pairs.jsonl"))
    got = benchmark.aggregate(rows, scores)
    subsets, score = naive(items, scores, tie_credit)
    assert got["subsets"] == pytest.approx(subsets, abs=1e-12) and got["score"] == pytest.approx(score, abs=1e-12)
    assert got["tie_credit"] == tie_credit and sum(got["counts"].values()) == 60
    assert sum(got["pairs"].values()) == sum(len(benchmark.comparisons(r)) for r in rows)
    means = [benchmark.row_result(r, s) for r, s in zip(rows, scores)]
    assert all(0 <= m <= 1 for m in means)


def test_a_tie_is_wrong_unless_credited(tmp_path):
    rows = PAIRS.load(write(tmp_path, [{"prompt": "p", "chosen": "c", "rejected": "r"}] * 4))
    scores = [[1.0, 1.0], [2.0, 1.0], [0.0, 1.0], [1.0, 1.0]]
    assert PAIRS.aggregate(rows, scores)["score"] == 0.25
    assert get("pairs", tie_credit=0.5).aggregate(rows, scores)["score"] == 0.5
    with pytest.raises(ValueError, match="between 0 and 1"):
        get("pairs", tie_credit=1.5)


@pytest.mark.parametrize("item, key, words", [
    ({"prompt": "p", "rejected": "b"}, "chosen", "missing key"),
    ({"prompt": "p", "chosen": [], "rejected": "b"}, "chosen", "an empty list"),
    ({"prompt": "p", "chosen": ["a", {"role": "user", "content": "x"}], "rejected": "b"}, "chosen", "only strings"),
    ({"prompt": "p", "chosen": [a("x")], "rejected": "b"}, "chosen", "the prompt is a string"),
    ({"chosen": "a", "rejected": "b"}, "prompt", "need a prompt"),
    ({"chosen": [u("q"), a("x")], "rejected": [u("q"), a("x")]}, "chosen", "no turn after the 2 turns"),
    ({"chosen": [u("q")], "rejected": [u("q"), a("x")]}, "chosen", "no response to score"),
    ({"chosen": [u("q"), {"role": "assistant"}], "rejected": [u("q"), a("x")]}, "chosen[1].content", "string"),
    ({"prompt": 5, "chosen": "a", "rejected": "b"}, "prompt", "string or a list of messages"),
    ({"prompt": "p", "chosen": "a", "rejected": "b", "subset": 3}, "subset", "must be a string"),
    ({"prompt": "p", "chosen": "a", "rejected": "b", "id": [1]}, "id", "integer or a string"),
    (["not", "an", "object"], None, "item must be an object"),
])
def test_a_bad_row_names_the_file_the_row_and_the_key(tmp_path, item, key, words):
    with pytest.raises(ValueError) as e:
        PAIRS.load(write(tmp_path, [{"prompt": "p", "chosen": "a", "rejected": "b"}, item], "mine.jsonl"))
    text = str(e.value)
    assert isinstance(e.value, TaskDataError) and "mine.jsonl, line 2, item 1" in text and words in text, text
    assert key is None or f"key '{key}'" in text, text


@pytest.mark.parametrize("content, words", [
    ("{not json", "not JSON"), ("", "file is empty"), ('{"a": 1}', "must be a JSON list"), (b"\xff\xfe", "not UTF-8"),
])
def test_unreadable_files(tmp_path, content, words):
    path = tmp_path / "x.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(TaskDataError, match=words):
        read_items(path)
    with pytest.raises(TaskDataError, match="no such file"):
        read_items(tmp_path / "absent.json")
    (tmp_path / "empty").mkdir()
    with pytest.raises(TaskDataError, match="no .json, .jsonl or .parquet"):
        read_items(tmp_path / "empty")
    with pytest.raises(TaskDataError, match="holds no items"):
        PAIRS.load(write(tmp_path, [], "none.json"))


def test_a_folder_of_files_reads_in_order(tmp_path):
    folder = tmp_path / "data"
    (folder / "sub").mkdir(parents=True)
    write(folder, [{"prompt": "p", "chosen": "a", "rejected": "b", "id": 1}], "b.json")
    write(folder / "sub", [{"prompt": "p", "chosen": "a", "rejected": "b", "id": 2}], "c.jsonl")
    write(folder, [{"prompt": "p", "chosen": "a", "rejected": "b", "id": 0}], "a.jsonl")
    assert [r.id for r in PAIRS.load(folder)] == [0, 1, 2]


def test_parquet_and_saved_datasets_here(tmp_path):
    pa = pytest.importorskip("pyarrow", reason="pyarrow is not installed here (the peer environment's test has it)")
    datasets = pytest.importorskip("datasets", reason="datasets is not installed here (the peer test has it)")
    import pyarrow.parquet as pq

    rows = [{"prompt": "p", "chosen": ["a", "b"], "rejected": ["c"], "subset": "s"}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "x.parquet")
    assert PAIRS.load(tmp_path / "x.parquet")[0].responses == ("a", "b", "c")
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "saved"))
    assert PAIRS.load(tmp_path / "saved")[0].responses == ("a", "b", "c")


PEER_LOADING = r"""
import json, sys, datasets, pandas as pd
from rmbench_fast.tasks import get, TaskDataError
root = sys.argv[1]
rows = [{"prompt": "p", "chosen": ["a", "b"], "rejected": ["c"], "subset": "s", "id": 3},
        {"chosen": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "g"}],
         "rejected": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "b"}]}]
v2 = [{"id": "ref:1", "prompt": "p", "chosen": ["a"], "rejected": ["b", "c"], "num_correct": 1, "num_incorrect": 2,
       "total_completions": 3, "models": ["m", "m", "m"], "subset": "Ties"}]
pd.DataFrame(rows[:1]).to_parquet(root + "/x.parquet")
datasets.Dataset.from_list(rows[1:]).save_to_disk(root + "/saved")
datasets.DatasetDict({"test": datasets.Dataset.from_list(v2)}).save_to_disk(root + "/v2")
datasets.DatasetDict({"a": datasets.Dataset.from_list(v2), "b": datasets.Dataset.from_list(v2)}).save_to_disk(root + "/two")
out = {"parquet": [list(r.responses) for r in get("pairs").load(root + "/x.parquet")],
       "saved": [[r.prompt, list(r.responses)] for r in get("pairs").load(root + "/saved")],
       "v2": [[r.id, r.subset, list(r.responses), r.source.endswith("test")] for r in get("reward-bench-2").load(root + "/v2")]}
try:
    get("reward-bench-2").load(root + "/two")
except TaskDataError as e:
    out["two"] = str(e)
print(json.dumps(out))
"""


@pytest.mark.slow
def test_parquet_and_saved_datasets_in_the_peer_environment(tmp_path):
    out = peer(["-c", PEER_LOADING, str(tmp_path)])
    assert out["parquet"] == [["a", "b", "c"]]
    assert out["saved"] == [[[u("q")], [[a("g")], [a("b")]]]]
    assert out["v2"] == [["ref:1", "Ties", ["a", "b", "c"], True]]
    assert "holds the splits a, b" in out["two"]


def test_detect_and_hub_ids():
    assert set(BENCHMARKS) == {"reward-bench", "reward-bench-2", "pairs"}
    assert detect({"prompt": "p", "chosen": "a", "rejected": "b", "domain": "math"}) == "pairs"
    assert detect([{"chosen": [u("q"), a("x")], "rejected": [u("q"), a("y")]}]) == "pairs"
    assert detect({"prompt": "p", "chosen": ["a", "b"], "rejected": ["c"]}) == "pairs"
    assert detect({"id": 1, "prompt": "p", "chosen": ["a"] * 3, "rejected": ["b"] * 3, "domain": "chat"}) == "rm-bench"
    with pytest.raises(ValueError, match="every benchmark needs chosen and rejected"):
        detect({"prompt": "p", "response": "a"})
    with pytest.raises(ValueError, match="no rows"):
        detect([])
    assert detect_hub_id("allenai/reward-bench-2") == "reward-bench-2" and detect_hub_id("allenai/reward-bench") == \
        "reward-bench" and detect_hub_id("THU-KEG/RM-Bench") == "rm-bench" and detect_hub_id("me/mine") is None


@pytest.mark.slow
def test_subset_accuracy_equals_run_rm(tmp_path):
    """One pair a row: per-subset accuracy as run_rm.py's lines count it (reference kind v1)."""
    rng = random.Random(7)
    items = [{"id": i, "prompt": "p", "chosen": "c", "rejected": "r", "subset": rng.choice(["math", "code", "x"])}
             for i in range(200)]
    scores = [[rng.choice([0.0, 1.0, 2.0]), rng.choice([0.0, 1.0, 2.0])] for _ in items]
    got = PAIRS.aggregate(PAIRS.load(write(tmp_path, items)), scores)
    rows = [{"subset": it["subset"], "id": it["id"], "chosen": c, "rejected": r} for it, (c, r) in zip(items, scores)]
    want = peer([str(REFERENCE)], json.dumps({"cases": [{"kind": "v1", "rows": rows}]}))["results"][0]
    assert got["subsets"] == want["subsets"]
    assert got["score"] == sum(want["results"]) / len(want["results"])

"""The other benchmarks' hub ids (tasks.hub): only the official split is downloaded and read, prior-set
splits become subsets (rewardbench's load_eval_dataset: the split's name as `subset`, its own moved to
`subsubset`, pku_safer / pku_better left out and counted), and a failed download says what to do.
The downloader is injected: no network. The snapshot's split files hold JSON lines read by a stub
reader (pyarrow is not a dependency); one test reads real Parquet where pyarrow is installed."""

import json

import pytest

from rmbench_fast.tasks import hub
from rmbench_fast.tasks.base import Item, TaskDataError


def fake_snapshot(root, splits: dict):
    """data/<split>-00000-of-00001.parquet for each split (its rows as JSON lines: see stub_reader)."""
    (root / "data").mkdir(parents=True)
    for split, rows in splits.items():
        (root / "data" / f"{split}-00000-of-00001.parquet").write_text("\n".join(json.dumps(r) for r in rows))
    return root


def stub_reader(path):
    return [Item(str(path), i, None, json.loads(x)) for i, x in enumerate(path.read_text().splitlines())]


@pytest.fixture
def snapshot(tmp_path, monkeypatch):
    monkeypatch.setattr(hub, "read_items", stub_reader)
    asked = []

    def make(splits):
        root = fake_snapshot(tmp_path / "snap", splits)

        def download(repo_id, patterns):
            asked.append((repo_id, patterns))
            return root
        return download
    return make, asked


def test_reward_bench_reads_the_filtered_split_only(snapshot):
    make, asked = snapshot
    download = make({"filtered": [{"id": 1, "subset": "hep-go"}, {"id": 2, "subset": "math-prm"}],
                     "raw": [{"id": 9, "subset": "hep-go"}]})
    items, notes = hub.hub_items("allenai/reward-bench", download)
    assert [it.value["id"] for it in items] == [1, 2]  # not the raw split's row
    assert asked == [("allenai/reward-bench", ["data/filtered-*.parquet"])]
    assert notes == {"hub_id": "allenai/reward-bench", "splits": ["filtered"], "skipped": {}}


def test_prior_sets_take_their_split_as_subset_and_count_what_is_left_out(snapshot):
    make, asked = snapshot
    download = make({"anthropic_hhh": [{"prompt": "a", "subset": "harmless"}, {"prompt": "b", "subset": "helpful"}],
                     "shp": [{"prompt": "c"}], "pku_safer": [{"prompt": "d"}] * 3, "pku_better": [{"prompt": "e"}]})
    items, notes = hub.hub_items("allenai/pref-test-sets", download)
    expected = [("a", "anthropic_hhh", "harmless"), ("b", "anthropic_hhh", "helpful"), ("c", "shp", None)]
    assert [(it.value["prompt"], it.value["subset"], it.value.get("subsubset")) for it in items] == expected
    assert notes["skipped"] == {"pku_better": 1, "pku_safer": 3} and notes["splits"] == ["anthropic_hhh", "shp"]
    assert asked[0][1] == ["data/*.parquet"]


def test_a_snapshot_without_the_split_and_a_failed_download_are_one_line(snapshot, monkeypatch):
    make, _ = snapshot
    with pytest.raises(TaskDataError, match="no data/<split>-\\*.parquet files of the split test"):
        hub.hub_items("allenai/reward-bench-2", make({"train": [{"id": 1}]}))

    def offline(repo_id, patterns):
        raise OSError("no route")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(TaskDataError, match="HF_HUB_OFFLINE is set.*pass that folder"):
        hub.hub_items("allenai/reward-bench-2", offline)


def test_only_known_ids_that_are_not_local_paths(tmp_path, monkeypatch):
    assert hub.hub_id("allenai/reward-bench-2/") == "allenai/reward-bench-2"
    assert hub.hub_id("someone/else") is None
    monkeypatch.chdir(tmp_path)
    (tmp_path / "allenai" / "reward-bench").mkdir(parents=True)
    assert hub.hub_id("allenai/reward-bench") is None  # a local folder of that name wins


def test_real_parquet_split_files(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    (tmp_path / "data").mkdir()
    pq.write_table(pa.Table.from_pylist([{"id": "ref:1", "subset": "Ties"}]), tmp_path / "data" / "test-00000-of-00001.parquet")
    items, _ = hub.hub_items("allenai/reward-bench-2", lambda repo_id, patterns: tmp_path)
    assert [it.value for it in items] == [{"id": "ref:1", "subset": "Ties"}]

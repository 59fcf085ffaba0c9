import json

import pytest

from conftest import make_item, write_json
from rmbench_fast.inputs.data import load_dataset
from rmbench_fast.errors import DataError


def test_real_files(shared_data):
    samples = load_dataset(shared_data)
    counts = {}
    for s in samples:
        counts[s.domain] = counts.get(s.domain, 0) + 1
    assert counts == {"chat": 129, "code": 228, "safety-refuse": 284, "safety-response": 157}
    # ids repeat across domains (chat and code share some), keys never do
    assert len({s.key for s in samples}) == len(samples)
    assert len({s.id for s in samples}) < len(samples)


def test_filters(shared_data):
    samples = load_dataset(shared_data, domains=["safety", "chat"], limit=5)
    assert [s.domain for s in samples] == ["chat"] * 5 + ["safety-refuse"] * 5 + ["safety-response"] * 5
    first_chat = json.loads((shared_data / "chat_filtered.json").read_text())[:5]
    assert [s.id for s in samples[:5]] == [x["id"] for x in first_chat]


def test_total_dataset_style(tmp_path):
    items = [make_item(i, d) for i, d in enumerate(["chat", "code", "math", "safety-refuse", "safety-response"])]
    for it in items:
        it["id"] = f"{it['domain']}/{it['id']}"
    write_json(tmp_path / "total_dataset.json", items)
    samples = load_dataset(tmp_path)
    assert [s.domain for s in samples] == ["chat", "code", "math", "safety-refuse", "safety-response"]
    assert samples[2].name == "math/2"


def test_jsonl_and_same_ids_in_two_domains(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text("\n".join(json.dumps(make_item(1, d)) for d in ("chat", "code")) + "\n\n")
    samples = load_dataset(p)
    assert [s.key for s in samples] == [("chat", 1), ("code", 1)]


def test_domain_from_file_name(tmp_path):
    write_json(tmp_path / "math_filtered.json", [make_item(1), make_item(2)])
    assert {s.domain for s in load_dataset(tmp_path)} == {"math"}


BAD = {
    "not json": ("chat_filtered.json", "{oops", "not JSON"),
    "top level object": ("chat_filtered.json", {"a": 1}, "top level must be a JSON list"),
    "empty file": ("chat_filtered.json", "", "file is empty"),
    "empty list": ("chat_filtered.json", [], "empty list"),
    "item not object": ("chat_filtered.json", [make_item(0), [1, 2]], "item 1: item must be an object"),
    "missing prompt": ("chat_filtered.json", [{k: v for k, v in make_item(0).items() if k != "prompt"}],
                       "item 0, key 'prompt': missing key"),
    "missing chosen": ("chat_filtered.json", [{k: v for k, v in make_item(0).items() if k != "chosen"}],
                       "key 'chosen': missing key"),
    "missing rejected": ("chat_filtered.json", [{k: v for k, v in make_item(0).items() if k != "rejected"}],
                         "key 'rejected': missing key"),
    "two chosen": ("chat_filtered.json", [{**make_item(0), "chosen": ["a", "b"]}], "exactly 3"),
    "chosen not list": ("chat_filtered.json", [{**make_item(0), "chosen": "a"}], "key 'chosen': must be a list"),
    "rejected non-string": ("chat_filtered.json", [{**make_item(0), "rejected": ["a", 3, "c"]}],
                            "key 'rejected[1]': must be a string"),
    "prompt not string": ("chat_filtered.json", [{**make_item(0), "prompt": 5}], "key 'prompt': prompt must be a string"),
    "duplicate id": ("chat_filtered.json", [make_item(0), make_item(1), make_item(0)], "item 2, key 'id': duplicate id 0"),
    "unknown domain": ("data.json", [make_item(0, "poetry")], "key 'domain': unknown domain 'poetry'"),
    "no domain": ("data.json", [make_item(0)], "no 'domain' key"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_data(tmp_path, case):
    name, content, expected = BAD[case]
    p = tmp_path / name
    p.write_text(content if isinstance(content, str) else json.dumps(content))
    with pytest.raises(DataError) as e:
        load_dataset(p)
    assert str(p) in str(e.value)
    assert expected in str(e.value)


def test_missing_path_and_bad_domain(tmp_path):
    with pytest.raises(DataError, match="no such file"):
        load_dataset(tmp_path / "nope.json")
    with pytest.raises(DataError, match="no \\*_filtered.json"):
        load_dataset(tmp_path)
    write_json(tmp_path / "chat_filtered.json", [make_item(0)])
    with pytest.raises(DataError, match="unknown domain 'poems'"):
        load_dataset(tmp_path, domains=["poems"])


def test_hub_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DataError, match="HF_HUB_OFFLINE is set"):
        load_dataset("THU-KEG/RM-Bench")

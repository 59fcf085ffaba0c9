"""Chat templates as the official flow picks them: the tokenizer's own wins (its `default` when it
has several); FastChat names only for tokenizers without one (tulu built in, token for token equal
to FastChat's; the rest through fschat, with rewardbench's three registrations); an override of a
tokenizer's own template works but is a recorded, warned departure."""

import json
import sys

import pytest
from conftest import make_item
from reference import tulu

from rmbench_fast.inputs.data import load_dataset
from rmbench_fast.engine.score import ScoreOptions, score
from rmbench_fast.errors import UsageError
from rmbench_fast.inputs.templates import ChatFormat
from rmbench_fast.tiny.models import build_trio, train_tokenizer

OTHER = "{% for m in messages %}<<{{ m['role'] }}>>{{ m['content'] }}{% endfor %}"
DEFAULT = "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"


@pytest.fixture(scope="module")
def toks():
    texts = [json.dumps(make_item(i)) for i in range(20)]
    plain = train_tokenizer(texts, vocab_size=280)
    own = train_tokenizer(texts, vocab_size=280, chat_template=DEFAULT)
    several = train_tokenizer(texts, vocab_size=280)
    several.chat_template = {"default": DEFAULT, "tool_use": OTHER}
    nodefault = train_tokenizer(texts, vocab_size=280)
    nodefault.chat_template = {"rag": OTHER, "tool_use": OTHER}
    return {"plain": plain, "own": own, "several": several, "nodefault": nodefault}


def test_official_choices(toks):
    fmt = ChatFormat(toks["plain"])
    assert (fmt.name, fmt.departure) == ("tulu", None) and fmt.text("p", "r") == tulu("p", "r")
    assert ChatFormat(toks["plain"], "tulu").departure is None  # --chat_template for a tokenizer without one
    fmt = ChatFormat(toks["own"])
    assert fmt.name == "tokenizer" and fmt.departure is None and fmt.text("p", "r") == "[user] p\n[assistant] r\n"
    fmt = ChatFormat(toks["several"])  # several named templates: `default`, as transformers does
    assert fmt.text("p") == "[user] p\n" and fmt.departure is None
    with pytest.raises(UsageError, match="several chat templates .* none is named default"):
        ChatFormat(toks["nodefault"])


def test_overrides_are_departures(toks):
    fmt = ChatFormat(toks["own"], "tulu")
    assert fmt.text("p", "r") == tulu("p", "r") and "replaces the tokenizer's own chat template" in fmt.departure
    fmt = ChatFormat(toks["several"], "tool_use")
    assert fmt.text("p", "r") == "<<user>>p<<assistant>>r" and fmt.departure
    assert fmt.name == "tokenizer:tool_use"


def test_override_recorded_in_run_json(tmp_path, toks, caplog):
    data = tmp_path / "chat_filtered.json"
    data.write_text(json.dumps([make_item(i) for i in range(3)]))
    trio = build_trio(tmp_path / "m", toks["own"], hidden=16, layers=1, heads=2)
    run = score(ScoreOptions(model=str(trio["rm"]), data=str(data), chat_template="tulu", progress=False, cache=False))
    assert run.run["chat_template"] == "tulu" and "replaces" in run.run["chat_template_departs_from_official"]
    assert any("replaces the tokenizer's own chat template" in r.message for r in caplog.records)
    plain = score(ScoreOptions(model=str(trio["rm"]), data=str(data), progress=False, cache=False))
    assert plain.run["chat_template_departs_from_official"] is None


def test_fastchat_names(toks, shared_data):
    fastchat = pytest.importorskip("fastchat.conversation")
    samples = load_dataset(shared_data, limit=2)
    tok = toks["plain"]
    builtin, theirs = ChatFormat(tok, "tulu"), fastchat.get_conv_template("tulu")
    for s in samples:
        for resp in (None, s.chosen[0], s.rejected[2]):
            theirs.messages = [[theirs.roles[0], s.prompt]] + ([] if resp is None else [[theirs.roles[1], resp]])
            assert tok(builtin.text(s.prompt, resp))["input_ids"] == tok(theirs.get_prompt())["input_ids"]
    vicuna = ChatFormat(tok, "vicuna_v1.1").text("hi", "yo")
    assert vicuna.endswith("USER: hi ASSISTANT: yo</s>")
    assert ChatFormat(tok, "pku-align").text("hi", "yo") == "BEGINNING OF CONVERSATION: USER: hi ASSISTANT: yo "
    assert ChatFormat(tok, "openbmb").text("hi") == "User: hi\n\n"
    with pytest.raises(UsageError, match="not a FastChat conversation template"):
        ChatFormat(tok, "no-such-template")


def test_fastchat_missing_is_a_clear_error(toks, monkeypatch):
    monkeypatch.setitem(sys.modules, "fastchat", None)
    monkeypatch.setitem(sys.modules, "fastchat.conversation", None)
    with pytest.raises(UsageError, match=r"need the fschat package: pip install 'rmbench-fast\[fastchat\]'"):
        ChatFormat(toks["plain"], "vicuna_v1.1")
    assert ChatFormat(toks["plain"], "tulu").text("a") == tulu("a")  # built in, no fschat needed

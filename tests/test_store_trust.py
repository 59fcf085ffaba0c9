"""The store serves nothing a fresh run would not give (issue 31).

The general check, which no list of file names can pass: for each model folder of a small test
world (a reward model, a DPO policy and its reference, a slow tokenizer's vocab.txt, a
sentencepiece tokenizer, an adapter, an in-process judge), every non-weight file is changed in turn (a byte appended)
and a file is added; the run after it, on a store that holds the unchanged folder's entries, must
recompute every entry that depends on that folder and score exactly as a --no-cache run of the
changed folder (or fail as it does). Then the issue's own cases: two slow tokenizers that differ
only in vocab.txt, in one store and within one process (--no-cache sweeps reuse in memory), and
the decisions a store-served run takes (the pre-flight's attention) equal to a first run's.
"""

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import make_item
from test_config_facts import EAGER

from rmbench_fast.engine.score import ScoreOptions, score
from rmbench_fast.errors import UsageError
from rmbench_fast.store.fingerprints import folder_files


def outcome(o):
    """(chosen, rejected) scores, or the error's text with the run's own paths left out."""
    try:
        run = score(o)
    except UsageError as e:
        return "error", type(e).__name__, run_folder_free(str(e), o)
    return "scores", run.chosen, run.rejected, run


def run_folder_free(text, o):
    for p in (o.model, o.ref_model):
        if p:
            text = text.replace(str(p), "<model>")
    return text


def same(a, b):
    if a[0] != b[0]:
        return False
    if a[0] == "error":
        return a[1:] == b[1:]
    return np.array_equal(a[1], b[1], equal_nan=True) and np.array_equal(a[2], b[2], equal_nan=True)


def changes(folder: Path):
    """(what, how to apply it to a copy) for every non-weight file, and one file added."""
    out = [(f"{p.name} + 1 byte", lambda d, n=p.name: (d / n).write_bytes((d / n).read_bytes() + b"\n"))
           for p in folder_files(folder)[1]]
    out.append(("a file added", lambda d: (d / "added_by_the_test.txt").write_text("x")))
    return out


def copy_changed(src: Path, dest: Path, apply) -> Path:
    shutil.copytree(src, dest)
    apply(dest)
    return dest


def slow_bert_rm(root: Path, texts, name: str, swap: tuple[str, str] | None = None, seed: int = 3) -> Path:
    """A Llama reward model read through a slow WordPiece tokenizer (vocab.txt only, BertTokenizer):
    the files that no fast-tokenizer list names. `swap` exchanges two words' vocabulary lines."""
    from rmbench_fast.tiny.models import build_model, llama_config

    import re

    words = sorted({w for t in texts for w in re.findall(r"\w+|[^\w\s]", t.lower())})  # BERT's pre-split pieces
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words
    if swap is not None:
        i, j = vocab.index(swap[0]), vocab.index(swap[1])
        vocab[i], vocab[j] = vocab[j], vocab[i]
    folder = root / name
    model = build_model("rm", llama_config(vocab_size=len(vocab), hidden=32, layers=1, heads=4), seed)
    model.config.pad_token_id = 0
    model.save_pretrained(folder)
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "BertTokenizer", "do_lower_case": True, "pad_token": "[PAD]", "unk_token": "[UNK]",
         "cls_token": "[CLS]", "sep_token": "[SEP]", "mask_token": "[MASK]", "model_max_length": 512}))
    return folder


def sentencepiece_rm(root: Path, texts, name: str = "spm") -> Path:
    """A Llama reward model with a slow sentencepiece tokenizer (tokenizer.model only), trained here."""
    spm = pytest.importorskip("sentencepiece")
    from rmbench_fast.tiny.models import build_model, llama_config

    folder = root / name
    folder.mkdir(parents=True)
    spm.SentencePieceTrainer.train(sentence_iterator=iter(texts), model_prefix=str(folder / "tokenizer"),
                                   vocab_size=120, model_type="bpe", bos_id=1, eos_id=2, unk_id=0, pad_id=3,
                                   minloglevel=2)
    (folder / "tokenizer.vocab").unlink()
    model = build_model("rm", llama_config(vocab_size=120, hidden=32, layers=1, heads=4), 4)
    model.config.pad_token_id = 3
    model.save_pretrained(folder)
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
         "pad_token": "<pad>", "add_bos_token": True, "add_eos_token": False}))
    return folder


def adapter_rm(root: Path, texts) -> Path:
    """GRM's published layout (an MLP value head beside a plain Llama): an own-class adapter."""
    from adapter_world import TOKENIZERS, build

    from rmbench_fast.tiny.adapters import tokenizer

    root.mkdir(parents=True, exist_ok=True)
    toks = {k: tokenizer(kind, texts, vocab_size=300, chat_template=tmpl) for k, (kind, tmpl) in TOKENIZERS.items()}
    return Path(build({"root": root, "toks": toks, "built": {}}, "grm-llama")[0])


@pytest.fixture(scope="module")
def trust(tmp_path_factory, world):
    root = tmp_path_factory.mktemp("trust")
    data = root / "data.json"
    domains = ["chat", "code", "math", "safety-refuse", "safety-response"]
    data.write_text(json.dumps([make_item(i, d) for d in domains for i in range(2)]))
    texts = [json.dumps(make_item(i)) for i in range(30)]
    return {"root": root, "data": str(data), "texts": texts, "world": world}


def _case(trust, case, root: Path):
    """(the run's models, the option naming the changed folder, the passes that depend on it)."""
    w, texts = trust["world"], trust["texts"]
    dpo = dict(model=w["policy"], ref_model=w["ref"])
    if case == "rm":
        return dict(model=w["rm"]), "model", ("model",)
    if case == "policy":
        return dpo, "model", ("model",)
    if case == "reference":
        return dpo, "ref_model", ("ref_model",)
    build = {"slow-tokenizer": lambda: slow_bert_rm(root, texts, "bert"),
             "sentencepiece": lambda: sentencepiece_rm(root, texts),
             "adapter": lambda: adapter_rm(root / "adapters", texts)}[case]
    return dict(model=str(build())), "model", ("model",)


CASES = ["rm", "policy", "reference", "slow-tokenizer", "sentencepiece", "adapter"]


@pytest.mark.slow  # about 60 in-process runs on tiny models
@pytest.mark.parametrize("case", CASES)
def test_every_file_of_a_folder_is_in_its_keys(trust, tmp_path, case):
    models, field, roles = _case(trust, case, tmp_path / "built")
    src = Path(models[field])
    base = ScoreOptions(data=trust["data"], progress=False, dtype="float32", bootstrap=0,
                        cache_dir=str(tmp_path / "store"), **models)
    assert outcome(base)[0] == "scores"  # the store now holds the unchanged folder's entries
    wrong = []
    for i, (what, apply) in enumerate(changes(src)):
        changed = copy_changed(src, tmp_path / f"changed-{i}", apply)
        o = replace(base, **{field: str(changed)})
        fresh = outcome(replace(o, cache=False))
        again = outcome(o)
        if not same(again, fresh):
            wrong.append(f"{what}: the store's answer differs from a fresh run's")
        elif again[0] == "scores":
            run = again[3].run
            served = [r for r in roles if run["models"][r]["cached"]]
            if served or (field == "model" and run["cache"]["tokenized_from_cache"]):
                wrong.append(f"{what}: served from the store ({served or 'tokenized inputs'})")
    assert not wrong, f"{case} ({src.name}): {wrong}"


def test_two_slow_tokenizers_differing_only_in_vocab_txt(trust, tmp_path):
    """The issue's fixture: identical weights and tokenizer_config.json, vocab.txt lines swapped.
    Scored into one store, each gives its own --no-cache numbers."""
    a = slow_bert_rm(tmp_path, trust["texts"], "a")
    b = slow_bert_rm(tmp_path, trust["texts"], "b", swap=("answer", "question"))
    assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()
    runs = {}
    for name, folder in (("a", a), ("b", b)):
        o = ScoreOptions(model=str(folder), data=trust["data"], progress=False, dtype="float32", bootstrap=0,
                         cache_dir=str(tmp_path / "store"))
        runs[name] = score(o)
        fresh = score(replace(o, cache=False))
        np.testing.assert_array_equal(runs[name].chosen, fresh.chosen)
        np.testing.assert_array_equal(runs[name].rejected, fresh.rejected)
    assert not np.array_equal(runs["a"].chosen, runs["b"].chosen)  # the swap changes the tokens


def test_a_no_cache_sweep_reuses_a_tokenizer_only_for_the_same_files(trust, tmp_path):
    """Within one process (a sweep, --no-cache) tokenizers are reused by their files' fingerprint:
    a vocab.txt twin is loaded again."""
    from rmbench_fast.engine.score import score as score_with

    a = slow_bert_rm(tmp_path, trust["texts"], "a")
    b = slow_bert_rm(tmp_path, trust["texts"], "b", swap=("answer", "question"))
    reuse = {}
    o = ScoreOptions(model=str(a), data=trust["data"], progress=False, dtype="float32", bootstrap=0, cache=False)
    first = score_with(o, reuse=reuse)
    second = score_with(replace(o, model=str(b)), reuse=reuse)
    alone = score_with(replace(o, model=str(b)))
    np.testing.assert_array_equal(second.chosen, alone.chosen)
    assert not np.array_equal(first.chosen, second.chosen)


def test_an_eager_config_gets_the_same_preflight_from_stored_facts(trust, tmp_path, monkeypatch):
    """config.json asks for eager attention: the memory estimate of a run whose config comes from
    the store's facts is the first run's (it was SDPA's, a third of it, before)."""
    src = Path(trust["world"]["policy"])
    folder = tmp_path / "eager"
    shutil.copytree(src, folder)
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**cfg, **EAGER}))
    o = ScoreOptions(model=str(folder), ref_free="avg", data=trust["data"], progress=False, dtype="float32",
                     bootstrap=0, max_batch_size=4, cache_dir=str(tmp_path / "first"))
    first = score(o).run["models"]["model"]["memory"]["estimate"]  # the config built by its class
    served = replace(o, cache_dir=str(tmp_path / "served"))
    score(replace(served, max_batch_size=8))  # stores the config's facts
    from rmbench_fast.models import loading

    monkeypatch.setattr(loading, "_load_config", lambda *a: pytest.fail("the config was built, not read from the store"))
    second = score(served).run["models"]["model"]["memory"]["estimate"]  # a pass computed on stored facts
    assert first["attention"] == "eager"
    free = ("available",)  # the machine's free memory at the time
    assert {k: v for k, v in second.items() if k not in free} == {k: v for k, v in first.items() if k not in free}


@pytest.mark.parametrize("case", ["rm", "policy", "slow-tokenizer", "sentencepiece", "adapter"])
def test_every_read_of_a_run_is_answered_as_the_real_objects_do(trust, tmp_path, monkeypatch, case, no_native):
    """A first run with the real config and tokenizer records every attribute the package reads of
    them (their classes' __getattribute__, not a hand list); stored facts of the same objects must
    answer each of those reads as the real objects do, and so must the config and tokenizer read
    without transformers (models.native_config, native_tokenizer) where the folder allows them."""
    from test_config_facts import answer
    from transformers import PretrainedConfig
    from transformers.tokenization_utils_base import PreTrainedTokenizerBase

    from rmbench_fast.engine import prepare as prepare_mod
    from rmbench_fast.inputs.templates import ChatFormat
    from rmbench_fast.models import loading
    from rmbench_fast.models.config_facts import StoredConfig, facts
    from rmbench_fast.models.tokenizer_facts import facts as tokenizer_facts
    from rmbench_fast.models.tokenizer_facts import stored_tokenizer

    watched, reads = {}, {}

    def recorder(cls):
        plain = cls.__getattribute__

        def read(self, name):
            kind = watched.get(id(self))
            if kind is not None and not name.startswith("__"):
                reads.setdefault(kind, set()).add(name)
            return plain(self, name)
        monkeypatch.setattr(cls, "__getattribute__", read)

    objects = {}

    def watch(kind, load):
        def loaded(path, *a, **kw):
            obj = load(path, *a, **kw)
            objects[kind] = (obj, str(path))
            watched[id(obj)] = kind
            if kind == "config" and hasattr(obj, "get_text_config"):
                watched.setdefault(id(obj.get_text_config()), "text config")
            return obj
        return loaded

    monkeypatch.setattr(loading, "_load_config", watch("config", loading._load_config))
    monkeypatch.setattr(prepare_mod, "load_tokenizer", watch("tokenizer", prepare_mod.load_tokenizer))
    recorder(PretrainedConfig)
    recorder(PreTrainedTokenizerBase)
    models, _, _ = _case(trust, case, tmp_path / "built")
    # without a store: no facts are taken, so what is recorded is what the run itself reads
    score(ScoreOptions(data=trust["data"], progress=False, dtype="float32", bootstrap=0, cache=False, **models))
    monkeypatch.undo()
    assert reads.get("config") and reads.get("tokenizer"), reads.keys()
    config, path = objects["config"]
    stored = StoredConfig(json.loads(json.dumps(facts(config, path))), path, lambda: config)
    wrong = [f"config.{n}" for n in sorted(reads["config"]) if answer(stored, n) != answer(config, n)]
    text = stored.get_text_config()
    wrong += [f"text_config.{n}" for n in sorted(reads.get("text config", ()))
              if answer(text, n) != answer(config.get_text_config(), n)]
    tok, tok_path = objects["tokenizer"]
    jinja = ChatFormat(tok, None).jinja
    kept = stored_tokenizer(json.loads(json.dumps(tokenizer_facts(tok, jinja))), lambda: tok)
    wrong += [f"tokenizer.{n}" for n in sorted(reads["tokenizer"]) if answer(kept, n) != answer(tok, n)]
    from rmbench_fast.models import native_config, native_tokenizer

    native = native_config.native_config(path, lambda: config)  # what it does not answer, the real one does
    if native is not None:
        names = sorted(reads["config"] | reads.get("text config", set()))
        wrong += [f"native config.{n}" for n in names if answer(native, n) != answer(config, n)]
    assert (native is not None) == (case != "adapter")  # the adapter's folder is not a plain Llama
    native = native_tokenizer.native_tokenizer(tok_path, lambda: tok)
    from rmbench_fast.models.versions import transformers_version

    # the others have no tokenizer.json; under transformers 4 the loader is AutoTokenizer's, and so is the run's
    assert (native is not None) == (case in ("rm", "policy", "adapter") and transformers_version() >= (5,))
    if native is not None:
        wrong += [f"native tokenizer.{n}" for n in sorted(reads["tokenizer"]) if answer(native, n) != answer(tok, n)]
    assert not wrong, wrong


def test_every_file_of_a_judges_folder_is_in_its_journals_key(trust, tmp_path):
    """An in-process judge: after any non-weight file of its folder changes (generation_config.json's
    EOS ids decide where generation stops, the chat template what it reads) or a file is added, no
    generation is served from the journal of the unchanged folder."""
    from test_judge_keys import tiny_judge

    from rmbench_fast.judges.options import JudgeOptions
    from rmbench_fast.judges.run import judge

    src = tiny_judge(tmp_path / "judge")
    base = JudgeOptions(model=str(src), data=trust["data"], backend="hf", max_tokens=4, limit=1, bootstrap=0,
                        progress=False, dtype="float32", cache_dir=str(tmp_path / "store"))
    first = judge(base).run
    assert first["from_store"] == 0 and judge(base).run["from_store"] == first["requests"]  # the journal serves
    names = [what for what, _ in changes(src)]
    assert "generation_config.json + 1 byte" in names, names
    served = []
    for i, (what, apply) in enumerate(changes(src)):
        run = judge(replace(base, model=str(copy_changed(src, tmp_path / f"changed-{i}", apply)))).run
        if run["from_store"]:
            served.append(f"{what}: {run['from_store']} of {run['requests']} generations from the store")
    assert not served, served

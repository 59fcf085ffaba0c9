"""Parity with the real official flow: benchmarks/peer/official_flow.py (RM-Bench's run_rm.py /
run_dpo.py on allenai's rewardbench 0.1.4 and transformers 4.51, in the peer environment that
benchmarks/peer/setup.sh makes) against rmbench-fast on the same tiny models and RM-Bench data:
per-sample |diff| <= 1e-4 in fp32 (DPO sums: 1e-5 per scored token) and identical accuracies.
Skipped without the peer environment ($RMBENCH_PEER_PYTHON, else benchmarks/peer/.venv)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import TEST_TEMPLATE

from rmbench_fast.inputs.data import load_dataset
from rmbench_fast.engine.score import ScoreOptions, score
from rmbench_fast.results.metrics import summarize
from rmbench_fast.results.files import read_scores
from rmbench_fast.tiny.models import build_model, build_trio, corpus, llama_config, save_model, train_tokenizer

pytestmark = pytest.mark.slow  # the official flow runs as its own process
REPO = Path(__file__).resolve().parents[1]
PEER = Path(os.environ.get("RMBENCH_PEER_PYTHON", REPO / "benchmarks" / "peer" / ".venv" / "bin" / "python"))
LIMIT = 2


@pytest.fixture(scope="module")
def models(tmp_path_factory, data_path):
    if not PEER.exists():
        pytest.skip(f"no official-flow environment at {PEER} (bash benchmarks/peer/setup.sh)")
    root = tmp_path_factory.mktemp("parity")
    texts = corpus(load_dataset(data_path, limit=3))
    out = {}
    kinds = {"double_bos": dict(chat_template=TEST_TEMPLATE), "llama_eos": dict(tokenizer_class="LlamaTokenizerFast"),
             "no_pad": {}}
    for name, kw in kinds.items():
        tok = train_tokenizer(texts, vocab_size=1000, **kw)
        trio = build_trio(root / name, tok, seeds=(20, 21, 22), hidden=32, layers=2, heads=4, max_positions=8192)
        out[name] = {k: str(v) for k, v in trio.items()}
    # a config pad id the official script overwrites with EOS (the tokenizer has no pad token)
    tok = train_tokenizer(texts, vocab_size=1000)
    rm = build_model("rm", llama_config(len(tok), hidden=32, layers=2, heads=4, max_positions=8192, pad_token_id=7), 23)
    out["config_pad"] = {"rm": str(save_model(rm, tok, root / "config_pad"))}
    # absolute position embeddings, a doubled BOS
    from transformers import GPT2Config, GPT2ForSequenceClassification

    tok = train_tokenizer(texts, vocab_size=1000, chat_template=TEST_TEMPLATE)
    gpt2 = GPT2ForSequenceClassification(GPT2Config(vocab_size=len(tok), n_embd=32, n_layer=2, n_head=4,
                                                    n_positions=4096, bos_token_id=0, eos_token_id=1, num_labels=1))
    out["gpt2"] = {"rm": str(save_model(gpt2.eval(), tok, root / "gpt2"))}
    # a multi-label head: the official flow keeps the whole logits vector
    multi = build_model("rm", llama_config(len(tok), hidden=32, layers=2, heads=4, max_positions=8192), 24)
    multi.config.num_labels = 3
    from transformers import LlamaForSequenceClassification

    multi = LlamaForSequenceClassification(multi.config).eval()
    out["multi"] = {"rm": str(save_model(multi, tok, root / "multi"))}
    return out


def official(tmp_path, data, mode, model, *extra):
    out = tmp_path / f"official-{Path(model).parent.name}-{mode}.json"
    cmd = [str(PEER), str(REPO / "benchmarks" / "peer" / "official_flow.py"), "--mode", mode, "--model", model,
           "--data", data, "--limit", str(LIMIT), "--output", str(out), *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": ""})
    assert proc.returncode == 0, proc.stderr[-3000:]
    chosen, rejected, domains, _, _ = read_scores(out)
    return chosen, rejected, domains


def compare(run, ref, tol):
    chosen, rejected, domains = ref
    assert chosen.shape == run.chosen.shape
    assert np.abs(run.chosen - chosen).max() <= tol and np.abs(run.rejected - rejected).max() <= tol
    assert summarize(run.chosen, run.rejected, domains) == summarize(chosen, rejected, domains)


@pytest.mark.parametrize("kind", ["double_bos", "llama_eos", "no_pad", "config_pad", "gpt2"])
def test_reward_models(models, data_path, tmp_path, kind):
    m = models[kind]["rm"]
    ref = official(tmp_path, data_path, "rm", m)
    for batch in (None, 1, 8):
        run = score(ScoreOptions(model=m, data=data_path, limit=LIMIT, max_batch_size=batch, progress=False,
                                 cache=False, compat="official"))
        compare(run, ref, 1e-4)
    if kind in ("double_bos", "gpt2"):
        assert run.run["double_bos_sequences"] == run.run["n_sequences"]


def test_multi_label_lists(models, data_path, tmp_path):
    m = models["multi"]["rm"]
    ref = official(tmp_path, data_path, "rm", m)
    assert ref[0].ndim == 3 and ref[0].shape[2] == 3  # the official file keeps [3 logits] per score
    run = score(ScoreOptions(model=m, data=data_path, limit=LIMIT, compat="official", progress=False, cache=False,
                             output=str(tmp_path / "ours")))
    compare(run, ref, 1e-4)
    ours = json.loads((tmp_path / "ours" / "results.json").read_text())
    assert len(ours[0]["score_chosen"][0]) == 3


@pytest.mark.parametrize("ref_free", [None, "avg"])
def test_dpo(models, data_path, tmp_path, ref_free):
    m = models["double_bos"]
    extra = ["--ref-model", m["reference"]] if ref_free is None else ["--ref-free", ref_free]
    ref = official(tmp_path, data_path, "dpo", m["policy"], *extra)
    run = score(ScoreOptions(model=m["policy"], ref_model=m["reference"] if ref_free is None else None,
                             ref_free=ref_free, data=data_path, limit=LIMIT, progress=False, cache=False,
                             compat="official"))
    lengths = np.array(run.run["sequences"]["lengths"]).reshape(-1, 3, 2)
    compare(run, ref, 1e-5 * lengths.max() + 1e-5 if ref_free is None else 1e-4)

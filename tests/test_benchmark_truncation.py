"""`--compat official`'s truncation on every benchmark (inputs.tokenize): the token ids equal rewardbench
0.1.4's own tokenization in the peer environment (transformers 4.51) on sequences longer than 2048
tokens: run_rm.py's left truncation (RewardBench v1, pairs), run_v2.py's on the tokenizer's own side
(RewardBench 2), DPOInference.tokenize_row for DPO; without --compat nothing is cut, and run.json
counts the cut sequences either way."""

import json
import random

import numpy as np
import pytest
import torch
from rewardbench_peer import peer
from transformers import AutoModelForSequenceClassification

from rmbench_fast.engine.score import ScoreOptions, score
from rmbench_fast.inputs.tokenize import encode_dpo, encode_rm, rm_appends_eos, rm_truncation
from rmbench_fast.models.loading import load_tokenizer
from rmbench_fast.tiny.models import build_trio, save_tokenizer, train_tokenizer

WORDS = ("alpha beta gamma delta kappa lambda sigma omega theta zeta rho tau chi psi phi mu nu xi pi eta "
         "iota upsilon epsilon omicron").split()
TEMPLATE = "{{ bos_token }}{% for m in messages %}[{{ m['role'] | upper }}] {{ m['content'] }}\n{% endfor %}"

# In the peer environment: each case's texts tokenized by transformers 4.51 as the official script sets it up.
PEER_SCRIPT = r"""
import json, sys
from transformers import AutoTokenizer
from rewardbench.dpo import DPOInference
from rewardbench.utils import check_tokenizer_chat_template
def one(req):
  tok = AutoTokenizer.from_pretrained(req["tokenizer"])
  out = {}
  if req["kind"] == "rm":
    if req["left"]:  # run_rm.py
        tok.truncation_side = "left"
    if not check_tokenizer_chat_template(tok):  # run_rm.py and run_v2.py
        tok.add_eos_token = True
    out["ids"] = [tok(t, truncation=True, max_length=2048)["input_ids"] for t in req["texts"]]
  else:  # DPOInference's internals as its __init__ sets them; run_dpo.py pads with EOS
    dpo = DPOInference.__new__(DPOInference)
    dpo.tokenizer, dpo.is_encoder_decoder, dpo.label_pad_token_id = tok, False, -100
    dpo.truncation_mode, dpo.max_prompt_length, dpo.max_length = "keep_end", 128, 2048
    rows = [dpo.tokenize_row({"prompt": p, "text_chosen": c, "text_rejected": r}) for p, c, r in req["rows"]]
    out["rows"] = [[r["chosen_input_ids"], r["chosen_labels"], r["rejected_input_ids"], r["rejected_labels"]]
                   for r in rows]
  return out
print(json.dumps([one(r) for r in json.load(sys.stdin)]))
"""


def official(*requests):
    """The peer environment's answers to `requests`, in one process (each start imports transformers)."""
    return peer(["-c", PEER_SCRIPT], json.dumps(list(requests)))


def rm_request(tokenizer, texts, left):
    return {"kind": "rm", "tokenizer": tokenizer, "texts": texts, "left": left}


def words(rng, n):
    return " ".join(rng.choice(WORDS) for _ in range(n))


@pytest.fixture(scope="module")
def long_texts():
    rng = random.Random(7)
    return {"prompt": [words(rng, 300), words(rng, 40)],
            "long": [words(rng, 1000), words(rng, 900)], "short": [words(rng, 30), words(rng, 400)]}


@pytest.fixture(scope="module")
def toks(tmp_path_factory, long_texts):
    """Tokenizer folders: a chat template (doubled BOS), a Llama class without one (the official flow adds
    EOS), and one whose tokenizer_config.json truncates from the left."""
    root = tmp_path_factory.mktemp("trunc_toks")
    corpus = [" ".join(WORDS)] * 3 + long_texts["prompt"]
    out = {}
    for name, kw in {"tmpl": dict(chat_template=TEMPLATE), "llama": dict(tokenizer_class="LlamaTokenizerFast"),
                     "left": dict(chat_template=TEMPLATE)}.items():
        tok = train_tokenizer(corpus, vocab_size=300, **kw)
        save_tokenizer(tok, root / name)
        if name == "left":
            cfg = json.loads((root / name / "tokenizer_config.json").read_text())
            (root / name / "tokenizer_config.json").write_text(json.dumps({**cfg, "truncation_side": "left"}))
        out[name] = str(root / name)
    return out


def full_texts(tok, prompt, response):
    if tok.chat_template is None:
        return f"<|user|>\n{prompt}\n<|assistant|>\n{response}"
    return tok.apply_chat_template([{"role": "user", "content": prompt}, {"role": "assistant", "content": response}],
                                   tokenize=False)


CASES = [(n, b) for n in ("tmpl", "llama", "left") for b in ("reward-bench", "reward-bench-2", "pairs")]


def rm_texts(tok, long_texts):
    return [full_texts(tok, p, r) for p in long_texts["prompt"] for r in long_texts["long"] + long_texts["short"]]


def dpo_rows(tok, long_texts):
    rows = []
    for p in long_texts["prompt"]:
        for c, r in ((long_texts["long"][0], long_texts["short"][0]), (long_texts["short"][0], long_texts["short"][1]),
                     (long_texts["short"][0], long_texts["long"][1])):
            rows.append((_prompt_text(tok, p), full_texts(tok, p, c), full_texts(tok, p, r)))
    return rows


@pytest.fixture(scope="module")
def answers(toks, long_texts):
    """rewardbench's tokenization of every case, from one peer process."""
    reqs = [rm_request(toks[n], rm_texts(load_tokenizer(toks[n], False), long_texts), b != "reward-bench-2")
            for n, b in CASES]
    reqs += [{"kind": "dpo", "tokenizer": toks[n], "rows": dpo_rows(load_tokenizer(toks[n], False), long_texts)}
             for n in ("tmpl", "llama")]
    got = official(*reqs)
    return {**{case: g["ids"] for case, g in zip(CASES, got)}, "dpo": dict(zip(("tmpl", "llama"), (g["rows"] for g in got[len(CASES):])))}


@pytest.mark.parametrize("name,benchmark", CASES)
def test_rm_truncation_equals_the_official_tokenizer(toks, long_texts, answers, name, benchmark):
    tok = load_tokenizer(toks[name], False)
    texts = rm_texts(tok, long_texts)
    append_eos = rm_appends_eos(tok, tok.chat_template is not None, toks[name])
    max_length, side = rm_truncation(tok, benchmark, True)
    assert max_length == 2048 and side == ("left" if benchmark != "reward-bench-2" or name == "left" else "right")
    ours = encode_rm(tok, texts, append_eos, max_length, side)
    assert [e.ids for e in ours] == answers[(name, benchmark)]
    whole = encode_rm(tok, texts, append_eos, *rm_truncation(tok, benchmark, False))
    assert all(e.cut == 0 for e in whole) and max(len(e.ids) for e in whole) > 2048  # no compat: nothing cut
    assert [e.cut for e in ours] == [len(w.ids) - len(o.ids) for w, o in zip(whole, ours)]
    assert sum(e.cut > 0 for e in ours) >= 4


@pytest.mark.parametrize("name", ["tmpl", "llama"])
def test_dpo_truncation_equals_tokenize_row(toks, long_texts, answers, name):
    """Every benchmark's rows (one chosen, one rejected: v1, 1x1 pairs) as tokenize_row cuts them; a
    row of several responses is cut by its longest (tokenize_row's rule over the group)."""
    tok = load_tokenizer(toks[name], False)
    rows = dpo_rows(tok, long_texts)
    ours = encode_dpo(tok, [r[0] for r in rows], [[r[1], r[2]] for r in rows], True, groups=[[2]] * len(rows))
    want = answers["dpo"][name]
    for seqs, (c_ids, c_labels, r_ids, r_labels) in zip(ours, want):
        for e, ids, labels in ((seqs[0], c_ids, c_labels), (seqs[1], r_ids, r_labels)):
            assert e.ids == ids
            assert [-100] * e.start + e.ids[e.start:] == labels
    assert sum(e.cut > 0 for seqs in ours for e in seqs) >= 6
    # without compat: whole, and RM-Bench's pairs layout gives the same as groups of two
    whole = encode_dpo(tok, [r[0] for r in rows], [[r[1], r[2]] for r in rows], False)
    assert all(e.cut == 0 for seqs in whole for e in seqs)
    # a row of three responses: each cut as tokenize_row would cut it beside the row's longest
    three = encode_dpo(tok, [rows[1][0]], [[rows[1][1], rows[1][2], rows[0][1]]], True, groups=[[3]])[0]
    beside_long = encode_dpo(tok, [rows[1][0]], [[rows[1][1], rows[0][1]]], True, groups=[[2]])[0]
    assert three[0].ids == beside_long[0].ids and three[2].ids == beside_long[1].ids


def _prompt_text(tok, prompt):
    if tok.chat_template is None:
        return f"<|user|>\n{prompt}\n<|assistant|>\n"
    return tok.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False)


@pytest.fixture(scope="module")
def trio(tmp_path_factory, long_texts):
    tok = train_tokenizer([" ".join(WORDS)] * 3 + long_texts["prompt"], vocab_size=300, chat_template=TEMPLATE)
    return build_trio(tmp_path_factory.mktemp("trunc_models"), tok, seeds=(1, 2, 3), hidden=16, layers=1, heads=2,
                      max_positions=8192)


@pytest.mark.slow  # sequences of ~3000 tokens through four runs
@pytest.mark.parametrize("benchmark", ["reward-bench", "reward-bench-2"])
def test_compat_runs_score_the_official_ids_and_count_the_cuts(trio, long_texts, tmp_path, benchmark):
    p, (lc, lr), (sc, sr) = long_texts["prompt"][0], long_texts["long"], long_texts["short"]
    if benchmark == "reward-bench":
        rows = [{"prompt": p, "chosen": lc, "rejected": sc, "subset": "math-prm", "id": 0, "chosen_model": "a",
                 "rejected_model": "b"}]
    else:
        rows = [{"id": "0", "prompt": p, "chosen": [lc], "rejected": [sc, lr, sr], "num_correct": 1,
                 "num_incorrect": 3, "total_completions": 4, "models": ["m"] * 4, "subset": "Math"}]
    data = tmp_path / "rows.json"
    data.write_text(json.dumps(rows))
    runs = {c: score(ScoreOptions(model=str(trio["rm"]), data=str(data), benchmark=benchmark, compat=c, bootstrap=0,
                                  progress=False, cache=False, dtype="float32")) for c in (None, "official")}
    tok = load_tokenizer(str(trio["rm"]), False)
    texts = [full_texts(tok, p, r) for r in ([lc, sc] if benchmark == "reward-bench" else [lc, sc, lr, sr])]
    want = official(rm_request(str(trio["rm"]), texts, benchmark == "reward-bench"))[0]["ids"]
    model = AutoModelForSequenceClassification.from_pretrained(str(trio["rm"])).eval()
    got = list(runs["official"].chosen[0]) + list(runs["official"].rejected[0])
    for ids, s in zip(want, got):
        mask = [0 if k == 0 and ids[0] == ids[1] == tok.bos_token_id else 1 for k in range(len(ids))]
        with torch.no_grad():
            ref = model(input_ids=torch.tensor([ids]), attention_mask=torch.tensor([mask])).logits[0, 0].item()
        assert abs(s - ref) <= 1e-4
    lengths = [len(tok(t)["input_ids"]) for t in texts]
    assert runs["official"].run["truncated"]["sequences"] == sum(n > 2048 for n in lengths) >= 1
    assert runs[None].run["truncated"] == {"sequences": 0, "tokens": 0}
    assert runs[None].run["max_sequence_tokens"] == max(lengths) > 2048


@pytest.mark.slow  # DPO with a reference over ~3000-token sequences, twice
def test_compat_dpo_on_pairs_counts_the_cuts(trio, long_texts, tmp_path):
    p = long_texts["prompt"][0]
    rows = [{"prompt": p, "chosen": long_texts["long"][0], "rejected": long_texts["short"][0]},
            {"prompt": long_texts["prompt"][1], "chosen": long_texts["short"][0], "rejected": long_texts["short"][1]}]
    data = tmp_path / "pairs.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    kw = dict(model=str(trio["policy"]), ref_model=str(trio["reference"]), data=str(data), benchmark="pairs",
              bootstrap=0, progress=False, cache=False, dtype="float32")
    runs = {c: score(ScoreOptions(**kw, compat=c)) for c in (None, "official")}
    tok = load_tokenizer(str(trio["policy"]), False)
    cut = encode_dpo(tok, [_prompt_text(tok, r["prompt"]) for r in rows],
                     [[full_texts(tok, r["prompt"], r["chosen"]), full_texts(tok, r["prompt"], r["rejected"])]
                      for r in rows], True, groups=[[2], [2]])
    assert runs["official"].run["truncated"]["sequences"] == sum(e.cut > 0 for s in cut for e in s) == 2
    assert runs["official"].run["truncated"]["tokens"] == sum(e.cut for s in cut for e in s)
    assert runs[None].run["truncated"] == {"sequences": 0, "tokens": 0}
    # the row under 2048 tokens is scored the same either way; the long one differs
    assert np.isclose(runs[None].chosen[1][0], runs["official"].chosen[1][0], atol=1e-4)
    assert not np.isclose(runs[None].chosen[0][0], runs["official"].chosen[0][0], atol=1e-3)

"""The official formatting check (issue 33): rows of RewardBench v1 (string prompts and a prior set's
conversation), RewardBench 2 and conversational pairs, formatted by rewardbench 0.1.4's own functions in
the official flow's environment (benchmarks/peer: transformers 4.51), against the texts and token ids the
engine builds for them (here: transformers 5), exactly:
- RM (run_rm.py / run_v2.py): utils.prepare_dialogue_from_tokenizer for a tokenizer with a chat template,
  else utils.prepare_dialogue with FastChat's get_conv_template (tulu, zephyr, llama-2); the text's ids as
  the reward pipeline tokenizes them after the scripts' setup (add_eos_token = True without a chat template,
  which a Llama-class tokenizer honours; truncation at 2048, left for v1, which these short rows never reach);
- DPO (run_dpo.py): DPOInference.tokenize_row of (prompt, text_chosen, text_rejected), after run_dpo.py's
  tokenizer setup (pad = EOS, BOS = EOS when there is none): our ids equal chosen_input_ids /
  rejected_input_ids and our first scored token is the first label that is not -100.
RewardBench 2 rows go through load_bon_dataset_v2's unrolling (each response an `input`, ift=True).
Pairs are not a RewardBench benchmark: their rows that rewardbench can format (the prompt's turns, then
one assistant turn) are formatted as run_rm.py formats a v1 prior-set row, and must match too.

Differences found (ours follows RewardBench's for the RewardBench benchmarks; none in RM-Bench's path):
1. A prior set's prompt takes its roles from each turn's position in rewardbench (user, assistant, user,
   ...), whatever the message's `role` says: ours now does the same for reward-bench rows (tasks.rewardbench
   `formatted`); a prompt ending on an assistant turn by position (rewardbench's assert) is refused at load.
2. DPO's prompt text is the prompt's turns rendered WITHOUT a generation prompt (prepare_dialogue*'s
   temp_prompt: apply_chat_template(messages, tokenize=False)), as for string prompts: the assistant
   header, when a template writes one, is thus part of the scored response. Ours follows.
3. Pairs (not official; kept as TRL defines them, a difference from rewardbench's own loader
   utils.load_and_process_dataset, which takes chosen[:-1] as the prompt and only the last message of
   each side as the response, and would cut a string prompt's last character): a response of several
   turns is scored whole after the shared turns, and a pair's messages keep their own roles (a leading
   system message goes to the template; FastChat: its system message). Rows of that kind are not
   compared here; tests/test_benchmark_conversations.py checks them against hand-written texts.
No other difference: every text and id below is equal for the three tokenizers and four templates.
"""

import json

import pytest
from rewardbench_peer import peer

from rmbench_fast.engine.benchmarks import load_samples
from rmbench_fast.engine.score import ScoreOptions
from rmbench_fast.inputs.layout import full_texts
from rmbench_fast.inputs.templates import ChatFormat
from rmbench_fast.models.loading import load_tokenizer
from rmbench_fast.scorers import DPOScorer, RewardModelScorer
from rmbench_fast.tiny.models import save_tokenizer, train_tokenizer

pytestmark = pytest.mark.slow  # rewardbench 0.1.4's functions in the peer environment's subprocess

TEMPLATE = "{{ bos_token }}{% for m in messages %}[{{ m['role'] | upper }}] {{ m['content'] }}\n{% endfor %}"


def u(text):
    return {"role": "user", "content": text}


def a(text):
    return {"role": "assistant", "content": text}


V1 = [
    {"prompt": "What is 2 + 2?", "chosen": "4.", "rejected": "5.", "subset": "alpacaeval-easy", "id": 0},
    {"prompt": "Write a haiku about rain.", "chosen": "Soft rain on tin roofs\nthe gutters hum",
     "rejected": "No.", "subset": "mt-bench-hard", "id": 1},
    {"prompt": [u("Plan a trip?"), a("Sure, where to?"), u("Somewhere warm.")], "chosen": "The Canaries.",
     "rejected": "Stay home.", "subset": "anthropic_hhh", "id": 2},
    {"prompt": [{"role": "human", "content": "Is tea good?"}, {"role": "bot", "content": "Yes."},
                {"role": "human", "content": "Why?"}], "chosen": "Antioxidants.", "rejected": "Magic.",
     "subset": "shp", "id": 3},
]
V2 = [{"id": "7", "prompt": "Name a prime.", "chosen": ["7"], "rejected": ["8", "9 is prime", "1"],
       "num_correct": 1, "num_incorrect": 3, "total_completions": 4, "models": ["m"] * 4, "subset": "Math"}]
PAIRS = [
    {"chosen": [u("q1"), a("a1"), u("q2"), a("good")], "rejected": [u("q1"), a("a1"), u("q2"), a("bad")]},
    {"prompt": [u("hello")], "chosen": [a("hi")], "rejected": [a("go away")]},
    {"prompt": "a string prompt", "chosen": ["first", "second"], "rejected": ["third"]},
]

PEER_FORMAT = r"""
import json, sys
from fastchat.conversation import get_conv_template
from transformers import AutoTokenizer
from rewardbench.dpo import DPOInference
from rewardbench.utils import check_tokenizer_chat_template, prepare_dialogue, prepare_dialogue_from_tokenizer

job = json.load(sys.stdin)
out = []
for case in job["cases"]:
    def fmt(example, ift=False):
        tok = AutoTokenizer.from_pretrained(case["tok"])
        if check_tokenizer_chat_template(tok):
            return prepare_dialogue_from_tokenizer(dict(example), tok, ift=ift)
        return prepare_dialogue(dict(example), get_conv_template(case["template"]), ift=ift)
    rm_tok = AutoTokenizer.from_pretrained(case["tok"])          # run_rm.py / run_v2.py's setup
    if not check_tokenizer_chat_template(rm_tok):
        rm_tok.add_eos_token = True
    def rm_ids(text, side):
        rm_tok.truncation_side = side
        return rm_tok(text, truncation=True, max_length=2048)["input_ids"]
    dpo_tok = AutoTokenizer.from_pretrained(case["tok"])         # run_dpo.py's setup
    dpo_tok.pad_token = dpo_tok.eos_token
    if dpo_tok.bos_token is None:
        dpo_tok.bos_token_id = dpo_tok.eos_token_id
        dpo_tok.pad_token_id = dpo_tok.eos_token_id
    dpo = object.__new__(DPOInference)  # tokenize_row needs only these (no model)
    dpo.tokenizer, dpo.is_encoder_decoder, dpo.label_pad_token_id = dpo_tok, False, -100
    dpo.padding_value, dpo.truncation_mode, dpo.max_prompt_length, dpo.max_length = dpo_tok.pad_token_id, "keep_end", 128, 2048
    def pair(example):
        ex = fmt(example)
        row = dpo.tokenize_row({"prompt": ex["prompt"], "text_chosen": ex["text_chosen"], "text_rejected": ex["text_rejected"]})
        return {"texts": [ex["text_chosen"], ex["text_rejected"]],
                "rm": [rm_ids(ex["text_chosen"], "left"), rm_ids(ex["text_rejected"], "left")],
                "dpo": [[row[s + "_input_ids"], sum(1 for x in row[s + "_labels"] if x == -100)] for s in ("chosen", "rejected")]}
    res = {"v1": [pair(r) for r in case["v1"]], "pairs": [pair(r) for r in case["pairs"]], "v2": []}
    for row in case["v2"]:
        for resp in row["chosen"] + row["rejected"]:  # load_bon_dataset_v2's unrolled rows
            ex = fmt({"prompt": row["prompt"], "input": resp, "id": row["id"], "subset": row["subset"]}, ift=True)
            res["v2"].append({"text": ex["text"], "rm": rm_ids(ex["text"], "right")})
    out.append(res)
print(json.dumps(out))
"""


def rewardbench_pairs():
    """Our pairs rows as rewardbench formats a prior-set row: the prompt's turns, one response string a
    side, every chosen against every rejected."""
    out = []
    for r in PAIRS:
        if "prompt" not in r:
            out.append({"prompt": r["chosen"][:-1], "chosen": r["chosen"][-1]["content"],
                        "rejected": r["rejected"][-1]["content"]})
            continue
        content = [x if isinstance(x, str) else x["content"] for x in r["chosen"] + r["rejected"]]
        n = len(r["chosen"])
        out += [{"prompt": r["prompt"], "chosen": content[i], "rejected": content[n + j]}
                for i in range(n) for j in range(len(content) - n)]
    return out


def ours(tok_dir, choice, data, name):
    """The engine's texts and ids: RM (text, ids) and DPO (ids, start) per response, in layout order."""
    samples = load_samples(ScoreOptions(model=tok_dir, data=str(data), benchmark=name), name)
    tok = load_tokenizer(tok_dir, False)
    fmt = ChatFormat(tok, choice)
    rm = RewardModelScorer(tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id, 0)
    rm_seqs = rm.encode(samples, tok, fmt, False, tok_dir)
    dpo_seqs = DPOScorer(tok.eos_token_id, "torch", None).encode(samples, tok, fmt, False, tok_dir)
    return samples, full_texts(samples, fmt), [e.ids for e in rm_seqs], [[e.ids, e.start] for e in dpo_seqs]


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory):
    root = tmp_path_factory.mktemp("toks")
    corpus = [json.dumps(x) for x in V1 + V2 + PAIRS] * 3
    out = {}
    for kind, kw in {"tmpl": dict(chat_template=TEMPLATE), "plain": dict(pad=True),
                     "llama": dict(tokenizer_class="LlamaTokenizerFast")}.items():
        save_tokenizer(train_tokenizer(corpus, vocab_size=300, **kw), root / kind)
        out[kind] = str(root / kind)
    return out


CASES = [("tmpl", None), ("plain", None), ("plain", "zephyr"), ("plain", "llama-2"), ("llama", None)]


def test_texts_and_ids_equal_rewardbench_0_1_4(tokenizers, tmp_path):
    files = {}
    for name, rows in (("reward-bench", V1), ("reward-bench-2", V2), ("pairs", PAIRS)):
        files[name] = tmp_path / f"{name}.json"
        files[name].write_text(json.dumps(rows))
    cases = [{"tok": tokenizers[kind], "template": choice or "tulu", "v1": V1, "v2": V2, "pairs": rewardbench_pairs()}
             for kind, choice in CASES]
    official = peer(["-c", PEER_FORMAT], json.dumps({"cases": cases}))
    for (kind, choice), want in zip(CASES, official):
        where = f"{kind} tokenizer, template {choice or 'default'}"
        # v1 and pairs: official rows are (chosen, rejected) pairs; ours lists each row's responses
        for name, pairs_of in (("reward-bench", want["v1"]), ("pairs", want["pairs"])):
            samples, texts, rm_ids, dpo = ours(tokenizers[kind], choice, files[name], name)
            k = 0
            for s in samples:
                n = len(s.chosen)
                for i in range(n):
                    for j in range(len(s.rejected)):
                        w = pairs_of[k]
                        k += 1
                        for side, idx in ((0, k_of(samples, s, i)), (1, k_of(samples, s, n + j))):
                            assert texts[idx] == w["texts"][side], f"{name} text, {where}, {s.name}"
                            assert rm_ids[idx] == w["rm"][side], f"{name} RM ids, {where}, {s.name}"
                            assert dpo[idx] == w["dpo"][side], f"{name} DPO ids, {where}, {s.name}"
            assert k == len(pairs_of)
        _, texts, rm_ids, _ = ours(tokenizers[kind], choice, files["reward-bench-2"], "reward-bench-2")
        assert texts == [w["text"] for w in want["v2"]], where
        assert rm_ids == [w["rm"] for w in want["v2"]], where
    assert official[-1]["v1"][0]["rm"][0][-1] == 1  # the Llama-class tokenizer: EOS appended (id 1, </s>)
    assert official[0]["v1"][2]["texts"][0].count("[USER]") == 2  # a conversation: every turn rendered


def k_of(samples, sample, r):
    """The flat index of response r of `sample` (layout order: each sample's responses, consecutive)."""
    start = 0
    for s in samples:
        if s is sample:
            return start + r
        start += len(s.responses)
    raise AssertionError("sample not found")

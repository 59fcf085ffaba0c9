"""Conversations as prompts and responses (issue 33): RewardBench v1's prior sets (a prompt that is a
multi-turn conversation) and conversational pairs (TRL's implicit and explicit prompts, responses of
several turns) are scored as conversations: the whole conversation through the chat format, the
response being what follows the prompt's turns. Each score equals a plain forward of the text written
out here by hand (the tokenizer's template as conftest.TEST_TEMPLATE renders it, FastChat's tulu), and
DPO's equals tokenize_row's cut of those texts (tests/reference.py). RewardBench's prior sets take
their roles from the turn's position (rewardbench's prepare_dialogue*), whatever `role` says; pairs keep
their own roles. RM-Bench's string path is untouched (test_templates, benchmarks/identity.py)."""

import json

import numpy as np
import pytest
import torch
from reference import official_dpo_logps, official_dpo_row, tulu
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

from rmbench_fast.engine.score import ScoreOptions, score
from rmbench_fast.errors import DataError, UsageError
from rmbench_fast.inputs.templates import ChatFormat
from rmbench_fast.tiny.models import train_tokenizer

TEMPLATE = "{{ bos_token }}{% for m in messages %}[{{ m['role'] | upper }}] {{ m['content'] }}\n{% endfor %}"


def u(text):
    return {"role": "user", "content": text}


def a(text):
    return {"role": "assistant", "content": text}


def by_hand(kind, turns):
    """The text of (role, content) turns, written out: conftest's TEST_TEMPLATE, or FastChat's tulu."""
    if kind == "tmpl":
        return "<s>" + "".join(f"[{role.upper()}] {text}\n" for role, text in turns)
    return "".join(f"<|{role}|>\n{text}\n" for role, text in turns)


@pytest.fixture(scope="module")
def toks():
    texts = ["what is two and two", "four, and then some more words"] * 5
    return {"plain": train_tokenizer(texts, vocab_size=280),
            "tmpl": train_tokenizer(texts, vocab_size=280, chat_template=TEMPLATE)}


def test_conversations_render_every_turn(toks):
    conv = [u("q1"), a("a1"), u("q2")]
    turns = [("user", "q1"), ("assistant", "a1"), ("user", "q2")]
    for kind in ("plain", "tmpl"):
        fmt = ChatFormat(toks[kind])
        assert fmt.text(conv) == by_hand(kind, turns)
        assert fmt.text(conv, "r") == by_hand(kind, turns + [("assistant", "r")])  # a string response: one turn
        assert fmt.text(conv, [a("r1"), u("more?"), a("r2")]) == by_hand(
            kind, turns + [("assistant", "r1"), ("user", "more?"), ("assistant", "r2")])
        assert fmt.text([], [u("q"), a("r")]) == by_hand(kind, [("user", "q"), ("assistant", "r")])
        assert fmt.text([]) == ""  # pairs sharing no leading turn: all of it is the response
    assert ChatFormat(toks["plain"]).text("p", "r") == tulu("p", "r")  # the string path as before
    # a system message: the tulu template's system text, then the turns
    assert ChatFormat(toks["plain"]).text([{"role": "system", "content": "be brief"}, u("q")], "r") == \
        "be brief\n" + tulu("q", "r")
    with pytest.raises(UsageError, match="the role 'tool' .message 1."):
        ChatFormat(toks["plain"]).text([u("q"), {"role": "tool", "content": "x"}], "r")
    with pytest.raises(UsageError, match="a system message after the first turn"):
        ChatFormat(toks["plain"]).text([u("q"), {"role": "system", "content": "x"}], "r")


def test_fastchat_conversations_equal_fastchats_own_messages(toks):
    """Every turn appended to the conversation as prepare_dialogue appends them, for zephyr and llama-2."""
    fastchat = pytest.importorskip("fastchat.conversation", reason="fschat is not installed here")
    for name in ("zephyr", "llama-2"):
        conv = fastchat.get_conv_template(name)
        for role, text in (("user", "q1"), ("assistant", "a1"), ("user", "q2"), ("assistant", "r")):
            conv.append_message(conv.roles[0 if role == "user" else 1], text)
        assert ChatFormat(toks["plain"], name).text([u("q1"), a("a1"), u("q2")], "r") == conv.get_prompt()


def rm_forwards(model_dir, texts):
    """A plain forward of each text: the reward model's logit (no EOS appended: neither tokenizer's class
    gets one in the official flow; pooled where the config's pad id says, as run_rm.py sets it)."""
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir).eval()
    if tok.pad_token_id is None:
        model.config.pad_token_id = tok.eos_token_id
    out = []
    for text in texts:
        ids = tok(text)["input_ids"]
        mask = [1] * len(ids)
        if len(ids) > 1 and ids[0] == ids[1] == tok.bos_token_id:
            mask[0] = 0  # RewardBenchPipeline's doubled-BOS rule
        with torch.no_grad():
            out.append(model(input_ids=torch.tensor([ids]), attention_mask=torch.tensor([mask])).logits[0, 0].item())
    return np.array(out)


# Prior-set rows: the roles deliberately wrong or missing-looking, which rewardbench ignores (position decides)
PRIOR = [
    {"prompt": [u("Can you help me plan a trip?"), a("Sure, where to?"), u("Somewhere warm in winter.")],
     "chosen": "Try the Canary Islands.", "rejected": "No.", "subset": "anthropic_hhh", "id": 0},
    {"prompt": [{"role": "human", "content": "Is tea healthy?"}], "chosen": "In moderation, yes.",
     "rejected": "It is poison.", "subset": "shp", "id": 1},
    {"prompt": [u("Summarize: cats sleep a lot."), u("Shorter please."), u("One word.")],
     "chosen": "Sleepy.", "rejected": "Dogs.", "subset": "anthropic_helpful", "id": 2},
    {"prompt": "A plain string prompt?", "chosen": "A fine answer.", "rejected": "A poor one.",
     "subset": "alpacaeval-easy", "id": 3},
]


def prior_turns(row, side):
    if isinstance(row["prompt"], str):
        return [("user", row["prompt"]), ("assistant", row[side])]
    return [("user" if i % 2 == 0 else "assistant", m["content"]) for i, m in enumerate(row["prompt"])] + \
        [("assistant", row[side])]


def test_reward_bench_prior_sets_rm_scores_the_conversation(models, tmp_path):
    data = tmp_path / "rb.json"
    data.write_text(json.dumps(PRIOR))
    rm = models["tmpl"]["rm"]
    run = score(ScoreOptions(model=rm, data=str(data), benchmark="reward-bench", progress=False, bootstrap=0))
    for side, got in (("chosen", run.chosen), ("rejected", run.rejected)):
        want = rm_forwards(rm, [by_hand("tmpl", prior_turns(r, side)) for r in PRIOR])
        np.testing.assert_allclose([g[0] for g in got], want, atol=1e-4, rtol=0)
    assert "Prior Sets" in run.summary["sections"] and set(run.summary["subsets"]) == {r["subset"] for r in PRIOR}


def dpo_expected(model_dirs, tok, prompt_text, fulls):
    """tokenize_row of each (prompt text, full text), then policy minus reference log-prob sums."""
    seqs = [official_dpo_row(tok, prompt_text, f, f, False)[0] for f in fulls]
    (pol, count, _), (ref, _, _) = (official_dpo_logps(m, seqs, tok.eos_token_id) for m in model_dirs)
    return pol - ref, count


@pytest.fixture(scope="module")
def dpo_models(models):
    m = models["plain"]
    return AutoTokenizer.from_pretrained(m["policy"]), [AutoModelForCausalLM.from_pretrained(d).eval()
                                                        for d in (m["policy"], m["ref"])]


def test_reward_bench_prior_sets_dpo_scores_what_follows_the_prompt_turns(models, dpo_models, tmp_path):
    data = tmp_path / "rb.json"
    data.write_text(json.dumps(PRIOR))
    m = models["plain"]
    run = score(ScoreOptions(model=m["policy"], ref_model=m["ref"], data=str(data), progress=False, bootstrap=0))
    tok, nets = dpo_models
    for r, c, j in zip(PRIOR, run.chosen, run.rejected):
        prompt = by_hand("plain", prior_turns(r, "chosen")[:-1])
        want, count = dpo_expected(nets, tok, prompt, [by_hand("plain", prior_turns(r, s)) for s in ("chosen", "rejected")])
        assert np.all(np.abs(np.array([c[0], j[0]]) - want) <= 2e-5 * count + 1e-6)


PAIRS = [
    # implicit prompt: the two shared turns; responses of one and of three turns
    {"chosen": [u("q1"), a("a1"), u("q2"), a("good"), u("sure?"), a("yes")],
     "rejected": [u("q1"), a("a1"), u("q2"), a("bad")], "subset": "implicit"},
    # explicit prompt with a system message (kept: pairs keep their roles), one-turn responses
    {"prompt": [{"role": "system", "content": "Be kind."}, u("hello there")], "chosen": [a("hi, friend")],
     "rejected": [a("go away")], "subset": "explicit"},
    # a conversation prompt with string responses: each one assistant turn
    {"prompt": [u("two and two?")], "chosen": ["four"], "rejected": ["five", "six"], "subset": "explicit"},
]
PAIR_TURNS = [  # (prompt turns, [each response's turns])
    ([("user", "q1"), ("assistant", "a1"), ("user", "q2")],
     [[("assistant", "good"), ("user", "sure?"), ("assistant", "yes")], [("assistant", "bad")]]),
    ([("system", "Be kind."), ("user", "hello there")], [[("assistant", "hi, friend")], [("assistant", "go away")]]),
    ([("user", "two and two?")], [[("assistant", "four")], [("assistant", "five")], [("assistant", "six")]]),
]


def tulu_turns(turns):
    """tulu with a leading system message written as its system text (FastChat's ADD_NEW_LINE_SINGLE)."""
    head = turns[0][1] + "\n" if turns and turns[0][0] == "system" else ""
    return head + by_hand("plain", [t for t in turns if t[0] != "system"])


def test_conversational_pairs_dpo_and_rm(models, dpo_models, tmp_path):
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in PAIRS))
    m = models["plain"]
    dpo = score(ScoreOptions(model=m["policy"], ref_model=m["ref"], data=str(data), benchmark="pairs",
                             progress=False, bootstrap=0))
    rm = score(ScoreOptions(model=m["rm"], data=str(data), benchmark="pairs", progress=False, bootstrap=0))
    tok, nets = dpo_models
    for n, (prompt, responses) in enumerate(PAIR_TURNS):
        fulls = [tulu_turns(prompt + r) for r in responses]
        want, count = dpo_expected(nets, tok, tulu_turns(prompt), fulls)
        got = list(dpo.chosen[n]) + list(dpo.rejected[n])
        assert np.all(np.abs(np.array(got) - want) <= 2e-5 * count + 1e-6)
        np.testing.assert_allclose(list(rm.chosen[n]) + list(rm.rejected[n]), rm_forwards(m["rm"], fulls),
                                   atol=1e-4, rtol=0)
    right = [float(dpo.chosen[0][0] > dpo.rejected[0][0]), float(dpo.chosen[1][0] > dpo.rejected[1][0]),
             float(dpo.chosen[2][0] > dpo.rejected[2][0]), float(dpo.chosen[2][0] > dpo.rejected[2][1])]
    assert dpo.summary["subsets"] == pytest.approx({"implicit": right[0], "explicit": sum(right[1:]) / 3})


def test_a_prior_set_prompt_ending_on_an_assistant_turn_is_refused(models, tmp_path):
    data = tmp_path / "rb.json"
    data.write_text(json.dumps([{**PRIOR[0], "prompt": PRIOR[0]["prompt"][:2]}]))
    with pytest.raises(DataError, match=r"item 0.*key 'prompt'.*assistant turn by its position"):
        score(ScoreOptions(model=models["tmpl"]["rm"], data=str(data), benchmark="reward-bench", progress=False))

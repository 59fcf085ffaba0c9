"""`rmbench-fast judge` on conversational rows (judges.conversation): reward-bench's prior sets (a prompt of
messages) and TRL conversational pairs, end to end against the scripted server. The prompts of one- and
two-turn rows are rewardbench 0.1.4's own (format_judge_answers as scripts/run_generative.py calls it, in
the peer environment: tests/conversation_reference.py); every other row is checked against a transcript
written plainly here, inside rewardbench's single-turn prompt (the peer's too)."""

import json
import re
from types import SimpleNamespace

import pytest

from rmbench_fast.judges.options import JudgeOptions
from rmbench_fast.judges.run import judge
from rewardbench_peer import peer

judge_server = pytest.importorskip("judge_server")
pytest.importorskip("httpx2", reason="the openai backend needs httpx2 (pip install -e '.[judge]')")

REFERENCE = "tests/conversation_reference.py"
NAMES = {"user": "User", "assistant": "Assistant", "system": "System"}


def plain_transcript(turns):
    return "\n\n".join("### " + NAMES.get(t["role"], t["role"]) + ":\n" + t["content"] for t in turns)


def msg(role, content):
    return {"role": role, "content": content}


def positional(*texts):
    return [msg("user" if i % 2 == 0 else "assistant", t) for i, t in enumerate(texts)]


def verdict(user: str):
    """The scripted judge: [[A]] or [[B]] by the prompt's length, no verdict on every fifth length."""
    if len(user) % 5 == 0:
        return None
    return "A" if len(user) % 2 else "B"


def reply(body):
    w = verdict(body["messages"][-1]["content"])
    return "I cannot tell." if w is None else f"Both answer; the better one is [[{w}]]"


@pytest.fixture
def server():
    s = judge_server.start_thread(reply=reply)
    yield s
    s.stop()


def write(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return str(path)


# (id, prompt turns as rewardbench reads them, chosen, rejected, covered: rewardbench defines the prompt)
V1 = [
    (0, positional("What is 2+2?"), "4", "five", True),
    (1, positional("Name a colour.", "Blue.", "Another {question_2} one?"), "Red {answer_a_1}.", "No.", True),
    (2, positional("Hi.", "Hello!", "Tell me a joke.", "Why did the chicken...", "Another?"), "Knock knock.", "No.",
     False),  # five messages: run_generative.py leaves the row out (max_turns=4); shown here as a transcript
]
# the prior sets' own roles are not read: rewardbench takes them by position
V1_ROLES = {1: ["human", "gpt", "human"], 2: ["user", "user", "user", "user", "user"]}

PAIRS = [  # (id, prompt turns, chosen response turns, rejected response turns, covered)
    (10, [msg("user", "Capital of France?")], [msg("assistant", "Paris.")], [msg("assistant", "Lyon.")], True),
    (11, [msg("user", "Pick a number."), msg("assistant", "7."), msg("user", "Double it.")],
     [msg("assistant", "14.")], [msg("assistant", "15.")], True),
    (12, [msg("user", "Start a story.")],
     [msg("assistant", "Once..."), msg("user", "Go on."), msg("assistant", "Then.")], [msg("assistant", "No.")],
     False),  # a response of three turns
    (13, [msg("system", "Be terse."), msg("user", "Sum 1+1.")], [msg("assistant", "2")],
     [msg("assistant", "Two, I think")], False),  # a system turn
    (14, [], [msg("user", "Say hi."), msg("assistant", "Hi!")], [msg("user", "Say bye."), msg("assistant", "Bye.")],
     False),  # no shared turn: an empty prompt, each side a whole conversation
]


def v1_rows():
    rows = []
    for rid, turns, c, r, _ in V1:
        roles = V1_ROLES.get(rid, [t["role"] for t in turns])
        rows.append({"prompt": [msg(role, t["content"]) for role, t in zip(roles, turns)], "chosen": c, "rejected": r,
                     "subset": "anthropic_helpful" if rid < 2 else "shp", "id": rid})
    rows.append({"prompt": "A string prompt?", "chosen": "yes", "rejected": "n", "subset": "alpacaeval-easy", "id": 3})
    return rows


def pair_rows():
    rows = [{"chosen": p + c, "rejected": p + r, "id": rid} for rid, p, c, r, _ in PAIRS]
    rows.append({"prompt": [msg("user", "Explicit?")], "chosen": "Yes.", "rejected": "Maybe.", "id": 15})
    return rows


def answer_text(resp):
    if isinstance(resp, str):
        return resp
    return resp[0]["content"] if len(resp) == 1 and resp[0]["role"] == "assistant" else plain_transcript(resp)


def question_text(turns):
    return turns[0]["content"] if len(turns) == 1 and turns[0]["role"] == "user" else plain_transcript(turns)


def expected_prompts(cases):
    """[system, user] a (prompt, a, b): rewardbench's own where it defines them, else its single-turn
    prompt over the plain transcript."""
    covered = [c for c in cases if c[3]]
    plain = [c for c in cases if not c[3]]
    rb = peer([REFERENCE], json.dumps({"rows": [{"prompt": p, "a": a, "b": b} for p, a, b, _ in covered]}))
    assert rb["version"] == "0.1.4"
    single = peer([REFERENCE], json.dumps({"rows": [
        {"prompt": [msg("user", question_text(p))], "a": answer_text(a), "b": answer_text(b)}
        for p, a, b, _ in plain]}))
    got, i, j = [], iter(rb["prompts"]), iter(single["prompts"])
    for c in cases:
        got.append(next(i) if c[3] else next(j))
    assert None not in got
    return got


def run(server, data, out, **kw):
    return judge(JudgeOptions(model="judge-test", data=data, output=str(out), base_url=server.url, orders="both",
                              cache_dir=str(out.parent / "store"), progress=False, bootstrap=0, **kw))


def check_run(out, table, caplog):
    """Every ask's messages are the expected prompt for its row and order; each row's result is the
    mean over both orders of the scripted verdict on that prompt (rewardbench: no verdict 0.5)."""
    asked = [json.loads(x) for x in (out / "judgements.jsonl").read_text().splitlines()]
    cases = []
    for a in asked:
        rid = a["row"].split("/")[1]
        prompt, c, r, covered = table[rid]
        first = a["order"] == "chosen_first"
        cases.append((prompt, c if first else r, r if first else c, covered))
    want = expected_prompts(cases)
    assert [[m["content"] for m in a["messages"]] for a in asked] == want
    assert [[m["role"] for m in a["messages"]] for a in asked] == [["system", "user"]] * len(asked)
    per = {}
    for a, (system, user) in zip(asked, want):
        w = verdict(user)
        chosen = "A" if a["order"] == "chosen_first" else "B"
        per.setdefault(a["row"].split("/")[1], []).append(0.5 if w is None else float(w == chosen))
    lines = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert {str(x["id"]): x["result"] for x in lines} == pytest.approx({k: sum(v) / 2 for k, v in per.items()})
    assert len({x for v in per.values() for x in v}) > 1  # the verdicts differ: the check can fail
    return json.loads((out / "run.json").read_text())


def test_prior_sets_follow_rewardbench_and_longer_ones_are_transcripts(server, tmp_path, caplog):
    caplog.set_level("WARNING", logger="rmbench_fast")
    rows = v1_rows()
    got = run(server, write(tmp_path / "v1.jsonl", rows), tmp_path / "a", protocol="rewardbench")
    table = {str(rid): (turns, c, r, covered) for rid, turns, c, r, covered in V1}
    table["3"] = ([msg("user", "A string prompt?")], "yes", "n", True)
    meta = check_run(tmp_path / "a", table, caplog)
    assert meta["conversations"] == {"single_turn": 2, "two_turn": 1, "transcript": 1}
    assert "1 conversational rows are shown to the judge as a transcript" in caplog.text
    assert "more than four messages" in caplog.text
    assert got.summary["benchmark"] == "reward-bench" and set(got.summary["subsets"]) == {
        "anthropic_helpful", "shp", "alpacaeval-easy"}
    # a protocol with no two-turn prompt shows the two-turn row as a transcript in its own prompt
    from rmbench_fast.judges import prompts

    run(server, str(tmp_path / "v1.jsonl"), tmp_path / "b")
    asked = [json.loads(x) for x in (tmp_path / "b" / "judgements.jsonl").read_text().splitlines()]
    two = [a for a in asked if a["row"] == "anthropic_helpful/1" and a["order"] == "chosen_first"][0]
    turns = V1[1][1]
    assert two["messages"] == [{"role": "user", "content": prompts.RMBENCH_TEMPLATE.format(
        question=plain_transcript(turns), answer_1=V1[1][2], answer_2=V1[1][3])}]
    assert "### User:\nName a colour.\n\n### Assistant:\nBlue.\n\n### User:\nAnother {question_2} one?" in \
        two["messages"][0]["content"]


def test_trl_conversational_pairs(server, tmp_path, caplog):
    caplog.set_level("WARNING", logger="rmbench_fast")
    run(server, write(tmp_path / "pairs.jsonl", pair_rows()), tmp_path / "a", protocol="rewardbench",
        benchmark="pairs")
    table = {str(rid): (p, c, r, covered) for rid, p, c, r, covered in PAIRS}
    table["15"] = ([msg("user", "Explicit?")], "Yes.", "Maybe.", True)
    meta = check_run(tmp_path / "a", table, caplog)
    assert meta["conversations"] == {"single_turn": 2, "two_turn": 1, "transcript": 3}
    assert "3 conversational rows" in caplog.text and "more than four messages" not in caplog.text
    asked = [json.loads(x) for x in (tmp_path / "a" / "judgements.jsonl").read_text().splitlines()]
    empty = [a for a in asked if a["row"] == "default/14" and a["order"] == "chosen_first"][0]
    assert "[User Question]\n\n\n[The Start of Assistant A's Answer]\n### User:\nSay hi.\n\n### Assistant:\nHi!\n" in \
        empty["messages"][1]["content"]


def test_a_template_drops_the_two_turn_prompt_and_rb2_prompts_take_transcripts(tmp_path):
    from rmbench_fast.engine.benchmarks import TaskSample
    from rmbench_fast.judges import bench_plan, conversation
    from rmbench_fast.judges.protocols import get_protocol
    from rmbench_fast.judges.requests import Sampling

    template = tmp_path / "t.txt"
    template.write_text("Q={{ question }}|A={{ answer_a }}|B={{ answer_b }}\n")
    p = get_protocol("rewardbench", template_path=str(template))
    turns = V1[1][1]
    assert p.two_turn is None and get_protocol("rewardbench").two_turn is not None
    assert conversation.pair_messages(p, turns, "x", "y") == (
        {"role": "user", "content": f"Q={plain_transcript(turns)}|A=x|B=y"},)
    # rb2's prompts: the question and each answer as a transcript where they are conversations
    long = [msg("assistant", "One."), msg("user", "More?"), msg("assistant", "Two.")]
    s = TaskSample("Focus", 0, turns, (long,), ("r1", "r2", "r3"), "Focus", "x", 0, None)
    key = lambda m, smp: json.dumps([list(m), smp.as_dict()])  # noqa: E731
    rated = bench_plan.plan([s], SimpleNamespace(), None, "rb2-ratings", key, "both", 0, 1, Sampling())
    assert [a.request.messages[0]["content"].split("[Query]\n")[1] for a in rated][0] == \
        f"{plain_transcript(turns)}\n\n[Response]\n{plain_transcript(long)}\n\n[Your judgement]"
    four = bench_plan.plan([s], SimpleNamespace(), None, "rb2-4way", key, "both", 0, 1, Sampling())
    user = four[0].request.messages[1]["content"]
    assert user.startswith(f"[User Question]\n{plain_transcript(turns)}\n\n")
    assert re.search(r"'s Answer\]\n### Assistant:\nOne\.\n\n### User:\nMore\?\n\n### Assistant:\nTwo\.\n", user)

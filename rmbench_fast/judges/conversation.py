"""What a judge is shown of a conversational row on another benchmark than RM-Bench: a prompt or a
response that is a list of {role, content} messages (reward-bench's prior sets, whose prompt turns
tasks.rewardbench.formatted labels by position; TRL conversational pairs, whose shared leading turns
are the prompt and the rest of each side its response). The row's conversation is the prompt's turns,
then the response's (a string response is one assistant turn). Every turn is shown; a row takes one
of three forms (`form`):

- single turn: one user turn, then one assistant turn per response (what a string row is). Every
  protocol's own prompt, over the user turn's text and each answer's text, as for strings. This is
  rewardbench 0.1.4's single-turn case (scripts/run_generative.py: a conversation of two messages,
  format_judge_answers(text_chosen[0]["content"], ...) reading each answer's turn 1).
- two turns: user, assistant, user, then one assistant turn per response, under a protocol with a
  two-turn prompt (rewardbench: MTBENCH_MULTI_V2, as format_judge_answers(multi_turn=True) fills it:
  question_1 = turn 0, answer_a_1 = answer_b_1 = turn 1, question_2 = turn 2, answer_*_2 = each
  response). run_generative.py takes every conversation of 3 or 4 messages as two-turn
  (len(text_chosen) > 2) and reads turns by position, whatever their roles; here the roles must be
  user, assistant, user (the prior sets' always are: their roles are positional), so that a system
  or assistant turn never stands where a question is read.
- transcript: anything else (more turns, a system turn, a response of several turns, no shared
  prompt turn; two-turn rows under a protocol with no two-turn prompt: rmbench, rm-r1,
  rm-r1-reasoning, custom, a --template, rb2-4way, rb2-ratings). The question is the prompt's one
  user turn's text, else its turns as a transcript; an answer is its one assistant turn's text, else
  its turns as a transcript: "### Role:\\n<content>" per turn (System, User, Assistant, any other
  role as written), joined by a blank line. rewardbench defines nothing here: run_generative.py
  leaves conversations of more than four messages out of its run (load_eval_dataset(max_turns=4)).
"""

from __future__ import annotations

SINGLE, TWO_TURN, TRANSCRIPT = "single_turn", "two_turn", "transcript"
FORMS = (SINGLE, TWO_TURN, TRANSCRIPT)
LABELS = {"system": "System", "user": "User", "assistant": "Assistant"}


def transcript(turns) -> str:
    """Every turn as "### Role:\\n<content>", joined by a blank line."""
    return "\n\n".join(f"### {LABELS.get(m['role'], m['role'])}:\n{m['content']}" for m in turns)


def _one(turns, role: str) -> str | None:
    """The text of a string, or of a conversation of one turn of `role`; else None."""
    if isinstance(turns, str):
        return turns
    if len(turns) == 1 and turns[0]["role"] == role:
        return turns[0]["content"]
    return None


def question(prompt) -> str:
    """The prompt as a question: a string or one user turn's text, else a transcript of its turns."""
    text = _one(prompt, "user")
    return transcript(prompt) if text is None else text


def answer(response) -> str:
    """A response as an answer: a string or one assistant turn's text, else a transcript of its turns."""
    text = _one(response, "assistant")
    return transcript(response) if text is None else text


def _two_turn_prompt(prompt) -> bool:
    return not isinstance(prompt, str) and [m["role"] for m in prompt] == ["user", "assistant", "user"]


def form(prompt, responses, two_turn: bool) -> str:
    """SINGLE, TWO_TURN or TRANSCRIPT for a row (two_turn: the protocol has a two-turn prompt)."""
    ends = all(_one(r, "assistant") is not None for r in responses)
    if ends and _one(prompt, "user") is not None:
        return SINGLE
    if ends and two_turn and _two_turn_prompt(prompt):
        return TWO_TURN
    return TRANSCRIPT


def pair_messages(protocol, prompt, answer_a, answer_b) -> tuple:
    """A pairwise protocol's messages for one comparison shown in this order (see the forms above)."""
    if protocol.two_turn is not None and form(prompt, (answer_a, answer_b), True) == TWO_TURN:
        return protocol.two_turn_messages(prompt[0]["content"], prompt[1]["content"], prompt[2]["content"],
                                          answer(answer_a), answer(answer_b))
    return protocol.messages(question(prompt), answer(answer_a), answer(answer_b))


def count_forms(samples, protocol) -> dict:
    """{form: rows}: how the run's rows are shown (protocol: the pairwise Protocol, None for rb2's)."""
    two_turn = protocol is not None and protocol.two_turn is not None
    out = dict.fromkeys(FORMS, 0)
    for s in samples:
        out[form(s.prompt, s.responses, two_turn)] += 1
    return out

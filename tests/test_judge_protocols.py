"""Judge protocols (rmbench_fast.judges.protocols): each preset's messages, word for word against
the published templates (pinned by hashes taken from the upstream sources), each parser against a
table of real-format answers, a user's Jinja template and verdict regex with their errors, and
rewardbench 0.1.4's own format_judge_answers / process_judgement in the peer environment
($RMBENCH_PEER_PYTHON, else benchmarks/peer/.venv; skipped without it)."""

import hashlib
import json
import os
import pickle
import subprocess
from pathlib import Path

import pytest

from rmbench_fast.errors import UsageError
from rmbench_fast.judges import prompts
from rmbench_fast.judges.protocols import PROTOCOLS, Protocol, Verdict, get_protocol

REPO = Path(__file__).resolve().parents[1]
PEER = Path(os.environ.get("RMBENCH_PEER_PYTHON", REPO / "benchmarks" / "peer" / ".venv" / "bin" / "python"))

# sha256 of each template, computed from the upstream texts themselves (RM-Bench README.md at
# 73c52d7 lines 57-75, and as Python reads that literal; rewardbench 0.1.4 generative.py prompt_v2 and
# MTBENCH_V2; RM-R1 d4c2542 eval/RM-Bench/rewardbench/generative.py's RM_R1_* prompts)
UPSTREAM = {
    "RMBENCH_README": "a5e9d06fe1ee2ef19d3e37d3655e2b76bed833a0108d80b119235d54c34639dc",
    "RMBENCH_TEMPLATE": "25941cdce8e8343f92dd4476faed55da55be4cf30106203b7244f94e5f775bda",
    "REWARDBENCH_SYSTEM": "c3fbb61119533727d0d82252b8b3201a9bbcfc7ca0d5eb1a0dfc85266d4a6c00",
    "REWARDBENCH_USER": "22f93e573bf9343e52c3dd0a36b1a033a47a6dc0045ab3d40357da8d3c613d57",
    "REWARDBENCH_MULTI_SYSTEM": "4a39e7ba8e571456edd995fff0a3ae016a10e97f00018b60c54577016df9869d",
    "REWARDBENCH_MULTI_USER": "a962ad885e77f79a229c88cff6fe258f829ceed6188370743217032f3c8d8ca9",
    "RM_R1_INSTRUCT_SYSTEM": "e0bf09a87f19837abf172278c348e8fc6ed36034f4f39b98191910533c3df3ed",
    "RM_R1_INSTRUCT_USER": "5fa3baf9813bdf0ed9b8601be6fe162ab82e37467e0843c32cfbc22792c65ac2",
    "RM_R1_REASONING_USER": "2a0d3caf562d59367bbbefb29c400438e0312def4fbb73fb2e70be8661ddd770",
}

Q, A, B = "Is 0.1 + 0.2 == 0.3 in Python?", "No: it is 0.30000000000000004.", "Yes, exactly."

RMBENCH_PROMPT = r"""You will be shown a user prompt followed by two responses from different assistants. Your task is to decide which response is better. You may consider any criteria you find appropriate. Try your best and think carefully, deeply analyze the responses, and provide a final verdict.
Ensure in the end that you should include the final verdict in the specified format as follows:

1. Assistant A is significantly better: \boxed{A>>B}
2. Assistant A is slightly better: \boxed{A>B}
3. Tie, relatively the same: \boxed{A=B}
4. Assistant B is slightly better: \boxed{B>A}
5. Assistant B is significantly better: \boxed{B>>A}

<|User Prompt|>
Is 0.1 + 0.2 == 0.3 in Python?

<|The Start of Assistant A's Answer|>
No: it is 0.30000000000000004.
<|The End of Assistant A's Answer|>

<|The Start of Assistant B's Answer|>
Yes, exactly.
<|The End of Assistant B's Answer|>"""


def sha(text):
    return hashlib.sha256(text.encode()).hexdigest()


def test_templates_are_the_published_ones():
    assert {k: sha(getattr(prompts, k)) for k in UPSTREAM} == UPSTREAM
    # the README's own spelling, kept as printed there
    assert "1. Assistant A is significantly better: \\\\boxed{{A>>B}}\n" in prompts.RMBENCH_README
    assert prompts.RMBENCH_README.startswith("You will be shown a user prompt followed by two responses")


def test_rmbench_messages():
    p = get_protocol()
    assert p.name == "rmbench" and get_protocol("rmbench") is PROTOCOLS["rmbench"]
    assert p.messages(Q, A, B) == ({"role": "user", "content": RMBENCH_PROMPT},)
    # answers that look like fields or braces stay as they are, and each lands in its own slot
    (m,) = p.messages("{question} 你好", "{answer_2} }{", "\\boxed{B>>A} 🎉")
    assert m["content"].endswith("<|User Prompt|>\n{question} 你好\n\n<|The Start of Assistant A's Answer|>\n"
                                 "{answer_2} }{\n<|The End of Assistant A's Answer|>\n\n<|The Start of Assistant "
                                 "B's Answer|>\n\\boxed{B>>A} 🎉\n<|The End of Assistant B's Answer|>")
    rules = (p.tie, p.invalid, p.orders, p.answer_prefix, p.verdict_strings)
    assert rules == (0.0, 0.0, "both", "\\boxed{", ("A", "B"))
    assert p.messages(Q, A, B) is not p.messages(Q, A, B) and p.messages(Q, A, B)[0] is not p.messages(Q, A, B)[0]


def test_rewardbench_messages():
    p = get_protocol("rewardbench")
    system, user = p.messages(Q, A, B)
    assert system == {"role": "system", "content": prompts.REWARDBENCH_SYSTEM}
    assert system["content"].startswith("Please act as an impartial judge and evaluate the quality of the responses "
                                        "provided by two AI assistants to the user question displayed below. ")
    assert system["content"].endswith('output your final verdict by strictly following this format: "[[A]]" if '
                                      'assistant A is better, "[[B]]" if assistant B is better.')
    assert user == {"role": "user", "content": f"[User Question]\n{Q}\n\n[The Start of Assistant A's Answer]\n{A}\n"
                    f"[The End of Assistant A's Answer]\n\n[The Start of Assistant B's Answer]\n{B}\n"
                    f"[The End of Assistant B's Answer]"}
    assert (p.tie, p.invalid, p.orders, p.answer_prefix) == (0.5, 0.5, "random", "[[")


def test_rm_r1_messages():
    system, user = get_protocol("rm-r1").messages(Q, A, B)
    assert system["role"] == "system" and system["content"] == prompts.RM_R1_INSTRUCT_SYSTEM
    assert system["content"].startswith("Please act as an impartial judge and evaluate the quality of the responses "
                                        "provided by two AI Chatbots to the Client's question displayed below.\n\n")
    assert system["content"].endswith("</eval>\n\n<answer>[[A/B]]</answer>")
    body = (f"[Client Question]\n{Q}\n\n[The Start of Chatbot A's Response]\n{A}\n[The End of Chatbot A's Response]"
            f"\n\n[The Start of Chatbot B's Response]\n{B}\n[The End of Chatbot B's Response]")
    assert user == {"role": "user", "content": body}
    (only,) = get_protocol("rm-r1-reasoning").messages(Q, A, B)
    assert only == {"role": "user", "content": "Please act as an impartial judge and evaluate the quality of the "
                    "responses provided by two AI Chatbots to the Client question displayed below. \n\n" + body +
                    "\n\nOutput your final verdict at last by strictly following this format: '<answer>[[A]]</answer>'"
                    " if Chatbot A is better, or '<answer>[[B]]</answer>' if Chatbot B is better."}
    for name in ("rm-r1", "rm-r1-reasoning"):
        p = get_protocol(name)
        assert (p.tie, p.invalid, p.orders, p.answer_prefix) == (0.5, 0.0, "random", "<answer>[[")
        assert "process_final_result.py line 31" in p.notes and "\n" not in p.notes


@pytest.mark.parametrize("name,rests", [("rmbench", (">>B}", ">A}")), ("rewardbench", ("]]", "]]")),
                                        ("rm-r1", ("]]</answer>",) * 2), ("rm-r1-reasoning", ("]]</answer>",) * 2)])
def test_answer_prefix_leads_to_the_verdict(name, rests):
    # logit verdicts: the forced prefix, then one of verdict_strings, is the start of a verdict the parser reads
    p = get_protocol(name)
    assert [p.parse(p.answer_prefix + s + r).winner for s, r in zip(p.verdict_strings, rests)] == ["A", "B"]


LONG = "Let me weigh both answers carefully. " * 200
THINK = ("<think>\nThe format is \\boxed{A>>B} through \\boxed{B>>A}. At first glance \\boxed{A>>B} seems right, "
         "but A's arithmetic is off.\n</think>\n\n")
RMBENCH_CASES = [
    ("\\boxed{A>>B}", Verdict("A", "A>>B")),
    ("\\boxed{A>B}", Verdict("A", "A>B")),
    ("\\boxed{A=B}", Verdict("tie", "A=B")),
    ("\\boxed{B>A}", Verdict("B", "B>A")),
    ("\\boxed{B>>A}", Verdict("B", "B>>A")),
    (LONG + "Final verdict: \\boxed{B>A}", Verdict("B", "B>A")),
    (THINK + "Assistant B is significantly better.\n\n\\boxed{B>>A}", Verdict("B", "B>>A")),
    ("Quoting the format \\boxed{A>>B} ... \\boxed{B>>A}; mine is \\boxed{A=B}.", Verdict("tie", "A=B")),
    ("**Final verdict:** $\\boxed{ A >> B }$  \n\n---\n", Verdict("A", "A>>B")),
    ("两个回答都不错，但 A 更准确 ✅😀。最终结论：\\boxed{A>B}\n", Verdict("A", "A>B")),
    ("\\\\boxed{B>A}", Verdict("B", "B>A")),  # the README's source spelling echoed back
    ("\\boxed{A>B} then again \\boxed{B>A}", Verdict("B", "B>A")),  # last wins
    ("\\boxed{A>B} but finally \\boxed{A>B or B>A}", Verdict(None, why="unrecognised verdict 'A>B or B>A'")),
    ("\\boxed{[[A>B]]}", Verdict(None, why="unrecognised verdict '[[A>B]]'")),
    ("\\boxed{\\text{A>B}}", Verdict(None, why="unrecognised verdict '\\\\text{A>B}'")),
    ("\\boxed{A}", Verdict(None, why="unrecognised verdict 'A'")),
    ("Assistant A is better: A>>B", Verdict(None, why="no verdict")),
    ("\\boxed{A>B", Verdict(None, why="no verdict")),  # never closed
    (THINK, Verdict("A", "A>>B")),  # only the reasoning holds one: the last of those still decides
    ("", Verdict(None, why="no verdict")),
]


@pytest.mark.parametrize("text,want", RMBENCH_CASES)
def test_rmbench_parser(text, want):
    assert get_protocol("rmbench").parse(text) == want


BRACKETS = [  # text, rewardbench 0.1.4, RM-R1
    ("[[A]]", "A", "A"),
    ("[[B]]", "B", "B"),
    (LONG + "\nTherefore my final verdict is: [[B]]", "B", "B"),
    ("<think>At first [[B]] looked right, but no.</think>\n\nFinal verdict: [[A]]", "A", None),
    ("<think>At first [[A]] looked right, but no.</think>\n\nFinal verdict: [[B]]", "A", None),  # 0.1.4: A first
    ("<answer>[[B]]</answer>", "B", "B"),
    ("<type>Chat</type>\n<rubric>…</rubric>\n<eval><quote_A>x</quote_A></eval>\n\n<answer>[[A]]</answer>\n",
     "A", "A"),
    ("Both are fine: [[A]] and [[B]]", "A", None),
    ("It is a tie: [[C]]", None, None),
    ("I cannot decide.", None, None),
    ("最终裁决：[[B]] 🎉🎉", "B", "B"),
    ("**Verdict:** [[B]]  \n\n", "B", "B"),
    ("[[a]] or [[ A ]] or [A]", None, None),
    ("\\boxed{A>B}", None, None),
    ("", None, None),
]


@pytest.mark.parametrize("text,rewardbench,rm_r1", BRACKETS)
def test_bracket_parsers(text, rewardbench, rm_r1):
    rb, r1 = get_protocol("rewardbench").parse(text), get_protocol("rm-r1").parse(text)
    assert (rb.winner, r1.winner) == (rewardbench, rm_r1)
    assert rb.strength is None and r1.strength is None
    assert get_protocol("rm-r1-reasoning").parse(text) == r1
    if rm_r1 is None:
        assert r1.why == ("both A and B" if "[[A]]" in text and "[[B]]" in text else "no verdict")
    if rewardbench is None:
        assert rb.why == ("no verdict ([[C]]: rewardbench 0.1.4 has no tie)" if "[[C]]" in text else "no verdict")


def test_no_text_is_invalid():
    for p in PROTOCOLS.values():
        assert p.parse(None) == Verdict(None, why="no text")


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_custom_template_and_regex(tmp_path):
    tpl = write(tmp_path, "judge.txt", "Q: {{ question }}\n{% for k, v in [('A', answer_a), ('B', answer_b)] %}"
                "[{{ k }}] {{ v }}\n{% endfor %}Say VERDICT: A, B or tie.\n")
    p = get_protocol("custom", template_path=tpl, verdict_regex=r"VERDICT:\s*(?P<verdict>\w+)")
    assert p.messages("数学？", "{{ answer_b }}", "😀") == (
        {"role": "user", "content": "Q: 数学？\n[A] {{ answer_b }}\n[B] 😀\nSay VERDICT: A, B or tie."},)
    assert (p.name, p.template_path, p.verdict_regex, p.answer_prefix) == ("custom", str(tpl),
                                                                           r"VERDICT:\s*(?P<verdict>\w+)", None)
    cases = [("VERDICT: A", Verdict("A", "A")), ("<think>VERDICT: A</think> VERDICT: B", Verdict("B", "B")),
             ("VERDICT: TIE", Verdict("tie", "TIE")), ("VERDICT: C\n", Verdict("tie", "C")),
             ("VERDICT: a", Verdict(None, why="unrecognised verdict 'a'")),
             ("VERDICT: maybe", Verdict(None, why="unrecognised verdict 'maybe'")),
             ("no verdict at all", Verdict(None, why="no verdict"))]
    assert [p.parse(t) for t, _ in cases] == [v for _, v in cases]
    # group 1 when nothing is named; the symbols A=B and =; a group that did not take part
    q = get_protocol("custom", template_path=tpl, verdict_regex=r"\[\[(A|B|A=B|=)\]\]|(?i:final: none)")
    assert [q.parse(t).winner for t in ("[[A=B]]", "x [[B]] y [[=]]", "[[A]]  ")] == ["tie", "tie", "A"]
    assert q.parse("[[B]] FINAL: none") == Verdict(None, why="the verdict group did not take part in the last match")
    assert pickle.loads(pickle.dumps(p)).messages("q", "a", "b") == p.messages("q", "a", "b")


def test_custom_json_messages(tmp_path):
    tpl = write(tmp_path, "judge.json", json.dumps([
        {"role": "system", "content": "You judge.\n"},
        {"role": "user", "content": "{{ question }}|{{ answer_a | upper }}|{{ answer_b }}"}]))
    p = get_protocol("custom", template_path=tpl, verdict_regex=r"\[\[(?P<verdict>[AB])\]\]")
    assert p.messages("q", "a", "b") == ({"role": "system", "content": "You judge.\n"},
                                         {"role": "user", "content": "q|A|b"})


def test_presets_take_a_template_or_a_regex(tmp_path):
    tpl = write(tmp_path, "mine.txt", "{{ question }} / {{ answer_a }} / {{ answer_b }}\n")
    p = get_protocol("rewardbench", template_path=tpl)
    assert p.messages("q", "a", "b") == ({"role": "user", "content": "q / a / b"},)
    assert p.parse("[[B]]") == Verdict("B")
    assert (p.tie, p.invalid, p.orders, p.answer_prefix) == (0.5, 0.5, "random", "[[")
    assert p.notes.endswith(f"Replaced here: template {tpl}.") and p.template_path == str(tpl)
    r = get_protocol("rmbench", verdict_regex=r"Winner: (A|B)")
    assert r.messages(Q, A, B) == PROTOCOLS["rmbench"].messages(Q, A, B)
    assert r.parse("\\boxed{A>B} Winner: B") == Verdict("B", "B") and r.verdict_regex == "Winner: (A|B)"
    assert PROTOCOLS["rmbench"].parse("Winner: B") == Verdict(None, why="no verdict")  # the preset is untouched


@pytest.mark.parametrize("name,content,regex,message", [
    ("t.txt", "{{ question }} {{ answer_a }} {{ answer_b }", r"(A)", "{path}: line 1: unexpected '}}'"),
    ("t.txt", "{{ question }}\n{% if answer_a %}{{ answer_b }}", r"(A)", "{path}: line 2: Unexpected end of template. "
     "Jinja was looking for the following tags: 'elif' or 'else' or 'endif'. The innermost block that needs to be "
     "closed is 'if'."),
    ("t.txt", "{{ question }} {{ answer_a }} {{ answer_b }} {{ rubric }}", r"(A)",
     "{path}: uses rubric; only question, answer_a and answer_b are given"),
    ("t.txt", "{{ question }} {{ answer_a }}", r"(A)", "{path}: never uses answer_b, so the judge would not see it"),
    ("t.txt", "{{ question }} {{ answer_a }} {{ answer_b }} {{ answer_a.missing }}", r"(A)",
     "{path}: does not render: 'str object' has no attribute 'missing'"),
    ("t.json", "[{\"role\": \"user\", \"content\": 1}]", r"(A)",
     "{path}: message 0 must be {{\"role\", \"content\"}} with string content"),
    ("t.json", "[{\"role\": \"judge\", \"content\": \"x\"}]", r"(A)",
     "{path}: message 0 has role 'judge'; use one of system, user, assistant"),
    ("t.json", "{\"role\": \"user\"", r"(A)", "{path}: not JSON: Expecting ',' delimiter: line 1 column 16 (char 15)"),
    ("t.json", "[]", r"(A)", "{path}: must be a non-empty JSON list of {{\"role\", \"content\"}} objects"),
    (None, None, r"(A)", "{path}: cannot be read: [Errno 2] No such file or directory: '{path}'"),
])
def test_bad_templates(tmp_path, name, content, regex, message):
    path = tmp_path / (name or "absent.txt")
    if content is not None:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(UsageError) as e:
        get_protocol("custom", template_path=path, verdict_regex=regex)
    assert str(e.value) == "judge template " + message.format(path=path)


def test_bad_regexes_and_names(tmp_path):
    tpl = write(tmp_path, "ok.txt", "{{ question }}{{ answer_a }}{{ answer_b }}")
    for regex, message in [(r"(?P<verdict>A", "verdict regex '(?P<verdict>A': does not compile: missing ), "
                                               "unterminated subpattern at position 0"),
                           (r"\[\[A\]\]", "verdict regex '\\\\[\\\\[A\\\\]\\\\]': has no group to read the verdict "
                                          "from (name one: (?P<verdict>...))")]:
        with pytest.raises(UsageError) as e:
            get_protocol("custom", template_path=tpl, verdict_regex=regex)
        assert str(e.value) == message
    for kw in ({"template_path": tpl}, {"verdict_regex": "(A)"}, {}):
        with pytest.raises(UsageError, match="^judge protocol 'custom' needs both a template file and a verdict "
                                             "regex$"):
            get_protocol("custom", **kw)
    with pytest.raises(UsageError, match="^unknown judge protocol 'mtbench': choose from rmbench, rewardbench, rm-r1, "
                                         "rm-r1-reasoning, custom$"):
        get_protocol("mtbench")


def test_describe_and_pickle():
    for name, p in PROTOCOLS.items():
        d = p.describe()
        assert isinstance(p, Protocol) and d["name"] == name and "build" not in d and json.dumps(d)
        assert "\n" not in p.notes and p.notes
        assert pickle.loads(pickle.dumps(p)).messages(Q, A, B) == p.messages(Q, A, B)


PEER_SCRIPT = r"""
import importlib, importlib.metadata, importlib.util, json, os, sys, types

def stub(name):  # the API clients generative.py imports at the top; not needed for prompts and parsing
    try:
        importlib.import_module(name)
        return
    except ImportError:
        pass
    parent, _, child = name.rpartition(".")
    if parent:
        stub(parent)
    mod = types.ModuleType(name)
    def anything(attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return type(attr, (Exception,), {})
    mod.__getattr__ = anything
    sys.modules[name] = mod
    if parent:
        setattr(sys.modules[parent], child, mod)

for name in ("anthropic", "google.generativeai.types", "openai", "together"):
    stub(name)
# generative.py alone: the package's __init__ would load torch and transformers for nothing
where = importlib.util.find_spec("rewardbench").submodule_search_locations[0]
spec = importlib.util.spec_from_file_location("rewardbench_generative", os.path.join(where, "generative.py"))
gen = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gen)
data = json.load(sys.stdin)
out = {"version": importlib.metadata.version("rewardbench"), "messages": [], "winners": []}
for q, a, b in data["triples"]:
    conv_a = [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
    conv_b = [{"role": "user", "content": q}, {"role": "assistant", "content": b}]
    out["messages"].append(list(gen.format_judge_answers(q, conv_a, conv_b, multi_turn=False, model_modifier=None)))
out["winners"] = [gen.process_judgement(t, None) for t in data["judgements"]]
print(json.dumps(out))
"""


def test_rewardbench_equals_rewardbench_0_1_4():
    if not PEER.exists():
        pytest.skip(f"no peer environment at {PEER} (bash benchmarks/peer/setup.sh)")
    triples = [(Q, A, B), ("", "", ""), ("{question} {answer_a}", "}{ {{", "\\boxed{A>B} [[B]]"),
               ("多轮？😀\n\nline two", "答案一\n", "  answer two  "), ("q" * 3000, "a\r\nb", "\t")]
    judgements = [t for t, _, _ in BRACKETS] + [t for t, _ in RMBENCH_CASES] + ["[[A]][[B]]", "[[B]][[A]]", "[[C]]"]
    stdin = json.dumps({"triples": triples, "judgements": judgements})
    proc = subprocess.run([str(PEER), "-c", PEER_SCRIPT], input=stdin, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": ""}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    peer = json.loads(proc.stdout)
    assert peer["version"] == "0.1.4"
    p = get_protocol("rewardbench")
    ours = [list(p.messages(q, a, b)) for q, a, b in triples]
    assert ours == [[{"role": "system", "content": s}, {"role": "user", "content": u}] for s, u in peer["messages"]]
    assert [p.parse(t).winner for t in judgements] == [{"A": "A", "B": "B", "error": None}[w] for w in peer["winners"]]

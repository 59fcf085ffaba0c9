"""Judge protocols: the prompt a judge is shown for one (question, answer A, answer B) and how its
answer is read, plus the scoring rules the published evaluator applies (tie, invalid, orders).

Presets (PROTOCOLS; get_protocol(name) returns them):
- rmbench (default): RM-Bench's README template for its DeepSeek-R1 baseline as one user message;
  the last \\boxed{} decides (A>>B, A>B: A; A=B: tie; B>A, B>>A: B). RM-Bench publishes no evaluator
  code for it (no orders, seed or tie rule), so the rules follow RM-Bench's own accuracy, which counts
  a comparison only when chosen > rejected (scripts/utils.py line 90): a tie and an invalid answer
  score 0. Orders: both (our choice; nothing is published).
- rewardbench: rewardbench 0.1.4's MT-Bench pairwise prompt (system + user, format_judge_answers
  single-turn with no model modifier; a two-turn conversation: its two-turn prompt, multi_turn=True,
  see judges.conversation) and process_judgement; its run_generative.py shows each pair
  once, A/B swapped when np.random.rand() > 0.5 (no seed), and scores an answer without [[A]]/[[B]]
  0.5 ("effectively a tie"); it has no tie verdict.
- rm-r1 / rm-r1-reasoning: RM-R1's RM-Bench prompts (RM-R1-*-Instruct models: system + user;
  RM-R1-DeepSeek-Distilled models: one user message) and parser; a tie 0.5, invalid 0; one order per
  pair at random with no seed.
- custom: a user's Jinja template and verdict regex (below).

A template (template_path) or a verdict regex given with a preset's name replaces that part of the
preset and keeps the rest (rules, notes, answer_prefix; a template also drops the two-turn prompt).
"custom" needs both. A template file is rendered with jinja2 (sandboxed, StrictUndefined) over
question, answer_a and answer_b, and must use all three and nothing else. A file named *.json holds a list of {"role", "content"} messages, each
content a template; any other file is one user message (its one trailing newline dropped).
Logit verdicts (no decoding): force the answer to start with answer_prefix and compare the next-token
logits of verdict_strings.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Callable

from rmbench_fast.errors import UsageError, one_line
from rmbench_fast.judges import prompts
from rmbench_fast.judges.parsers import RegexParser, Verdict, parse_boxed, parse_rewardbench, parse_rm_r1

__all__ = ["Verdict", "Protocol", "PROTOCOLS", "DEFAULT", "get_protocol", "load_template", "TemplateMessages"]

FIELDS = ("question", "answer_a", "answer_b")
ROLES = ("system", "user", "assistant")


@dataclass(frozen=True)
class Protocol:
    name: str
    build: Callable = field(repr=False)  # (question, answer_a, answer_b) -> messages
    parser: Callable = field(repr=False)  # text -> Verdict
    tie: float = 0.0  # what a tie verdict scores
    invalid: float | str = 0.0  # what an answer without a verdict scores: a float, or "coin"
    orders: str = "both"  # the published evaluator's: "random" (each pair once, A/B swapped at random) or "both"
    notes: str = ""  # one line: what the published evaluator does
    answer_prefix: str | None = None  # logit verdicts: the answer starts with this, the next token decides
    verdict_strings: tuple = ("A", "B")
    template_path: str | None = None  # a user's template replaced the preset's
    verdict_regex: str | None = None  # a user's regex replaced the preset's parser
    # (question_1, answer_1, question_2, answer_a, answer_b) -> messages: the published two-turn prompt,
    # where there is one (judges.conversation shows other conversations as a transcript)
    two_turn: Callable | None = field(default=None, repr=False)

    def messages(self, question: str, answer_a: str, answer_b: str) -> tuple:
        """The chat messages ({"role", "content"} dicts, fresh each call) for one comparison."""
        return tuple(dict(m) for m in self.build(question, answer_a, answer_b))

    def two_turn_messages(self, question_1: str, answer_1: str, question_2: str, answer_a: str,
                          answer_b: str) -> tuple:
        """The two-turn prompt's messages: the shared first exchange, the second question, each answer."""
        return tuple(dict(m) for m in self.two_turn(question_1, answer_1, question_2, answer_a, answer_b))

    def parse(self, text: str | None) -> Verdict:
        if text is None:
            return Verdict(None, why="no text")
        return self.parser(text)

    def describe(self) -> dict:
        """Everything but the callables, for a results file."""
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("build", "parser", "two_turn")}
        d["verdict_strings"] = list(self.verdict_strings)
        d["two_turn_prompt"] = self.two_turn is not None
        return d


def _rmbench(question, answer_a, answer_b):
    return ({"role": "user", "content": prompts.RMBENCH_TEMPLATE.format(
        question=question, answer_1=answer_a, answer_2=answer_b)},)


def _rewardbench(question, answer_a, answer_b):
    user = prompts.REWARDBENCH_USER.format(question=question, answer_a=answer_a, answer_b=answer_b)
    return ({"role": "system", "content": prompts.REWARDBENCH_SYSTEM}, {"role": "user", "content": user})


def _rewardbench_two_turn(question_1, answer_1, question_2, answer_a, answer_b):
    """format_judge_answers(multi_turn=True): answer_a_1 and answer_b_1 are the shared first answer."""
    user = prompts.REWARDBENCH_MULTI_USER.format(question_1=question_1, question_2=question_2, answer_a_1=answer_1,
                                                 answer_b_1=answer_1, answer_a_2=answer_a, answer_b_2=answer_b)
    return ({"role": "system", "content": prompts.REWARDBENCH_MULTI_SYSTEM}, {"role": "user", "content": user})


def _rm_r1(question, answer_a, answer_b):
    user = prompts.RM_R1_INSTRUCT_USER.format(question=question, answer_a=answer_a, answer_b=answer_b)
    return ({"role": "system", "content": prompts.RM_R1_INSTRUCT_SYSTEM}, {"role": "user", "content": user})


def _rm_r1_reasoning(question, answer_a, answer_b):
    return ({"role": "user", "content": prompts.RM_R1_REASONING_USER.format(
        question=question, answer_a=answer_a, answer_b=answer_b)},)


_RM_R1_NOTES = ("RM-R1 eval/RM-Bench/scripts/run_generative.py: each pair once, A/B swapped when "
                "np.random.rand() > 0.5 with no seed; greedy (temperature 0, max_tokens 50000 from "
                "eval_one_command.sh); [[A]] or [[B]] anywhere, both or neither invalid (0), a tie 0.5 "
                "(never parsed); its process_final_result.py line 31 loads rotation 2's results from "
                "rotation 3's file (total_dataset_3), so 3 of the 9 matrix cells repeat other pairs.")

PROTOCOLS = {
    "rmbench": Protocol(
        "rmbench", _rmbench, parse_boxed, tie=0.0, invalid=0.0, orders="both", answer_prefix="\\boxed{",
        notes="RM-Bench README (DeepSeek-R1 baseline): the template only; no evaluator code, orders, seed or "
              "tie rule published; the last \\boxed{} decides; tie and invalid score 0 as RM-Bench's own "
              "accuracy credits only chosen > rejected; both orders is our choice."),
    "rewardbench": Protocol(
        "rewardbench", _rewardbench, parse_rewardbench, tie=0.5, invalid=0.5, orders="random",
        answer_prefix="[[", two_turn=_rewardbench_two_turn,
        notes="rewardbench 0.1.4 scripts/run_generative.py: each pair once, A/B swapped when np.random.rand() "
              "> 0.5 with no seed; greedy (temperature 0, max_tokens 2048); [[A]] anywhere wins, else [[B]]; "
              "no tie verdict ([[C]] is not read); no verdict scores 0.5 ('effectively a tie')."),
    "rm-r1": Protocol(
        "rm-r1", _rm_r1, parse_rm_r1, tie=0.5, invalid=0.0, orders="random", answer_prefix="<answer>[[",
        notes="RM-R1-*-Instruct models (system + user prompt). " + _RM_R1_NOTES),
    "rm-r1-reasoning": Protocol(
        "rm-r1-reasoning", _rm_r1_reasoning, parse_rm_r1, tie=0.5, invalid=0.0, orders="random",
        answer_prefix="<answer>[[",
        notes="RM-R1-DeepSeek-Distilled models (one user message, no system). " + _RM_R1_NOTES),
}
DEFAULT = "rmbench"
CUSTOM = Protocol(
    "custom", _rmbench, parse_boxed, tie=0.0, invalid=0.0, orders="both", answer_prefix=None,
    notes="a user's template and verdict regex; tie and invalid score 0 as in RM-Bench's accuracy (chosen > "
          "rejected); both orders.")


class TemplateMessages:
    """A user's message templates, compiled and checked once (jinja2 sandbox, StrictUndefined).
    Called as (question, answer_a, answer_b) -> messages. Pickles by its sources."""

    def __init__(self, path: str, specs: tuple):
        import jinja2
        from jinja2 import meta
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        self.path, self.specs = str(path), tuple((r, c) for r, c in specs)
        env = ImmutableSandboxedEnvironment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                                            autoescape=False)
        self.templates, used = [], set()
        for i, (role, source) in enumerate(self.specs):
            where = f"judge template {self.path}" + (f", message {i}" if len(self.specs) > 1 else "")
            try:
                used |= meta.find_undeclared_variables(env.parse(source))
                self.templates.append((role, env.from_string(source)))
            except jinja2.TemplateSyntaxError as e:
                raise UsageError(f"{where}: line {e.lineno}: {one_line(e.message)}") from None
        unknown, unused = sorted(used - set(FIELDS)), [f for f in FIELDS if f not in used]
        if unknown:
            raise UsageError(f"judge template {self.path}: uses {', '.join(unknown)}; only question, answer_a "
                             f"and answer_b are given")
        if unused:
            raise UsageError(f"judge template {self.path}: never uses {', '.join(unused)}, so the judge "
                             f"would not see it")
        self("Q?", "answer one", "answer two")  # a template that cannot render fails here, not mid-run

    def __call__(self, question, answer_a, answer_b):
        import jinja2

        values = {"question": question, "answer_a": answer_a, "answer_b": answer_b}
        try:
            return tuple({"role": role, "content": t.render(values)} for role, t in self.templates)
        except jinja2.TemplateError as e:
            raise UsageError(f"judge template {self.path}: does not render: {one_line(e, 200)}") from None

    def __reduce__(self):
        return (TemplateMessages, (self.path, self.specs))

    def __repr__(self) -> str:
        return f"TemplateMessages({self.path!r})"


def load_template(path) -> TemplateMessages:
    """A template file (see the module docstring) as a message builder; UsageError naming the file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"judge template {path}: cannot be read: {one_line(e)}") from None
    if path.suffix.lower() != ".json":
        if text.endswith("\r\n"):
            text = text[:-2]
        elif text.endswith("\n"):
            text = text[:-1]
        return TemplateMessages(str(path), (("user", text),))
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise UsageError(f"judge template {path}: not JSON: {one_line(e)}") from None
    shape = "a non-empty JSON list of {\"role\", \"content\"} objects"
    if not isinstance(data, list) or not data:
        raise UsageError(f"judge template {path}: must be {shape}")
    specs = []
    for i, m in enumerate(data):
        if not isinstance(m, dict) or set(m) != {"role", "content"} or not isinstance(m["content"], str):
            raise UsageError(f"judge template {path}: message {i} must be {{\"role\", \"content\"}} with "
                             f"string content")
        if m["role"] not in ROLES:
            raise UsageError(f"judge template {path}: message {i} has role {m['role']!r}; use one of "
                             f"{', '.join(ROLES)}")
        specs.append((m["role"], m["content"]))
    return TemplateMessages(str(path), tuple(specs))


def get_protocol(name: str = DEFAULT, template_path=None, verdict_regex: str | None = None) -> Protocol:
    """The preset `name` ("custom": a user's template and regex, both needed), with a given template
    and/or verdict regex replacing the preset's. UsageError (one line) for an unknown name, a bad
    template or a bad regex."""
    if name == "custom":
        if template_path is None or verdict_regex is None:
            raise UsageError("judge protocol 'custom' needs both a template file and a verdict regex")
        base = CUSTOM
    elif name in PROTOCOLS:
        base = PROTOCOLS[name]
    else:
        raise UsageError(f"unknown judge protocol {name!r}: choose from {', '.join([*PROTOCOLS, 'custom'])}")
    changes, told = {}, []
    if template_path is not None:
        changes.update(build=load_template(template_path), template_path=str(template_path), two_turn=None)
        told.append(f"template {template_path}")
    if verdict_regex is not None:
        changes.update(parser=RegexParser(verdict_regex), verdict_regex=verdict_regex)
        told.append(f"verdict regex {verdict_regex!r}")
    if told and name != "custom":
        changes["notes"] = f"{base.notes} Replaced here: {' and '.join(told)}."
    return replace(base, **changes) if changes else base

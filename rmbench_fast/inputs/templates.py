"""Chat templates: the texts a model sees, as the official RM-Bench scripts build them.

The official flow renders the tokenizer's own chat template when it has one (transformers'
apply_chat_template, tokenize=False, no generation prompt: [user] for the prompt text, [user,
assistant] for the full text); a tokenizer holding several named templates uses its `default` one.
Only a tokenizer without a template gets a FastChat conversation template: --chat_template, `tulu`
by default. FastChat names: `tulu` is built in; every other name of FastChat's registry (and the
three rewardbench registers: pku-align, openbmb, Ziya) comes from the `fschat` package
(pip install 'rmbench-fast[fastchat]').

Conversations (a prompt, or a response, given as a list of {role, content} messages: the
RewardBench prior sets' prompts, conversational pairs) render through the same choice, every turn:
the tokenizer's template over the whole message list (only role and content passed), or the
FastChat template with each user / assistant turn appended in order (a leading system message as
the template's system message), as rewardbench's prepare_dialogue builds its multi-turn texts. A
string prompt with a string response keeps the single-turn path above, unchanged.

rmbench-fast also lets --chat-template override a tokenizer's own template (a FastChat name, a
Jinja file, or another of its named templates): that departs from the official flow, so it is
warned about and recorded in run.json.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError

# rewardbench's chattemplates.py registers these with FastChat when the official scripts import it:
# (system message, roles, separator style name, separator)
REWARDBENCH_TEMPLATES = {
    "pku-align": ("BEGINNING OF CONVERSATION:", ("USER", "ASSISTANT"), "ADD_COLON_SPACE_SINGLE", " "),
    "openbmb": ("", ("User: ", "Assistant: "), "NO_COLON_SINGLE", "\n\n"),
    "Ziya": ("", ("Human", "Assistant"), "ADD_COLON_SPACE_SINGLE", "\n\n"),
}


@dataclass(frozen=True)
class NewlineTemplate:
    """FastChat's ADD_NEW_LINE_SINGLE style: each turn is `role\\nmessage` + sep; an empty message
    leaves `role\\n` alone. (`tulu`: roles <|user|> / <|assistant|>, sep "\\n", no system.)"""

    user: str
    assistant: str
    sep: str = "\n"
    system: str = ""

    def render(self, prompt: str, response: str | None) -> str:
        out = "" if self.system == "" else self.system + self.sep
        for role, message in [(self.user, prompt)] + ([] if response is None else [(self.assistant, response)]):
            out += f"{role}\n{message}{self.sep}" if message else f"{role}\n"
        return out

    def render_messages(self, messages: list) -> str:
        """Every turn of a conversation, the way `render` writes one (a leading system message as
        the system text)."""
        system, turns = split_system(messages)
        system = self.system if system is None else system
        out = "" if system == "" else system + self.sep
        for role, message in turns:
            role = self.user if role == "user" else self.assistant
            out += f"{role}\n{message}{self.sep}" if message else f"{role}\n"
        return out


def split_system(messages: list) -> tuple[str | None, list[tuple[str, str]]]:
    """(the leading system message's content or None, the (role, content) turns after it). Roles
    other than user and assistant (or a system message later on) are refused: a FastChat template
    has two roles."""
    system = None
    turns = []
    for j, m in enumerate(messages):
        role, content = m["role"], m["content"]
        if role == "system" and j == 0:
            system = content
        elif role in ("user", "assistant"):
            turns.append((role, content))
        else:
            where = "a system message after the first turn" if role == "system" else f"the role {role!r}"
            raise UsageError(f"a conversation holds {where} (message {j}): a FastChat template renders a "
                             "leading system message and user / assistant turns only")
    return system, turns


def as_messages(value, role: str) -> list:
    """A prompt (role user) or response (role assistant): a string as one message of that role, a
    list of messages as its own {role, content} messages."""
    if isinstance(value, str):
        return [{"role": role, "content": value}]
    return [{"role": m["role"], "content": m["content"]} for m in value]


BUILTIN = {"tulu": NewlineTemplate("<|user|>", "<|assistant|>")}


class FastChatTemplate:
    """A FastChat conversation template by name, rendered as rewardbench's prepare_dialogue does."""

    def __init__(self, name: str):
        try:
            from fastchat.conversation import Conversation, SeparatorStyle, conv_templates, get_conv_template
        except ImportError:
            raise UsageError(f"--chat-template {name}: FastChat templates other than "
                             f"{', '.join(BUILTIN)} need the fschat package: pip install 'rmbench-fast[fastchat]'"
                             ) from None
        if name in REWARDBENCH_TEMPLATES and name not in conv_templates:
            system, roles, style, sep = REWARDBENCH_TEMPLATES[name]
            conv_templates[name] = Conversation(name=name, system_message=system, roles=roles,
                                                sep_style=getattr(SeparatorStyle, style), sep=sep)
        if name not in conv_templates:
            raise UsageError(f"--chat-template {name}: not a FastChat conversation template, a built-in template "
                             f"({', '.join(BUILTIN)}), one of the tokenizer's named templates, or a Jinja file")
        self.name, self._get = name, get_conv_template

    def render(self, prompt: str, response: str | None) -> str:
        conv = self._get(self.name)
        conv.messages = [[conv.roles[0], prompt]] + ([] if response is None else [[conv.roles[1], response]])
        return conv.get_prompt()

    def render_messages(self, messages: list) -> str:
        """Every turn appended in order (roles[0] for user, roles[1] for assistant), as
        prepare_dialogue fills `dialogue_template.messages`; a leading system message is set as the
        template's system message."""
        conv = self._get(self.name)
        system, turns = split_system(messages)
        if system is not None:
            conv.set_system_message(system)
        conv.messages = [[conv.roles[0] if role == "user" else conv.roles[1], text] for role, text in turns]
        return conv.get_prompt()


class ChatFormat:
    """Renders (prompt) and (prompt, response) texts for one tokenizer and template choice.

    choice None: the tokenizer's own template (its `default` when it has several), else tulu.
    choice a name or a Jinja file: for a tokenizer without a template, the FastChat template of
    that name (as the official scripts) or the file; for a tokenizer with one, an override that
    departs from the official flow (`departure` says why)."""

    def __init__(self, tokenizer, choice: str | None = None):
        self.tokenizer = tokenizer
        self.jinja = None
        self.template = None
        own = getattr(tokenizer, "chat_template", None)
        self.tokenizer_has_template = own is not None  # decides the official add_eos_token, whatever is rendered
        named = own if isinstance(own, dict) else ({} if own is None else {"default": own})
        self.departure = None
        if choice is None:
            if own is None:
                self.template, self.name = BUILTIN["tulu"], "tulu"
            elif "default" in named:
                self.jinja, self.name = named["default"], "tokenizer"
            else:
                raise UsageError(f"the tokenizer has several chat templates ({', '.join(named)}) and none is "
                                 "named default: choose one with --chat-template NAME")
            return
        if choice in named:
            self.jinja, self.name = named[choice], f"tokenizer:{choice}"
        elif Path(choice).is_file():
            self.jinja, self.name = Path(choice).read_text(encoding="utf-8"), f"file:{Path(choice).name}"
        elif "/" in choice or choice.endswith((".jinja", ".jinja2", ".j2")):
            raise UsageError(f"--chat-template {choice}: no such Jinja file")
        else:
            self.template = BUILTIN.get(choice) or FastChatTemplate(choice)
            self.name = choice
        if own is not None and choice != "default":
            self.departure = (f"--chat-template {choice} replaces the tokenizer's own chat template, which the "
                              "official flow would use")
        elif own is None and self.jinja is not None:
            self.departure = (f"--chat-template {choice} is a Jinja file; the official flow takes FastChat template "
                              "names only")

    def text(self, prompt, response=None) -> str:
        """The text of (prompt) or (prompt, response). Strings: one user turn and one assistant turn
        (RM-Bench's path). A list of messages on either side: the whole conversation, the prompt's
        turns then the response's (a string response is one assistant turn). No turn at all (the
        prompt of conversational pairs sharing no leading turn) is the empty text: all is response."""
        if isinstance(prompt, str) and (response is None or isinstance(response, str)):
            return self._single(prompt, response)
        messages = as_messages(prompt, "user") + ([] if response is None else as_messages(response, "assistant"))
        if not messages:
            return ""
        if self.template is not None:
            return self.template.render_messages(messages)
        return self._jinja(messages)

    def _single(self, prompt: str, response: str | None) -> str:
        if self.template is not None:
            return self.template.render(prompt, response)
        messages = [{"role": "user", "content": prompt}]
        if response is not None:
            messages.append({"role": "assistant", "content": response})
        return self._jinja(messages)

    def _jinja(self, messages: list) -> str:
        try:
            out = self.tokenizer.apply_chat_template(messages, chat_template=self.jinja, tokenize=False)
        except Exception as e:
            raise UsageError(f"chat template ({self.name}) failed to render: {type(e).__name__}: {e}") from e
        if not isinstance(out, str):  # pragma: no cover - tokenize=False returns text in every version
            raise UsageError(f"chat template ({self.name}) did not render text")
        return out

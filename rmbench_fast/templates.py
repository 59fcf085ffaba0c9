"""Chat templates: the texts a model sees, exactly as the official RM-Bench scripts build them.

With a tokenizer chat template, the official code renders `apply_chat_template(messages,
tokenize=False)` with no generation prompt: [user] for the prompt text, [user, assistant] for the
full text. Without one, it uses a FastChat conversation template, `tulu` by default; the built-in
templates here reproduce FastChat's text for the templates they name (no fastchat dependency).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .errors import UsageError


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


BUILTIN = {
    "tulu": NewlineTemplate("<|user|>", "<|assistant|>"),
}


class ChatFormat:
    """Renders (prompt) and (prompt, response) texts for one tokenizer and template choice.

    choice None: the tokenizer's own chat template when it has one, else `tulu` (as the official
    scripts). A built-in name or a Jinja file given explicitly wins over the tokenizer's template.
    """

    def __init__(self, tokenizer, choice: str | None = None):
        self.tokenizer = tokenizer
        self.jinja = None
        self.builtin = None
        has_own = getattr(tokenizer, "chat_template", None) is not None
        if choice is None:
            if has_own:
                self.jinja, self.name = tokenizer.chat_template, "tokenizer"
            else:
                self.builtin, self.name = BUILTIN["tulu"], "tulu"
        elif choice in BUILTIN:
            self.builtin, self.name = BUILTIN[choice], choice
        elif Path(choice).is_file():
            self.jinja, self.name = Path(choice).read_text(encoding="utf-8"), f"file:{Path(choice).name}"
        else:
            raise UsageError(f"--chat-template: '{choice}' is neither a built-in template "
                             f"({', '.join(BUILTIN)}) nor a Jinja file")
        # The official RM flow appends EOS when the tokenizer has no chat template of its own.
        self.tokenizer_has_template = has_own

    def text(self, prompt: str, response: str | None = None) -> str:
        if self.builtin is not None:
            return self.builtin.render(prompt, response)
        messages = [{"role": "user", "content": prompt}]
        if response is not None:
            messages.append({"role": "assistant", "content": response})
        try:
            out = self.tokenizer.apply_chat_template(messages, chat_template=self.jinja, tokenize=False)
        except Exception as e:
            raise UsageError(f"chat template ({self.name}) failed to render: {type(e).__name__}: {e}") from e
        if not isinstance(out, str):  # pragma: no cover - tokenize=False returns text in every version
            raise UsageError(f"chat template ({self.name}) did not render text")
        return out

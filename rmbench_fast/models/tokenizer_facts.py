"""A tokenizer's facts kept in the result store, so that a run whose tokenized inputs are stored
does not load the tokenizer (transformers' import and the tokenizer's construction: about 1.4 s of
such a run here).

What a run reads of a tokenizer before it encodes anything is small: its chat template, its special
tokens and their ids, and, for a Jinja template, the rendering of one probe conversation (a
tokenization key names it). The first run with a tokenizer folder loads it as always and stores
those; later runs with byte-identical tokenizer files (their fingerprint), the same libraries and
this module unchanged get a StoredTokenizer, which answers those reads from the facts and loads the
real tokenizer the first time anything else is asked of it (encoding, another rendering, its
vocabulary), so a read it does not know is slower, never different. Its class is named as the real
one (what the official flow's tokenizer class is decided from).
"""

from __future__ import annotations

import hashlib
import json

# the reads a run makes before encoding (engine.prepare, the scorers' pad and BOS choices, the checks)
ATTRS = ("chat_template", "bos_token", "eos_token", "pad_token", "unk_token", "bos_token_id", "eos_token_id",
         "pad_token_id", "unk_token_id", "padding_side", "truncation_side")
PROBE = [{"role": "user", "content": "{prompt}"}, {"role": "assistant", "content": "{response}"}]


def _digest(template) -> str:
    return hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()


def facts(tokenizer, jinja: str | None) -> dict | None:
    """What StoredTokenizer needs (None when a value is not plain JSON): the attributes, the class
    name, and the probe conversation rendered with `jinja` (the run's template, when it is Jinja)."""
    out = {"class": type(tokenizer).__name__, "attrs": {a: getattr(tokenizer, a, None) for a in ATTRS},
           "renders": {}}
    if jinja is not None and "strftime_now" not in jinja:  # a template that renders today's date: not kept
        try:
            text = tokenizer.apply_chat_template(PROBE, chat_template=jinja, tokenize=False)
        except Exception:  # the run reports a template that does not render; nothing to keep
            text = None
        if isinstance(text, str):
            out["renders"][_digest(jinja)] = text
    try:
        json.dumps(out, allow_nan=False)
    except (TypeError, ValueError):
        return None
    return out


class StoredTokenizer:
    """Answers `facts` as the tokenizer did; anything else loads the tokenizer (load()) and asks it."""

    stored = True

    def __init__(self, facts: dict, load):
        self.__dict__.update(_facts=facts, _load=load, _real=None)

    @property
    def real(self):
        if self._real is None:
            self.__dict__["_real"] = self._load()
        return self._real

    def __getattr__(self, name: str):
        attrs = self.__dict__.get("_facts", {}).get("attrs", {})
        if name in attrs:
            return attrs[name]
        if name.startswith("__") or "_facts" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.real, name)

    def apply_chat_template(self, conversation, chat_template=None, tokenize=True, **kw):
        if not tokenize and not kw and conversation == PROBE and chat_template is not None:
            text = self._facts["renders"].get(_digest(chat_template))
            if text is not None:
                return text
        return self.real.apply_chat_template(conversation, chat_template=chat_template, tokenize=tokenize, **kw)

    def __setattr__(self, name, value):  # a change goes to the real tokenizer, and its fact no longer answers
        self.__dict__["_facts"] = {**self._facts, "attrs": {k: v for k, v in self._facts["attrs"].items() if k != name}}
        setattr(self.real, name, value)

    def __call__(self, *args, **kw):
        return self.real(*args, **kw)

    def __len__(self):
        return len(self.real)

    def __reduce__(self):  # pickled (sent to another process) as the real tokenizer
        return _same, (self.real,)


def _same(x):
    return x


def stored_tokenizer(facts: dict, load) -> StoredTokenizer:
    """A StoredTokenizer whose class bears the real tokenizer's name."""
    cls = type(facts["class"], (StoredTokenizer,), {"__module__": __name__})
    return cls(facts, load)

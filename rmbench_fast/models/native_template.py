"""A chat template rendered as the installed transformers renders it, without importing transformers
(issue 34: a folder with a Jinja template loaded transformers for its renders alone, 1.2-2 s of a
run's fixed cost on a 2-core CPU).

What a run asks is `tokenizer.apply_chat_template(messages, chat_template=jinja, tokenize=False)`
with messages of role and content strings. transformers answers it (tokenization_utils_base's
apply_chat_template, get_chat_template and special_tokens_map; utils/chat_template_utils.py) by
rendering the template in a sandboxed Jinja environment of its own making (trim_blocks,
lstrip_blocks, loop controls, a `{% generation %}` tag, its tojson filter, raise_exception,
strftime_now, dict and namespace), with the named special tokens as variables. `Renderer` restates
that. It is used only where the installed transformers' sources of those functions are the ones it
was written from (`restates_installed`: their digest is in KNOWN), so a transformers that renders
otherwise is asked itself; tests/test_native_template.py compares the two on real-world templates.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from datetime import datetime
from pathlib import Path

# sha256 of `_sources()` for the transformers versions Renderer restates
KNOWN = {
    "5.25.0": "706889293526f9243dc817ed7773021c8baf55f46f6dec5ad54084951d0f5e72",
}
METHODS = ("apply_chat_template", "get_chat_template", "special_tokens_map")


def _method(text: str, name: str) -> str:
    """The text of method `name` of a class in module text (from its def to the next member)."""
    start = text.find(f"\n    def {name}(")
    if start < 0:
        return ""
    ends = [i for i in (text.find("\n    def ", start + 1), text.find("\n    @", start + 1)) if i >= 0]
    return text[start:min(ends) if ends else len(text)]


def _sources() -> str | None:
    """The digest of the installed transformers' chat-template rendering (None: not installed)."""
    spec = importlib.util.find_spec("transformers")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(list(spec.submodule_search_locations)[0])
    try:  # (TokenizersBackend overrides none of the methods: an override would change the digest)
        base, backend, utils = ((root / f).read_text(encoding="utf-8") for f in (
            "tokenization_utils_base.py", "tokenization_utils_tokenizers.py", "utils/chat_template_utils.py"))
    except OSError:
        return None
    start = base.find("    SPECIAL_TOKENS_ATTRIBUTES = [")  # the names special_tokens_map holds
    attributes = base[start:base.find("]", start) + 1] if start >= 0 else ""
    parts = [_method(base, m) for m in METHODS] + [_method(backend, m) for m in METHODS] + [attributes, utils]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def restates_installed() -> bool:
    """Whether the installed transformers renders chat templates as Renderer does."""
    import jinja2

    try:
        recent = tuple(map(int, jinja2.__version__.split(".")[:3])) >= (3, 1, 6)  # transformers' floor
    except ValueError:  # a pre-release: let transformers judge it
        return False
    return recent and _sources() in KNOWN.values()


def plain_messages(conversation) -> bool:
    """A conversation Renderer takes: a non-empty list of {role, content} dicts of strings (more
    keys, other values, a batch of conversations: transformers is asked)."""
    return isinstance(conversation, list) and bool(conversation) and all(
        type(m) is dict and set(m) <= {"role", "content"} and all(type(v) is str for v in m.values())
        for m in conversation)


class Renderer:
    """Renders templates with the named special tokens `specials` ({bos_token: "<s>", ...}, the
    tokenizer's special_tokens_map), compiling each template once."""

    def __init__(self, specials: dict):
        self.specials = dict(specials)
        self._compiled = {}
        self._env = None

    def render(self, own, conversation: list, chat_template=None) -> str:
        """apply_chat_template(conversation, chat_template=..., tokenize=False) of a tokenizer whose
        chat_template is `own`."""
        template = chat_template
        if isinstance(own, dict):  # several named templates: a name picks one; none, the default
            if template is not None and template in own:
                template = own[template]
            elif template is None:
                if "default" not in own:
                    raise ValueError("This model has multiple chat templates with no default specified! Please "
                                     "either pass a chat template or the name of the template you wish to use to "
                                     "the `chat_template` argument. Available template names are "
                                     f"{sorted(own.keys())}.")
                template = own["default"]
        elif template is None:
            template = own
        if template is None:
            raise ValueError("Cannot use chat template functions because tokenizer.chat_template is not set and no "
                             "template argument was passed! For information about writing templates and setting the "
                             "tokenizer.chat_template attribute, please see the documentation at "
                             "https://huggingface.co/docs/transformers/main/en/chat_templating")
        compiled = self._compiled.get(template)
        if compiled is None:
            compiled = self._compiled[template] = self._environment().from_string(template)
        messages = [dict(m) for m in conversation]
        return compiled.render(messages=messages, tools=None, documents=None, add_generation_prompt=False,
                               **self.specials)

    def _environment(self):
        if self._env is None:
            self._env = _environment()
        return self._env


def _environment():
    """The sandboxed environment transformers compiles chat templates in."""
    import jinja2
    import jinja2.ext
    import jinja2.nodes
    import jinja2.utils
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(jinja2.ext.Extension):
        """`{% generation %}...{% endgeneration %}` renders its body (transformers records where,
        for assistant masks, which a run never asks for)."""

        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):  # no HTML escaping
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.now().strftime(fmt)

    class Dict:
        """`dict(...)` and `dict.fromkeys(...)`, and nothing else of the type."""

        def __call__(self, *args, **kwargs):
            return dict(*args, **kwargs)

        def fromkeys(self, *args, **kwargs):
            return dict.fromkeys(*args, **kwargs)

    class Namespace(jinja2.utils.Namespace):
        """Jinja's namespace refusing underscore-prefixed names."""

        def __init__(*args, **kwargs):
            self, args = args[0], args[1:]
            attrs = dict(*args, **kwargs)
            for name in attrs:
                Namespace._check(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name, value):
            Namespace._check(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def _check(name):
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(
                    f"Chat templates cannot store underscore-prefixed attributes on a namespace, but got {name!r}. "
                    "Please rename the attribute.")

    # printed by a template that prints the class itself: transformers' names
    Namespace.__module__, Namespace.__qualname__ = ("transformers.utils.chat_template_utils",
                                                    "_cached_compile_jinja_template.<locals>.TemplateNamespace")
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals.update(raise_exception=raise_exception, strftime_now=strftime_now, dict=Dict(), namespace=Namespace)
    return env

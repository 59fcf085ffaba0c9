"""A tokenizer folder read with `tokenizers` alone, for the folders tokenizer_loading builds from
tokenizer.json (issue 34: transformers' import is most of a run's fixed cost).

tokenizer_loading._load_as_451 loads tokenizer.json through transformers' TokenizersBackend and
redoes what transformers 4.51's class adds: default special tokens, the BOS/EOS post-processor,
the pre-tokenizer's prefix space, the padding side, the chat template. For the folders where all of
that is decided by the files alone (every special token an added token of tokenizer.json, or a plain
string the vocabulary lacks, which transformers appends as a special token: LlamaTokenizerFast's
default <unk>; no added-token list of tokenizer_config.json other than tokenizer.json's, no saved
truncation), `native_tokenizer` does the same on a `tokenizers.Tokenizer` and answers what a run
asks before its passes: the special tokens and their ids, the sides, the chat template
(tokenizer_facts.ATTRS), ids of texts (`tok(texts, add_special_tokens=...)["input_ids"]`),
`len(tok)` and chat-template renders (native_template). Anything else (decoding, ...) loads the
real tokenizer through tokenizer_loading and asks it, as StoredTokenizer does.
tests/test_native_tokenizer.py compares it with the real one on every test folder.
"""

from __future__ import annotations

from pathlib import Path

from .native_template import Renderer, plain_messages, restates_installed
from .tokenizer_facts import ATTRS, StoredTokenizer
from .tokenizer_loading import (CLASSES_451, _chat_template_451, bos_eos_processor, class_451, read_json,
                                saved_padding, set_prefix_space)
from .versions import transformers_version

SPECIALS = ("bos_token", "eos_token", "unk_token", "pad_token")
# keys that name more special tokens (each a chat template variable or an appended token): transformers only
EXTRA = ("additional_special_tokens", "extra_special_tokens", "model_specific_special_tokens")


def _content(value):
    return value.get("content") if isinstance(value, dict) else value


def native_tokenizer(path: str, load):
    """A NativeTokenizer for the folder at `path`, or None where only transformers can build it
    as the run's loader does. load: a function loading the real tokenizer."""
    folder = Path(path).expanduser()
    if not folder.is_dir() or not (folder / "tokenizer.json").is_file() or transformers_version() < (5,):
        return None
    cfg = read_json(folder / "tokenizer_config.json")
    name = class_451(folder, cfg)
    if (name not in CLASSES_451 or "auto_map" in cfg or cfg.get("from_slow")
            or (name == "LlamaTokenizer" and cfg.get("add_prefix_space") is not None)
            or any(cfg.get(k) for k in EXTRA) or cfg.get("split_special_tokens") or cfg.get("fix_mistral_regex")
            or (folder / "added_tokens.json").exists()):
        return None
    from tokenizers import Tokenizer

    try:
        backend = Tokenizer.from_file(str(folder / "tokenizer.json"))
    except Exception:  # noqa: BLE001 - the real loader reports it
        return None
    if backend.truncation is not None:
        return None
    decoder = backend.get_added_tokens_decoder()
    added = {t.content: i for i, t in decoder.items()}
    for i, t in (cfg.get("added_tokens_decoder") or {}).items():  # transformers adds these again: as they are
        if not _same_flags(t, decoder.get(int(i)) if str(i).isdigit() else None):
            return None
    spec = CLASSES_451[name]
    stm = {} if "added_tokens_decoder" in cfg else read_json(folder / "special_tokens_map.json")
    if any(stm.get(k) for k in EXTRA):
        return None
    # any other special token the folder names (sep, cls, mask, ...): transformers adds it, so it must be
    # an added token already (and it is a variable of chat templates: those render through transformers)
    others = [value for key, value in list(cfg.items()) + list(stm.items())
              if key.endswith("_token") and key not in SPECIALS and isinstance(value, (str, dict))]  # not add_bos_token's flag
    if any(_content(value) not in added for value in others):
        return None
    attrs, missing = {}, []
    padding = backend.padding if saved_padding(folder / "tokenizer.json") else None
    for key in SPECIALS:  # the folder's (its special_tokens_map.json's over its config's), else the class
        # default, else (pad) the saved padding's, as the loader's
        if key in cfg or key in stm or key in spec["specials"]:
            value = stm[key] if key in stm else cfg[key] if key in cfg else spec["specials"][key]
        else:
            value = padding["pad_token"] if key == "pad_token" and padding else None
        token = _content(value)
        have = decoder.get(added.get(token))  # its added token, if it is one
        if token is not None and have is None:
            if not isinstance(value, str) or not value or backend.token_to_id(token) is not None:
                return None  # transformers makes a vocabulary entry special, adds a token with these flags, ...
            missing.append(token)
        elif have is not None and not (have.special and (isinstance(value, str) or _same_flags(value, have))):
            return None  # transformers makes it special / re-adds it with the folder's flags
        attrs[key] = token
    # a special token the vocabulary lacks (LlamaTokenizerFast's default <unk>): transformers adds it at
    # the end of the vocabulary, as a special token, in this order
    from tokenizers import AddedToken

    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in missing])
    for key in SPECIALS:
        attrs[key + "_id"] = None if attrs[key] is None else backend.token_to_id(attrs[key])
    side = cfg.get("padding_side")
    if side is None:
        side = str(padding["direction"]).lower() if padding else spec.get("padding_side", "right")
    attrs.update(padding_side=side, truncation_side=cfg.get("truncation_side", "right"),
                 chat_template=_chat_template_451(folder, cfg))
    if not set_prefix_space(backend, cfg.get("add_prefix_space", spec.get("add_prefix_space", False))):
        return None  # the real loader keeps the saved pre-tokenizer then: ask it
    if "bos_eos" in spec:
        add_bos, add_eos = spec["bos_eos"]
        add_bos, add_eos = bool(cfg.get("add_bos_token", add_bos)), bool(cfg.get("add_eos_token", add_eos))
        if (add_bos and attrs["bos_token"] is None) or (add_eos and attrs["eos_token"] is None):
            return None  # an error the real loader raises
        backend.post_processor = bos_eos_processor((attrs["bos_token"], attrs["bos_token_id"]) if add_bos else None,
                                                   (attrs["eos_token"], attrs["eos_token_id"]) if add_eos else None)
    backend.no_padding()
    cls = type("TokenizersBackend", (NativeTokenizer,), {"__module__": __name__})  # the real loader's class name
    specials = None if others else {k: attrs[k] for k in SPECIALS if attrs[k] is not None}  # special_tokens_map
    return cls(backend, {a: attrs.get(a) for a in ATTRS}, load, specials)


def _same_flags(given, have) -> bool:
    """Whether a token as the folder gives it ({content, lstrip, ...}) is the added token `have`."""
    return have is not None and isinstance(given, dict) and all(
        given[f] == getattr(have, f) for f in ("content", "lstrip", "rstrip", "normalized", "special", "single_word")
        if f in given)


class NativeTokenizer(StoredTokenizer):
    """A StoredTokenizer whose facts come from the folder's files, that also encodes texts and answers
    len() with the backend; anything else loads the real tokenizer and asks it."""

    native = True

    def __init__(self, backend, attrs: dict, load, specials: dict | None = None):
        super().__init__({"attrs": attrs, "renders": {}}, load)
        self.__dict__.update(_backend=backend, _renderer=None if specials is None else Renderer(specials),
                             _restated=None)

    def __setattr__(self, name, value):  # a change goes to the real tokenizer, whose answers count from then on
        self.__dict__["_backend"] = None
        super().__setattr__(name, value)

    def __call__(self, text, add_special_tokens: bool = True, return_attention_mask=None,
                 return_token_type_ids=None, **kw):
        if kw or self._backend is None or not (isinstance(text, str) or (
                isinstance(text, list) and all(isinstance(t, str) for t in text))):
            return self.real(text, add_special_tokens=add_special_tokens, return_attention_mask=return_attention_mask,
                             return_token_type_ids=return_token_type_ids, **kw)
        if isinstance(text, str):
            return {"input_ids": self._backend.encode(text, add_special_tokens=add_special_tokens).ids}
        # without offsets where tokenizers has it (>= 0.21): the same ids, 20% sooner
        encode = getattr(self._backend, "encode_batch_fast", self._backend.encode_batch)
        return {"input_ids": [e.ids for e in encode(text, add_special_tokens=add_special_tokens)]}

    def apply_chat_template(self, conversation, chat_template=None, tokenize=True, **kw):
        """Rendered text (tokenize=False) of role / content messages: native_template's Renderer, where
        it restates the installed transformers; anything else asks the real tokenizer."""
        if not tokenize and not kw and self._backend is not None and self._renderer is not None \
                and plain_messages(conversation):
            if self._restated is None:
                self.__dict__["_restated"] = restates_installed()
            if self._restated:
                return self._renderer.render(self.chat_template, conversation, chat_template)
        return super().apply_chat_template(conversation, chat_template=chat_template, tokenize=tokenize, **kw)

    def __len__(self):
        return self._backend.get_vocab_size(with_added_tokens=True) if self._backend is not None else len(self.real)

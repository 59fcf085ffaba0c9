"""native_template renders chat templates as the installed transformers does (the text
apply_chat_template(messages, tokenize=False) returns, or the error it raises), without loading
the real tokenizer; where it cannot say so (another transformers, another special token), the
real tokenizer answers."""

import json
import shutil

import pytest
from tokenizer_folders import EDGY, FOLDERS, folders, texts, backend  # noqa: F401

from rmbench_fast.models import native_template
from rmbench_fast.models.native_tokenizer import native_tokenizer
from rmbench_fast.models.tokenizer_loading import load_tokenizer
from rmbench_fast.models.versions import transformers_version

native_only = pytest.mark.skipif(transformers_version() < (5,), reason="native tokenizers: transformers >= 5 only")

# shaped after published templates, and one for each piece of the environment
TEMPLATES = {
    "chatml": ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
               "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
               "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
               "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"),
    "llama3": ("{% set loop_messages = messages %}{% for message in loop_messages %}"
               "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
               "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
               "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"),
    "mistral": ("{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != "
                "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
                "user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}"
                "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
                "{{ message['content'] + eos_token}}{% endif %}{% endfor %}"),
    "zephyr": ("{% for message in messages %}\n{% if message['role'] == 'user' %}\n"
               "{{ '<|user|>\n' + message['content'] + eos_token }}\n{% elif message['role'] == 'system' %}\n"
               "{{ '<|system|>\n' + message['content'] + eos_token }}\n{% elif message['role'] == 'assistant' %}\n"
               "{{ '<|assistant|>\n'  + message['content'] + eos_token }}\n{% endif %}\n"
               "{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}"),
    "gemma": ("{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not "
              "supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'assistant') %}"
              "{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}"
              "{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}"),
    "indented": ("  {% for m in messages %}\n    {%- if m.role == 'user' %}\n      U: {{ m.content }}\n"
                 "    {% else %}\n      A: {{ m.content }}\n    {% endif %}\n  {% endfor %}\n"),
    "namespace_and_loops": ("{% set ns = namespace(n=0, last='') %}{% for m in messages %}"
                            "{% if m.role == 'system' %}{% continue %}{% endif %}{% set ns.n = ns.n + 1 %}"
                            "{% set ns.last = m.role %}{% if loop.index > 2 %}{% break %}{% endif %}"
                            "[{{ m.content }}]{% endfor %}{{ ns.n }} {{ ns.last }}"),
    "tojson": "{{ messages | tojson }}|{{ messages[-1] | tojson(indent=2, sort_keys=True) }}|{{ 'é<&>' | tojson }}",
    "dict": "{% set d = dict(a=1, b=messages[0].role) %}{{ d | tojson }}{{ dict.fromkeys(['x', 'y'], 0) | tojson }}",
    "generation": ("{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}<A>{{ m.content }}"
                   "{% endgeneration %}{% else %}<U>{{ m.content }}{% endif %}{% endfor %}"),
    "variables": ("{{ bos_token }}|{{ eos_token }}|{{ unk_token }}|{{ pad_token }}|{{ sep_token }}|"
                  "{{ tools is none }}|{{ documents is none }}|{{ add_generation_prompt }}|{{ strftime_now('%Y') }}|"
                  "{{ namespace }}"),
    "underscore_namespace": "{% set ns = namespace() %}{% set ns._x = 1 %}{{ messages[0].content }}",
    "unsafe_attribute": "{{ messages.__class__.__mro__ }}{{ messages[0].content }}",
    "not_jinja": "{% for m in messages %}{{ m.content }",
}
CONVERSATIONS = [
    [{"role": "user", "content": EDGY[0]}],
    [{"role": "user", "content": "What is 2 + 2?"}, {"role": "assistant", "content": EDGY[1] + EDGY[2]}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "caf\u00e9 <s> x"},
     {"role": "assistant", "content": "  4  "}],
]


def with_config(folder, tmp_path, name, **change):
    d = tmp_path / name
    shutil.copytree(folder, d)
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    (d / "tokenizer_config.json").write_text(json.dumps({**cfg, **change}))
    return d


def outcome(render):
    try:
        return "text", render()
    except Exception as e:  # noqa: BLE001 - the error is the outcome compared
        return type(e).__name__, str(e)


@native_only
@pytest.mark.parametrize("base", ["qwen2_ptf", "llama_default"])  # llama_default: <unk> appended, BOS added
@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_renders_as_transformers(folders, tmp_path, name, base):
    folder = with_config(folders[base], tmp_path, name, chat_template=TEMPLATES[name], pad_token="</s>")
    loads = []
    native = native_tokenizer(str(folder), lambda: loads.append(1) or load_tokenizer(str(folder)))
    real = load_tokenizer(str(folder))
    for conversation in CONVERSATIONS:
        for template in (None, TEMPLATES[name]):
            got = outcome(lambda: native.apply_chat_template(conversation, chat_template=template, tokenize=False))
            want = outcome(lambda: real.apply_chat_template(conversation, chat_template=template, tokenize=False))
            assert got == want, (name, conversation, template)
    assert native_template.restates_installed() is (loads == []), "rendered natively exactly where it can say so"


def test_the_installed_transformers_is_restated():
    """The transformers this suite runs under is one Renderer was written from (a newer one that
    changes how templates render is asked itself: add its digest to KNOWN after reading its sources)."""
    from rmbench_fast.models.versions import transformers_version

    if transformers_version() < (5,):
        pytest.skip("native tokenizers are for transformers 5 only")
    version = __import__("importlib.metadata").metadata.version("transformers")
    if version not in native_template.KNOWN:
        pytest.skip(f"transformers {version}: not restated, its tokenizer renders (the fallback is tested)")
    assert native_template.restates_installed()


@native_only
def test_named_templates(folders, tmp_path):
    folder = str(folders["templates_list"])
    loads = []
    native = native_tokenizer(folder, lambda: loads.append(1) or load_tokenizer(folder))
    real = load_tokenizer(folder)
    for template in (None, "tool_use", "default", "{{ messages | length }}"):
        assert native.apply_chat_template(CONVERSATIONS[2], chat_template=template, tokenize=False) == \
            real.apply_chat_template(CONVERSATIONS[2], chat_template=template, tokenize=False)
    assert native_template.restates_installed() is (loads == [])


@native_only
@pytest.mark.parametrize("case", ["other transformers", "sep token", "other keys", "tokenize", "changed"])
def test_what_it_cannot_say_goes_to_the_real_tokenizer(folders, tmp_path, monkeypatch, case):
    template = ("{{ sep_token }}{% for m in messages %}{{ m.role }}:{{ m.content }}|{{ m.name }}{% endfor %}"
                "{{ eos_token }}")
    extra = {"sep_token": "</s>"} if case == "sep token" else {}  # a special token the map names: a template variable
    folder = str(with_config(folders["qwen2_ptf"], tmp_path, "x", chat_template=template, **extra))
    if case == "other transformers":
        monkeypatch.setattr(native_template, "KNOWN", {})
    conversation = [dict(m) for m in CONVERSATIONS[1]]
    if case == "other keys":
        conversation[0]["name"] = "Ann"
    loads = []
    native = native_tokenizer(folder, lambda: loads.append(1) or load_tokenizer(folder))
    real = load_tokenizer(folder)
    kw = {"tokenize": True, "return_dict": False} if case == "tokenize" else {"tokenize": False}
    if case == "changed":
        native.eos_token = "<s>"
        real.eos_token = "<s>"
    assert native.apply_chat_template(conversation, **kw) == real.apply_chat_template(conversation, **kw)
    assert loads == [1]


@native_only
def test_the_digest_covers_what_renders(monkeypatch, tmp_path):
    """A transformers whose rendering differs in any covered function is not restated: a copy of
    the installed sources is, and each one-line change to it is not."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("transformers")
    src = Path(list(spec.submodule_search_locations)[0])
    base = (src / "tokenization_utils_base.py").read_text(encoding="utf-8")
    utils = (src / "utils" / "chat_template_utils.py").read_text(encoding="utf-8")
    backend = (src / "tokenization_utils_tokenizers.py").read_text(encoding="utf-8")
    installed = native_template.restates_installed()
    root = tmp_path / "transformers"
    (root / "utils").mkdir(parents=True)
    monkeypatch.setattr(native_template.importlib.util, "find_spec",
                        lambda name: type("Spec", (), {"submodule_search_locations": [str(root)]}))
    changes = [("", ""), ("template_kwargs = {**self.special_tokens_map, **kwargs}", "template_kwargs = kwargs"),
               ("if self._special_tokens_map.get(attr) is not None", "if True"),
               ("chat_template = template_dict[chat_template]", "pass"),
               ('        "sep_token",\n', "")]  # special_tokens_map's names
    (root / "utils" / "chat_template_utils.py").write_text(utils, encoding="utf-8")
    (root / "tokenization_utils_tokenizers.py").write_text(backend, encoding="utf-8")
    for old, new in changes:
        assert old in base
        (root / "tokenization_utils_base.py").write_text(base.replace(old, new), encoding="utf-8")
        assert native_template.restates_installed() is (installed and old == new), old
    (root / "tokenization_utils_base.py").write_text(base, encoding="utf-8")
    for name, text in [("utils/chat_template_utils.py", utils.replace("trim_blocks=True", "trim_blocks=False")),
                       ("tokenization_utils_tokenizers.py",  # TokenizersBackend overriding a method
                        backend + "\n    def special_tokens_map(self):\n        return {}\n")]:
        (root / name).write_text(text, encoding="utf-8")
        assert native_template.restates_installed() is False, name
        (root / name).write_text(utils if name.startswith("utils") else backend, encoding="utf-8")
    assert native_template.restates_installed() is installed

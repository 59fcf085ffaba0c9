import json
import os
import tempfile
from pathlib import Path

import pytest

# Tests never touch the network: no hub look-ups, whatever the machine can reach.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# The result store of every test session starts empty, away from the user's cache.
os.environ["RMBENCH_CACHE"] = tempfile.mkdtemp(prefix="rmbench-test-cache-")
# No GPU in CI: Triton kernels run in the interpreter (must be set before triton.jit decorates them).
os.environ.setdefault("TRITON_INTERPRET", "1")

SHARED = Path(os.environ.get("RMBENCH_DATA", Path(__file__).resolve().parents[1] / ".." / "shared" / "rm-bench"))


# A chat template unlike the demo's, so both template paths get exercised with their own texts.
TEST_TEMPLATE = ("{{ bos_token }}{% for m in messages %}[{{ m['role'] | upper }}] {{ m['content'] }}\n{% endfor %}")
DEMO = "rmbench_fast/demo_data/rmbench_demo.json"


@pytest.fixture(scope="session")
def data_path(request):
    if (SHARED / "chat_filtered.json").is_file():
        return str(SHARED)
    return str(Path(__file__).resolve().parents[1] / DEMO)


@pytest.fixture(scope="session")
def models(tmp_path_factory, data_path):
    """Tokenizers (chat template; Llama class without template; generic without template) and
    models for each: a reward model, a DPO policy and reference."""
    from rmbench_fast.data import load_dataset
    from rmbench_fast.tiny import build_model, llama_config, save_model, train_tokenizer

    root = tmp_path_factory.mktemp("models")
    samples = load_dataset(data_path, limit=3)
    texts = [s.prompt for s in samples] + [r for s in samples for r in s.chosen + s.rejected]
    out = {}
    for name, kw in {"tmpl": dict(chat_template=TEST_TEMPLATE),
                     "llama": dict(tokenizer_class="LlamaTokenizerFast"),
                     "plain": dict(pad=True)}.items():
        tok = train_tokenizer(texts, vocab_size=300, **kw)
        cfg = dict(vocab_size=len(tok), hidden=32, layers=2, heads=4, max_positions=8192)
        out[name] = {
            "rm": str(save_model(build_model("rm", llama_config(**cfg), seed=10), tok, root / name / "rm")),
            "policy": str(save_model(build_model("lm", llama_config(**cfg), seed=11), tok, root / name / "policy")),
            "ref": str(save_model(build_model("lm", llama_config(**cfg), seed=12), tok, root / name / "ref")),
        }
    return out


@pytest.fixture
def shared_data():
    """The real RM-Bench files (four domains), read from ../shared/rm-bench, never committed."""
    if not (SHARED / "chat_filtered.json").is_file():
        pytest.skip(f"RM-Bench data not found at {SHARED} (set RMBENCH_DATA)")
    return SHARED


def make_item(i, domain=None, prompt=None):
    item = {
        "id": i,
        "prompt": prompt or f"Question number {i}: what is {i} + {i}?",
        "chosen": [f"{2 * i}.", f"The answer is {2 * i}.", f"**Answer:** {2 * i}"],
        "rejected": [f"{2 * i + 1}.", f"The answer is {2 * i + 1}.", f"**Answer:** {2 * i + 1}"],
        "subset": "toy",
    }
    if domain is not None:
        item["domain"] = domain
    return item


def write_json(path, obj):
    path = Path(path)
    path.write_text(json.dumps(obj))
    return path

import json
import os
import tempfile
from pathlib import Path

import pytest
import torch

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
DEMO = "rmbench_fast/cli/demo_data/rmbench_demo.json"
DOMAINS = ["chat", "code", "math", "safety-refuse", "safety-response"]


@pytest.fixture(scope="session")
def data_path(request):
    if (SHARED / "chat_filtered.json").is_file():
        return str(SHARED)
    return str(Path(__file__).resolve().parents[1] / DEMO)


@pytest.fixture(scope="session")
def models(tmp_path_factory, data_path):
    """Tokenizers (chat template; Llama class without template; generic without template) and
    models for each: a reward model, a DPO policy and reference."""
    from rmbench_fast.inputs.data import load_dataset
    from rmbench_fast.tiny.models import build_trio, corpus, train_tokenizer

    root = tmp_path_factory.mktemp("models")
    texts = corpus(load_dataset(data_path, limit=3))
    out = {}
    for name, kw in {"tmpl": dict(chat_template=TEST_TEMPLATE),
                     "llama": dict(tokenizer_class="LlamaTokenizerFast"),
                     "plain": dict(pad=True)}.items():
        tok = train_tokenizer(texts, vocab_size=300, **kw)
        trio = build_trio(root / name, tok, seeds=(10, 11, 12), hidden=32, layers=2, heads=4, max_positions=8192)
        out[name] = {"rm": str(trio["rm"]), "policy": str(trio["policy"]), "ref": str(trio["reference"])}
    return out


def encode_run(samples, model_dir, kind, compat=False):
    """A run's sequences as the engine encodes them (kind: rm or dpo), for tests that look at ids."""
    from rmbench_fast.models.loading import load_tokenizer
    from rmbench_fast.scorers import DPOScorer, RewardModelScorer
    from rmbench_fast.inputs.templates import ChatFormat

    tok = load_tokenizer(model_dir, False)
    scorer = RewardModelScorer(tok.pad_token_id, 0) if kind == "rm" else DPOScorer(tok.eos_token_id, "torch", "avg")
    return scorer.encode(samples, tok, ChatFormat(tok), compat, model_dir)


@pytest.fixture(scope="session")
def world(tmp_path_factory):
    """Good and broken models and data, built once."""
    from click.testing import CliRunner

    from rmbench_fast.cli.main import main
    from rmbench_fast.tiny.models import build_model, build_trio, llama_config, save_model, train_tokenizer

    root = tmp_path_factory.mktemp("hard")
    data = root / "data.json"
    data.write_text(json.dumps([make_item(i, d) for d in DOMAINS for i in range(2)]))
    texts = [json.dumps(make_item(i)) for i in range(30)]
    tok = train_tokenizer(texts, vocab_size=300)
    other_tok = train_tokenizer(texts[::-1] + ["other words entirely"], vocab_size=300)
    cfg = dict(vocab_size=len(tok), hidden=32, layers=1, heads=4)
    w = {"root": root, "data": str(data), "tok": tok, "cfg": cfg}
    trio = build_trio(root / "trio", tok, **cfg)
    w.update(rm=str(trio["rm"]), policy=str(trio["policy"]), ref=str(trio["reference"]))
    w["ref_vocab"] = str(save_model(build_model("lm", llama_config(**{**cfg, "vocab_size": len(tok) + 8}), 3), tok,
                                    root / "ref_vocab"))
    w["ref_tok"] = str(save_model(build_model("lm", llama_config(**{**cfg, "vocab_size": len(other_tok)}), 4),
                                  other_tok, root / "ref_tok"))
    no_config = root / "no_config"
    no_config.mkdir()
    (no_config / "model.safetensors").write_bytes(b"")
    w["no_config"] = str(no_config)
    m = build_model("lm", llama_config(**cfg), 5)
    m.save_pretrained(root / "no_tokenizer")
    w["no_tokenizer"] = str(root / "no_tokenizer")
    bare = train_tokenizer(texts, vocab_size=300)
    bare.eos_token = None
    w["no_eos"] = str(save_model(build_model("lm", llama_config(**cfg), 6), bare, root / "no_eos"))
    pickled = save_model(build_model("lm", llama_config(**cfg), 7), tok, root / "pickled")
    state = build_model("lm", llama_config(**cfg), 7).state_dict()
    (pickled / "model.safetensors").unlink()  # the same weights as a pickle file only
    torch.save(state, pickled / "pytorch_model.bin")
    w["pickled"] = str(pickled)
    nan = build_model("rm", llama_config(**cfg), 8)
    with torch.no_grad():
        nan.score.weight[0, 0] = float("nan")
    w["nan"] = str(save_model(nan, tok, root / "nan"))
    other = root / "other_run"
    r = CliRunner().invoke(main, ["score", "--model", w["rm"], "--data", w["data"], "--output", str(other), "-q"])
    assert r.exit_code == 0, r.output
    w["other_run"] = str(other)
    chat_tmpl = root / "missing-template.jinja"
    w["missing_template"] = str(chat_tmpl)
    return w


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


def dpo_checkpoints(root, per_domain: int) -> dict:
    """Under `root`: data.json (`per_domain` items of each domain), two checkpoints of a tiny DPO
    policy (run/checkpoint-1, -2) and a reference, sharing one tokenizer: what the Ray tests score."""
    from rmbench_fast.inputs.data import DOMAINS
    from rmbench_fast.tiny.models import build_model, llama_config, save_model, train_tokenizer

    root = Path(root)
    data = write_json(root / "data.json", [make_item(i, d) for d in DOMAINS for i in range(per_domain)])
    tok = train_tokenizer([json.dumps(make_item(i)) for i in range(30)], vocab_size=300)
    cfg = dict(vocab_size=len(tok), hidden=32, layers=1, heads=4)
    ckpts = [str(save_model(build_model("lm", llama_config(**cfg), s), tok, root / "run" / f"checkpoint-{s}"))
             for s in (1, 2)]
    ref = str(save_model(build_model("lm", llama_config(**cfg), 9), tok, root / "ref"))
    return {"root": root, "data": str(data), "ckpts": ckpts, "ref": ref}


def write_json(path, obj):
    path = Path(path)
    path.write_text(json.dumps(obj))
    return path

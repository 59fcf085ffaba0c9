"""Reward-model adapters against plain references written here.

Each family's tiny model is built from plain parts (a transformers decoder and head tensors with
random weights) and saved under the family's published config and weight names (remote-code
families with their minimal modeling file from rmbench_fast.tiny_adapters, named in auto_map;
tokenizers shaped like each family's come from there too). The engine scores it; the reference
reads the documented score of each sequence alone, from the plain parts, in a loop. The folders
carry no official names, so selection by architecture, auto_map, weight names and files is
exercised too; selection by name, --adapter, and the errors have their own tests.
"""

import json
import pickle
import shutil

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from conftest import TEST_TEMPLATE, make_item
from reference import render
from safetensors.torch import save_file
from transformers import (Gemma2Config, Gemma2Model, LlamaConfig, LlamaModel, MistralConfig,
                          MistralModel, PreTrainedTokenizerFast, Qwen2Config, Qwen2Model)

from rmbench_fast.adapters import ADAPTERS, by_name, select
from rmbench_fast.batching import Batch
from rmbench_fast.cli import main
from rmbench_fast.engine import ScoreOptions, score
from rmbench_fast.errors import UsageError
from rmbench_fast.prepare import prepare
from rmbench_fast.store import Store
from rmbench_fast.tiny_adapters import LLAMA3_HEADER, tokenizer, write_code

H = 16
BACKBONES = {"llama": (LlamaConfig, LlamaModel), "gemma2": (Gemma2Config, Gemma2Model),
             "mistral": (MistralConfig, MistralModel), "qwen2": (Qwen2Config, Qwen2Model)}
QWEN_TEMPLATE = ("<|im_start|>system\nBe brief.<|im_end|>\n{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
                 "{{ m['content'] }}<|im_end|>\n{% endfor %}")
TOKENIZERS = {"tmpl": ("tmpl-reward", TEST_TEMPLATE), "llama": ("llama", None), "qwen": ("qwen", QWEN_TEMPLATE),
              "llama3": ("llama3", None)}  # here: (tiny_adapters.tokenizer kind, chat template)


def items():
    out = [make_item(i, d, prompt=f"Q{i} in {d}: " + "why " * (4 * i + 1)) for d in ("chat", "math") for i in range(2)]
    out[1]["chosen"][1] += " with </s> and <unk> inside the text"  # EOS (a pad id) and Starling's read id mid-text
    return out


# ---- the families: heads under their published names, and the documented score of one sequence.
# Each returns a spec: heads (state dict entries), extra (config.json fields), read(h, ids) -> the
# score from the decoder's last hidden states h of the sequence alone; optional: bos (what happens
# to a doubled BOS: keep, mask or drop), prefix (of the decoder's weights), files (head state dicts
# saved as .pt), plain (encoded without special tokens), append (a token appended), remote.


def linear(o, i, seed, bias=True):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(o, i, generator=g) / i ** 0.5, (torch.randn(o, generator=g) * 0.1 if bias else None)


def lin(x, wb):
    return x @ wb[0].T + (0 if wb[1] is None else wb[1])


def before(pad, ids):
    """Just before the first `pad`, else the last token."""
    return ((ids.index(pad) if pad in ids else 0) - 1) % len(ids)


def grm(tok):  # MLP value head (vhead_num_neurons 8, one layer) at the last token
    a, b = linear(8, H, 1), linear(1, 8, 2)
    return dict(heads={"v_head.summary.0.weight": a[0], "v_head.summary.0.bias": a[1], "v_head.summary.2.weight": b[0],
                       "v_head.summary.2.bias": b[1]},
                extra=dict(architectures=["GRewardModel"], vhead_layer_type="mlp", vhead_num_neurons=8, vhead_num_layers=1),
                read=lambda h, ids: lin(torch.relu(lin(h[-1], a)), b))


def beaver(cost, stored):
    def spec(tok):  # score_head at the last token, normalised with the stored (or config) statistics
        w = linear(1, H, 3, bias=not cost)
        mean, var = torch.tensor([0.3]), torch.tensor([2.5])
        heads = {"score_head.weight": w[0], **({} if cost else {"score_head.bias": w[1]})}
        if stored:
            heads.update({"normalizer.mean": mean, "normalizer.var": var, "normalizer.count": torch.tensor([7])})
        std = var.sqrt() + 1e-8
        return dict(heads=heads, extra=dict(architectures=["LlamaForScore"], score_dim=1, bias=not cost, do_normalize=True,
                                            score_type="cost" if cost else "reward", normalizer_type="RunningMeanStd",
                                            **({} if stored else {"mean": [0.3], "var": [2.5]})),
                    read=(lambda h, ids: -lin(h[-1], w) / std) if cost else (lambda h, ids: (lin(h[-1], w) - mean) / std))
    return spec


def starling(tok):  # v_head just before the first token id 0 (<unk> here, inside one text), as if alone
    w = linear(1, H, 4, bias=False)
    return dict(heads={"v_head.weight": w[0]}, extra=dict(architectures=["LlamaForSequenceClassification"]),
                prefix="transformer.", read=lambda h, ids: lin(h[before(0, ids)], w))


def ultrarm(tok):
    w = linear(1, H, 5, bias=False)
    return dict(heads={"regression_head.weight": w[0]}, extra=dict(architectures=["LlamaRewardModel"]),
                read=lambda h, ids: lin(h[-1], w))


def inform(tok):  # two-layer head just before the first pad id (EOS here, which occurs inside one text)
    a, b = linear(H, H, 6), linear(1, H, 7)
    return dict(heads={"score.0.weight": a[0], "score.0.bias": a[1], "score.2.weight": b[0], "score.2.bias": b[1]},
                extra=dict(architectures=["INFORMForSequenceClassification"]), bos="mask",
                read=lambda h, ids: lin(torch.relu(lin(h[before(tok.eos_token_id, ids)], a)), b))


def qrm(tok):  # 3 objectives x 4 quantiles; BatchNorm gating at the last Llama-3 assistant header
    k, q, hid = 3, 4, 8
    g = torch.Generator().manual_seed(8)
    reg, T, scale = torch.randn(k * q, H, generator=g) / 4, torch.randn(k, k, generator=g), torch.tensor([1.7])
    layers = [torch.randn(hid, H if i == 0 else hid, generator=g) / 3 for i in range(3)]
    bn = [[torch.rand(hid, generator=g) + 0.5, torch.randn(hid, generator=g) * 0.1, torch.randn(hid, generator=g) * 0.1,
           torch.rand(hid, generator=g) + 0.5] for _ in range(3)]  # weight, bias, running mean, running var
    out = linear(k, hid, 9)
    heads = {"regression_layer.weight": reg, "reward_transform_matrix": T, "gating.logit_scale": scale,
             "gating.layers.9.weight": out[0], "gating.layers.9.bias": out[1]}
    for i in range(3):
        heads[f"gating.layers.{3 * i}.weight"] = layers[i]
        names = ("weight", "bias", "running_mean", "running_var")
        heads.update({f"gating.layers.{3 * i + 2}.{n}": t for n, t in zip(names, bn[i])})
        heads[f"gating.layers.{3 * i + 2}.num_batches_tracked"] = torch.tensor(5)

    def read(h, ids):
        x = h[max(j for j in range(len(ids) - 4) if ids[j:j + 5] == LLAMA3_HEADER)]
        for lw, (w, b, m, v) in zip(layers, bn):
            x = (torch.relu(x @ lw.T) - m) / torch.sqrt(v + 1e-5) * w + b
        rewards = (h[before(tok.pad_token_id, ids)] @ reg.T).view(k, q).mean(1) @ T
        return (torch.softmax(lin(x, out) / 10, 0) * scale * rewards).sum()
    return dict(heads=heads, extra=dict(architectures=["LlamaForRewardModelWithGating"], num_objectives=k, num_quantiles=q,
                                        gating_hidden_dim=hid, gating_n_hidden=3, gating_temperature=10),
                bos="mask", read=read)


def ldl(tok):  # bare Gemma-2 weights; heads in .pt files; 3 distributions over 10 bins
    r = [linear(12, H, 10), linear(12, 12, 11), linear(30, 12, 12)]
    g = [linear(12, H, 13), linear(12, 12, 14), linear(3, 12, 15)]
    pt = lambda idx, ws: {f"network.{i}.{n}": t for i, wb in zip(idx, ws) for n, t in zip(("weight", "bias"), wb)}  # noqa
    leaky = torch.nn.functional.leaky_relu
    mlp = lambda x, ws: lin(leaky(lin(leaky(lin(x, ws[0])), ws[1])), ws[2])  # noqa

    def read(h, ids):
        x = h[before(tok.eos_token_id, ids)]
        return mlp(x, g) @ torch.softmax(mlp(x, r).view(3, 10), -1) @ torch.linspace(0, 1, 10)
    return dict(heads={}, prefix="", extra=dict(architectures=["Gemma2Model"]), bos="drop", read=read,
                files={"regression_layer.pt": pt((0, 2, 4), r), "gating_layer.pt": pt((0, 3, 6), g)})


# ---- remote-code families: tiny_adapters' minimal modeling file of the published architecture


def remote(family, heads_fn, config=(), **kw):
    def spec(tok):
        heads, read = heads_fn(tok)
        extra = dict(config)
        if kw.get("append"):
            extra["reward_token_id"] = tok.convert_tokens_to_ids(kw["append"])
        return dict(heads=heads, extra=extra, read=read, remote=family, **kw)
    return spec


def one_head(name, seed):
    def make(tok):
        w = linear(1, H, seed, bias=False)
        return {name: w[0]}, lambda h, ids: lin(h[-1], w)
    return make


def worldpm_heads(tok):
    a, b = linear(H, H, 20), linear(1, H, 21)
    return ({"score.0.weight": a[0], "score.0.bias": a[1], "score.2.weight": b[0], "score.2.bias": b[1]},
            lambda h, ids: lin(torch.relu(lin(h[before(tok.pad_token_id, ids)], a)), b))


def armorm_heads(tok):
    k, hid = 3, 8
    reg, T, gl = linear(k, H, 22, bias=False), linear(k, k, 30)[0], [linear(hid, H, 23), linear(hid, hid, 24),
                                                                    linear(hid, hid, 25), linear(k, hid, 26)]
    heads = {"regression_layer.weight": reg[0], "reward_transform_matrix": T, "gating.logit_scale": torch.tensor([1.3]),
             **{f"gating.layers.{i}.{n}": t for i, wb in enumerate(gl) for n, t in zip(("weight", "bias"), wb)}}

    def read(h, ids):
        x = h[max(j for j in range(len(ids) - 4) if ids[j:j + 5] == LLAMA3_HEADER)]
        for i, wb in enumerate(gl):
            x = lin(x, wb) if i == 3 else torch.relu(lin(x, wb))
        return (torch.softmax(x / 10, 0) * 1.3 * (lin(h[before(tok.pad_token_id, ids)], reg) @ T)).sum()
    return heads, read


FAMILIES = {  # name: (spec, decoder, tokenizer, the adapter selection must pick)
    "grm-llama": (grm, "llama", "tmpl", "grm"),
    "grm-gemma2": (grm, "gemma2", "tmpl", "grm"),
    "beaver": (beaver(cost=False, stored=True), "llama", "llama", "beaver"),
    "beaver-cost": (beaver(cost=True, stored=False), "llama", "llama", "beaver-cost"),
    "starling": (starling, "llama", "llama", "starling"),
    "ultrarm": (ultrarm, "llama", "llama", "ultrarm"),
    "inf-orm": (inform, "llama", "tmpl", "inf-orm"),
    "qrm": (qrm, "llama", "llama3", "qrm"),
    "ldl": (ldl, "gemma2", "tmpl", "ldl"),
    "eurus": (remote("eurus", one_head("regression_head.weight", 27)), "mistral", "tmpl", "eurus"),
    "ziya": (remote("ziya", one_head("value_head.weight", 28)), "llama", "llama", "ziya"),
    "internlm2": (remote("internlm2", one_head("v_head.weight", 29), plain=True, append="<|reward|>"), "llama", "tmpl",
                  "internlm2"),
    "worldpm": (remote("worldpm", worldpm_heads, plain=True), "qwen2", "qwen", "worldpm"),
    "armorm": (remote("armorm", armorm_heads, config=dict(num_objectives=3, gating_hidden_dim=8), plain=True), "llama",
               "llama3", "armorm"),
}


# ---- building a family's folder, and its plain reference


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("adapters")
    data = root / "data.json"
    data.write_text(json.dumps(items()))
    texts = [json.dumps(x) for x in items()] * 3
    toks = {k: tokenizer(kind, texts, vocab_size=300, chat_template=tmpl) for k, (kind, tmpl) in TOKENIZERS.items()}
    return {"root": root, "data": str(data), "toks": toks, "built": {}}


def build(world, name):
    """The family's folder (built once) and what its reference needs."""
    if name in world["built"]:
        return world["built"][name]
    from rmbench_fast.tiny import save_tokenizer

    spec_fn, kind, tok_kind, adapter = FAMILIES[name]
    tok = world["toks"][tok_kind]
    cfg_cls, model_cls = BACKBONES[kind]
    cfg = cfg_cls(vocab_size=len(tok) + 8, hidden_size=H, intermediate_size=32, num_hidden_layers=1,
                  num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=1024, tie_word_embeddings=False,
                  bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                  **({"head_dim": 8} if kind == "gemma2" else {}))
    torch.manual_seed(len(name))
    decoder = model_cls(cfg).eval()
    with torch.no_grad():  # weights that tell responses apart
        for p in decoder.parameters():
            p.copy_(torch.randn_like(p) * (p.shape[-1] ** -0.5 if p.dim() > 1 else 0.1) + (1 if p.dim() == 1 else 0))
    spec = spec_fn(tok)
    d = world["root"] / name
    d.mkdir()
    state = {spec.get("prefix", "model.") + k: v for k, v in decoder.state_dict().items()} | spec["heads"]
    save_file({k: v.contiguous() for k, v in state.items()}, d / "model.safetensors", metadata={"format": "pt"})
    named = write_code(d, spec["remote"]) if "remote" in spec else {}  # the modeling file, named in config.json
    (d / "config.json").write_text(json.dumps(cfg.to_dict() | spec["extra"] | named))
    for f, heads in spec.get("files", {}).items():
        torch.save(heads, d / f)
    save_tokenizer(tok, d)
    world["built"][name] = (str(d), decoder, spec, tok_kind, adapter)
    return world["built"][name]


def reference(d, decoder, spec, tok_kind, samples):
    """The documented score of every sequence alone: the official ids (the chat template, or tulu;
    special tokens unless the pipeline encodes without; EOS when the official flow sets
    add_eos_token on a Llama tokenizer), the doubled BOS kept, masked or dropped, the decoder, the
    family's read-out."""
    tok = PreTrainedTokenizerFast.from_pretrained(d)  # tokenizer.json as saved (AutoTokenizer 5.x may rebuild it)
    plain, append = spec.get("plain", False), spec.get("append")
    out = {"chosen": np.zeros((len(samples), 3)), "rejected": np.zeros((len(samples), 3))}
    for i, s in enumerate(samples):
        for k in range(3):
            for side in ("chosen", "rejected"):
                ids = tok(render(tok, s.prompt, getattr(s, side)[k]), add_special_tokens=not plain)["input_ids"]
                ids += [tok.eos_token_id] if tok_kind == "llama" and not plain else []
                if append and ids[-1] != tok.convert_tokens_to_ids(append):
                    ids += [tok.convert_tokens_to_ids(append)]
                mask = [1] * len(ids)
                if tok.bos_token_id is not None and ids[:2] == [tok.bos_token_id] * 2:
                    if spec.get("bos") == "mask":
                        mask[0] = 0
                    elif spec.get("bos") == "drop":
                        ids, mask = ids[1:], mask[1:]
                with torch.no_grad():
                    h = decoder(input_ids=torch.tensor([ids]), attention_mask=torch.tensor([mask])).last_hidden_state[0]
                    out[side][i, k] = float(spec["read"](h, ids))
    return out["chosen"], out["rejected"]


def options(d, world, **kw):
    return ScoreOptions(model=d, data=world["data"], progress=False, cache=False, **kw)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_family_matches_its_plain_reference(world, name):
    d, decoder, spec, tok_kind, adapter = build(world, name)
    run = score(options(d, world, trust_remote_code="remote" in spec))
    assert run.run["adapter"] == adapter and run.run["scorer"] == adapter  # chosen by architecture / auto_map / weights
    chosen, rejected = reference(d, decoder, spec, tok_kind, run.samples)
    assert np.ptp(chosen) > 1e-2  # scores that tell responses apart
    np.testing.assert_allclose(run.chosen, chosen, atol=2e-5, rtol=0)
    np.testing.assert_allclose(run.rejected, rejected, atol=2e-5, rtol=0)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_padding_never_changes_a_score(world, name):
    """Every sequence in one padded batch scores as it does alone."""
    d, _, spec, _, _ = build(world, name)
    prep = prepare(options(d, world, trust_remote_code="remote" in spec), Store(None))
    prep.scorer = pickle.loads(pickle.dumps(prep.scorer))  # as Ray workers get it
    model = prep.scorer.load(d, torch.float32, torch.device("cpu"), "remote" in spec)
    run = prep.scorer.batch_fn(model, torch.device("cpu"))
    lengths = np.array([len(e.ids) for e in prep.seqs])
    assert lengths.max() > 1.5 * lengths.min()  # the batch really pads
    together = run(prep.seqs, Batch(np.arange(len(lengths)), int(lengths.max())))["scores"]
    alone = [run(prep.seqs, Batch(np.array([i]), int(n)))["scores"][0] for i, n in enumerate(lengths)]
    np.testing.assert_allclose(together, alone, atol=1e-5, rtol=0)


# ---- selection, overrides and errors


def test_selection_by_official_name_first():
    """An official REWARD_MODEL_CONFIG name (a `RewardModels/` prefix stripped, as run_rm.py does)
    picks its adapter whatever the config says; other names fall through to the config."""
    plain = LlamaConfig(architectures=["LlamaForSequenceClassification"])
    for a in ADAPTERS:
        for name in a.official_names:
            assert select(f"RewardModels/{name}", plain) is a and select(name, plain) is a
    assert select("RewardModels/someone/else", plain) is None
    assert select("x", LlamaConfig(architectures=["GRewardModel"])).name == "grm"
    assert select("x", LlamaConfig(architectures=["LlamaForRewardModelWithGating"], num_quantiles=19)).name == "qrm"
    assert select("x", LlamaConfig(architectures=["LlamaForRewardModelWithGating"])).name == "armorm"
    assert select("x", LlamaConfig(architectures=["LlamaForScore"], score_type="cost")).name == "beaver-cost"
    assert select("x", plain, "ultrarm").name == "ultrarm"


def test_official_name_selects_in_a_run(world, tmp_path, monkeypatch):
    d, *_ = build(world, "grm-llama")
    dest = tmp_path / "RewardModels" / "Ray2333" / "GRM-Gemma-2B-sftreg"
    shutil.copytree(d, dest)
    cfg = json.loads((dest / "config.json").read_text())
    cfg["architectures"] = ["LlamaForCausalLM"]  # the name alone decides
    (dest / "config.json").write_text(json.dumps(cfg))
    monkeypatch.chdir(tmp_path)
    run = score(options("RewardModels/Ray2333/GRM-Gemma-2B-sftreg", world))
    direct = score(options(d, world))
    assert run.run["adapter"] == "grm"
    np.testing.assert_array_equal(run.chosen, direct.chosen)


def test_adapter_override(world):
    """--adapter beaver-cost on a beaver reward model: its scores (normalised as its config says), negated."""
    d, *_ = build(world, "beaver")
    cfg = json.loads(open(f"{d}/config.json").read())
    assert cfg["score_type"] == "reward"
    own = score(options(d, world))
    cost = score(options(d, world, adapter="beaver-cost"))
    assert cost.run["adapter"] == "beaver-cost" and "negated" in cost.run["scores"]
    np.testing.assert_allclose(cost.chosen, -own.chosen, atol=1e-6)
    with pytest.raises(UsageError, match="no such adapter"):
        by_name("nope")


@pytest.mark.parametrize("name, words", [("llm-blender/PairRM-hf", "compares two responses"),
                                         ("Skywork/Skywork-VL-Reward-7B", "vision-language")])
def test_out_of_scope_entries_are_one_line_errors(world, tmp_path, monkeypatch, name, words):
    d, *_ = build(world, "ultrarm")
    dest = tmp_path / "RewardModels" / name
    shutil.copytree(d, dest)
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(main, ["score", "--model", f"RewardModels/{name}", "--data", world["data"], "--no-cache",
                                  "-q", "--output", str(tmp_path / "out")])
    assert r.exit_code == 2 and words in r.output and "out of scope" in r.output
    assert len(r.output.strip().splitlines()) == 1


def test_remote_code_needs_the_flag(world):
    d, *_ = build(world, "eurus")
    with pytest.raises(UsageError, match="--trust-remote-code"):
        score(options(d, world))


def test_qrm_needs_llama3_header_ids(world):
    """QRM's gating reads at Llama-3's assistant header ids: another tokenizer is a clear error."""
    d, *_ = build(world, "qrm")
    other, *_ = build(world, "inf-orm")  # a tokenizer without those ids
    with pytest.raises(UsageError, match="lack Llama-3"):
        score(options(d, world, tokenizer=other))


def test_batch_dependent_official_pipelines_are_recorded(world):
    """Starling's pipeline pads with EOS here but reads before the first id 0: run.json says the
    official score depends on the batch and how this run scored."""
    d, *_ = build(world, "starling")
    run = score(options(d, world))
    assert any("depends on the batch" in w for w in run.run["adapter_warnings"])
    assert any("alone" in n for n in run.run["adapter_notes"])


def test_adapters_command_lists_every_family():
    r = CliRunner().invoke(main, ["adapters", "--json"])
    names = {a["name"] for a in json.loads(r.output)}
    assert {"grm", "beaver", "beaver-cost", "starling", "starling-7b", "ultrarm", "eurus", "ziya", "internlm2", "qrm",
            "armorm", "inf-orm", "ldl", "worldpm", "pairwise", "vision-language"} <= names

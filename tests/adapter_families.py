"""The reward-model families the adapter tests score (tests/test_adapters.py and
tests/test_adapter_selection.py): each family's heads under its published names, its config.json
fields, and the documented score of one sequence, from plain parts with random weights. Remote-code
families use rmbench_fast.tiny.adapters' minimal modeling file of the published architecture."""

import torch

from rmbench_fast.tiny.adapters import LLAMA3_HEADER

H = 16


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


def ldl(n_dist=3, softmax=None, temperature=None):
    """Bare Gemma-2 weights; heads in .pt files; n_dist distributions over 10 bins (num_objectives =
    10 n_dist); config.json's softmax / temperature switches (None: not in the config), read just
    before the first pad id (the tokenizer's pad, else EOS, as run_rm.py sets it)."""
    def spec(tok):
        r = [linear(12, H, 10), linear(12, 12, 11), linear(10 * n_dist, 12, 12)]
        g = [linear(12, H, 13), linear(12, 12, 14), linear(n_dist, 12, 15)]
        pt = lambda idx, ws: {f"network.{i}.{n}": t for i, wb in zip(idx, ws) for n, t in zip(("weight", "bias"), wb)}  # noqa
        leaky = torch.nn.functional.leaky_relu
        mlp = lambda x, ws: lin(leaky(lin(leaky(lin(x, ws[0])), ws[1])), ws[2])  # noqa
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id

        def read(h, ids):
            x = h[before(pad, ids)]
            w = mlp(x, g)
            if softmax:
                w = torch.softmax(w / (temperature or 1.0), -1)
            return w @ torch.softmax(mlp(x, r).view(n_dist, 10), -1) @ torch.linspace(0, 1, 10)
        extra = dict(architectures=["Gemma2Model"], num_objectives=10 * n_dist)
        extra.update({k: v for k, v in (("softmax", softmax), ("temperature", temperature)) if v is not None})
        return dict(heads={}, prefix="", extra=extra, bos="drop", read=read,
                    files={"regression_layer.pt": pt((0, 2, 4), r), "gating_layer.pt": pt((0, 3, 6), g)})
    return spec


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


# Decoder settings a family's instance changes from the defaults (saved in config.json like the rest).
# A strong attention-logit softcap: SDPA, transformers 4.51's default for a bare Gemma2Model, skips it;
# the official LDL class runs FlashAttention-2, which applies it, as eager attention does.
DECODER_CONFIG = {"ldl-softmax": dict(attn_logit_softcapping=0.5, query_pre_attn_scalar=8)}

FAMILIES = {  # name: (spec, decoder, tokenizer, the adapter selection must pick)
    "grm-llama": (grm, "llama", "tmpl", "grm"),
    "grm-gemma2": (grm, "gemma2", "tmpl", "grm"),
    "beaver": (beaver(cost=False, stored=True), "llama", "llama", "beaver"),
    "beaver-cost": (beaver(cost=True, stored=False), "llama", "llama", "beaver-cost"),
    "starling": (starling, "llama", "llama", "starling"),
    "ultrarm": (ultrarm, "llama", "llama", "ultrarm"),
    "inf-orm": (inform, "llama", "tmpl", "inf-orm"),
    "qrm": (qrm, "llama", "llama3", "qrm"),
    "ldl": (ldl(), "gemma2", "tmpl", "ldl"),
    # softmax gating at temperature 1.5 (a key transformers 5 drops from model configs), 2 distributions,
    # and a tokenizer with its own pad token (the config's pad id equal to it)
    "ldl-softmax": (ldl(n_dist=2, softmax=True, temperature=1.5), "gemma2", "gemma", "ldl"),
    "ldl-softmax-eos": (ldl(n_dist=4, softmax=True, temperature=0.7), "gemma2", "tmpl", "ldl"),
    "eurus": (remote("eurus", one_head("regression_head.weight", 27)), "mistral", "tmpl", "eurus"),
    "ziya": (remote("ziya", one_head("value_head.weight", 28)), "llama", "llama", "ziya"),
    "internlm2": (remote("internlm2", one_head("v_head.weight", 29), plain=True, append="<|reward|>"), "llama", "tmpl",
                  "internlm2"),
    "worldpm": (remote("worldpm", worldpm_heads, plain=True), "qwen2", "qwen", "worldpm"),
    "armorm": (remote("armorm", armorm_heads, config=dict(num_objectives=3, gating_hidden_dim=8), plain=True), "llama",
               "llama3", "armorm"),
}

"""Can a Llama forward written without transformers give transformers' bits? (issue 34: a run's
fixed cost is mostly transformers' import; a path without it would need its own model.)

    python benchmarks/native_forward.py --out benchmarks/results/native-forward-cpu.json
    benchmarks/peer/.venv/bin/python benchmarks/native_forward.py --out F   (transformers 4.51)

A plain restatement of transformers' Llama (embedding, RMSNorm in fp32, rotary tables, SDPA
attention, gated MLP, final norm, the score or LM head) reads the weights from model.safetensors
and runs a batch of random ids (right-padded batches are causal: no mask); the script compares
its hidden states, head logits and a sequence classifier's pooled scores with transformers' own,
bit for bit (torch.equal), in fp32 and bf16, with and without grouped-query attention. Also the
time to build each: safetensors into tensors against from_pretrained (in this process, after
transformers is imported; the imports themselves are in benchmarks/fixed_cost.py).
It is a measurement, not the engine's code: what a native path would have to restate, and whether
it can match. CPU only.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class NativeLlama:
    """Llama's forward from config.json and model.safetensors, in transformers' op order."""

    def __init__(self, folder: Path, dtype: torch.dtype):
        cfg = json.loads((folder / "config.json").read_text())
        self.w = {k: v.to(dtype) for k, v in load_file(str(folder / "model.safetensors")).items()}
        self.layers, self.heads = cfg["num_hidden_layers"], cfg["num_attention_heads"]
        self.kv_heads = cfg.get("num_key_value_heads") or self.heads
        self.dim = cfg.get("head_dim") or cfg["hidden_size"] // self.heads
        self.eps = cfg["rms_norm_eps"]
        rope = cfg.get("rope_parameters") or {}
        theta = rope.get("rope_theta", cfg.get("rope_theta", 10000.0))
        self.inv_freq = 1.0 / (theta ** (torch.arange(0, self.dim, 2, dtype=torch.float) / self.dim))

    def norm(self, x, weight):
        dtype = x.dtype
        x = x.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return weight * x.to(dtype)

    def linear(self, x, name):
        return F.linear(x, self.w[name + ".weight"], self.w.get(name + ".bias"))

    @torch.inference_mode()
    def hidden(self, ids: torch.Tensor) -> torch.Tensor:
        b, t = ids.shape
        h = F.embedding(ids, self.w["model.embed_tokens.weight"])
        freqs = torch.arange(t)[None, :, None].float() * self.inv_freq.float()
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().to(h.dtype).unsqueeze(1), emb.sin().to(h.dtype).unsqueeze(1)
        for i in range(self.layers):
            p = f"model.layers.{i}."
            x = self.norm(h, self.w[p + "input_layernorm.weight"])
            q, k, v = (self.linear(x, p + f"self_attn.{n}_proj").view(b, t, -1, self.dim).transpose(1, 2)
                       for n in "qkv")
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            a = F.scaled_dot_product_attention(q, k, v, scale=self.dim ** -0.5, is_causal=t > 1,
                                               enable_gqa=self.kv_heads != self.heads)
            h = h + self.linear(a.transpose(1, 2).reshape(b, t, -1), p + "self_attn.o_proj")
            x = self.norm(h, self.w[p + "post_attention_layernorm.weight"])
            gate, up = self.linear(x, p + "mlp.gate_proj"), self.linear(x, p + "mlp.up_proj")
            h = h + self.linear(F.silu(gate) * up, p + "mlp.down_proj")
        return self.norm(h, self.w["model.norm.weight"])


def build(dest: Path, kind: str, kv_heads: int) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM, LlamaForSequenceClassification

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=32000, hidden_size=512, num_hidden_layers=4, num_attention_heads=8,
                      num_key_value_heads=kv_heads, intermediate_size=1408, max_position_embeddings=4096,
                      rms_norm_eps=1e-6, num_labels=1, pad_token_id=0)
    model = (LlamaForSequenceClassification if kind == "rm" else LlamaForCausalLM)(cfg)
    for p in model.parameters():  # an initializer's norms are ones: random ones show more of the math
        torch.nn.init.normal_(p, std=0.05) if p.dim() == 1 else None
    model.save_pretrained(dest)
    return dest


def compare(folder: Path, kind: str, dtype: torch.dtype) -> dict:
    import transformers
    from transformers import LlamaForCausalLM, LlamaForSequenceClassification

    cls = LlamaForSequenceClassification if kind == "rm" else LlamaForCausalLM
    kw = {"dtype" if transformers.__version__ >= "5" else "torch_dtype": dtype}
    t0 = time.perf_counter()
    ref = cls.from_pretrained(str(folder), **kw).eval()
    t1 = time.perf_counter()
    nat = NativeLlama(folder, dtype)
    t2 = time.perf_counter()
    torch.manual_seed(1)
    shapes = {}
    for b, t in ((1, 7), (3, 300), (2, 1024), (5, 513)):
        ids = torch.randint(3, 32000, (b, t))
        with torch.inference_mode():
            out = ref(input_ids=ids, use_cache=False, output_hidden_states=True)
        mine = nat.hidden(ids)
        want = out.hidden_states[-1]
        if kind == "rm":  # pooled at the last token (no pad id in the batch)
            head = F.linear(mine, nat.w["score.weight"])[:, -1]
            got_head, want_head = head, out.logits
        else:
            got_head, want_head = F.linear(mine, nat.w["lm_head.weight"]), out.logits
        shapes[f"{b}x{t}"] = {"hidden_equal": torch.equal(mine, want), "head_equal": torch.equal(got_head, want_head),
                              "hidden_max_abs_diff": float((mine.float() - want.float()).abs().max())}
    return {"shapes": shapes, "from_pretrained_s": t1 - t0, "native_load_s": t2 - t1}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    import transformers

    torch.set_num_threads(torch.get_num_threads())
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for kind in ("rm", "lm"):
            for kv in (8, 2):
                folder = build(Path(tmp) / f"{kind}-{kv}", kind, kv)
                for dtype in (torch.float32, torch.bfloat16):
                    name = f"{kind}, kv heads {kv}/8, {str(dtype).split('.')[-1]}"
                    rows[name] = compare(folder, kind, dtype)
                    print(name, {s: (r["hidden_equal"], r["head_equal"]) for s, r in rows[name]["shapes"].items()},
                          f"load: from_pretrained {rows[name]['from_pretrained_s']:.3f} s, "
                          f"native {rows[name]['native_load_s']:.3f} s")
    result = {"command": "python benchmarks/native_forward.py --out F", "transformers": transformers.__version__,
              "torch": torch.__version__, "threads": torch.get_num_threads(),
              "shape": {"hidden": 512, "layers": 4, "heads": 8, "intermediate": 1408, "vocab": 32000},
              "all_equal": all(r["hidden_equal"] and r["head_equal"] for row in rows.values()
                               for r in row["shapes"].values()),
              "rows": rows}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(result, indent=1) + "\n")
    print("all equal:", result["all_equal"])


if __name__ == "__main__":
    main()

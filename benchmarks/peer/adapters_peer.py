"""The peer side of adapters_equivalence.py, run in the peer venv (rewardbench 0.1.4,
transformers 4.51) through its `build` and `official` commands:

- build: a family's tiny random model with rewardbench's own classes (remote-code families: the
  minimal modeling file of rmbench_fast.tiny.adapters), saved next to the tokenizer the main side
  wrote, with weights that keep activations of order one;
- official: official_flow.py's main, with the patches adapters_equivalence.py's docstring states
  for families the official flow cannot run on CPU as is.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def tiny_adapters():
    """rmbench_fast.tiny.adapters, read from this checkout: the peer venv need not have rmbench-fast
    installed, and the module imports only the standard library until a function runs."""
    import importlib.util

    if "tiny_adapters" not in sys.modules:
        path = HERE.parents[1] / "rmbench_fast" / "tiny" / "adapters.py"
        spec = importlib.util.spec_from_file_location("tiny_adapters", path)
        sys.modules["tiny_adapters"] = module = importlib.util.module_from_spec(spec)  # dataclasses look it up
        spec.loader.exec_module(module)
    return sys.modules["tiny_adapters"]


def randomize(model, seed):
    import torch

    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            std = p.shape[-1] ** -0.5 if p.dim() > 1 else 0.1  # activations of order one, whatever the width
            p.copy_(torch.randn_like(p) * std + (1.0 if name.endswith(("norm.weight", "logit_scale")) else 0))
        for name, b in model.named_buffers():
            if name.endswith(("running_mean", "normalizer.mean")):
                b.copy_(torch.randn_like(b) * 0.2)
            elif name.endswith(("running_var", "normalizer.var")):
                b.copy_(torch.rand_like(b) + 0.5)
    return model.eval()


def build(builder, dest):
    import torch
    import transformers
    from safetensors.torch import save_file
    from transformers import AutoTokenizer, Gemma2Config, GemmaConfig, LlamaConfig, LlamaForCausalLM

    dest = Path(dest)
    tok = AutoTokenizer.from_pretrained(dest)
    common = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                  vocab_size=len(tok) + 7, max_position_embeddings=4096, pad_token_id=tok.pad_token_id,
                  bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, tie_word_embeddings=False)
    kind, _, variant = builder.partition(":")
    if kind == "grm":
        from rewardbench.models.grm import GRewardModel

        cfg = {"gemma": lambda: GemmaConfig(**common, head_dim=8), "gemma2": lambda: Gemma2Config(**common, head_dim=8)
               }.get(variant, lambda: LlamaConfig(**common))()
        cfg.vhead_layer_type, cfg.vhead_num_neurons, cfg.vhead_num_layers = (
            "linear" if variant == "llama-linear" else "mlp"), 8, 1
        model = GRewardModel(cfg)
    elif kind == "beaver":
        from rewardbench.models.beaver import LlamaForScore

        model = LlamaForScore(LlamaConfig(**common, score_dim=1, bias=variant == "reward", score_type=variant,
                                          do_normalize=True, normalizer_type="ExponentialMovingAverage", momentum=0.9))
    elif kind == "starling34":
        from rewardbench.models.starling import LlamaForSequenceClassification

        model = LlamaForSequenceClassification(LlamaConfig(**common))
    elif kind == "starling7":
        base = dest.parent / "_llama2_base"
        randomize(LlamaForCausalLM(LlamaConfig(**common)), 7).save_pretrained(base)
        st = patch_starling7(base, dest)
        model = randomize(st.GPTRewardModel("meta-llama/Llama-2-7b-chat-hf"), 8)
        state = model.state_dict()
        torch.save(state, dest / "pytorch_model.bin")  # what the official builder loads
        save_file({k: v.clone().contiguous() for k, v in state.items()}, dest / "model.safetensors",
                  metadata={"format": "pt"})
        model.config.save_pretrained(dest)
        (dest / "BUILT").write_text("ok\n")
        return
    elif kind == "ultrarm":
        from rewardbench.models.openbmb import LlamaRewardModel

        model = LlamaRewardModel(LlamaConfig(**common))
    elif kind == "qrm":
        from rewardbench.models import qrm

        cls = qrm.LlamaForRewardModelWithGating31 if variant == "31" else qrm.LlamaForRewardModelWithGating3
        model = cls(LlamaConfig(**common, num_objectives=19, num_quantiles=19, gating_hidden_dim=8))
    elif kind == "inform":
        from rewardbench.models.inform import INFORMForSequenceClassification

        model = INFORMForSequenceClassification(LlamaConfig(**common))
    elif kind == "ldl":
        from rewardbench.models.ldlreward import LDLRewardModel27B

        # the published head (220 objectives, no gating softmax) and two others: the gating softmax at a
        # temperature (a key transformers 5 drops from model configs), other numbers of distributions
        extra = {"softmax": dict(num_objectives=20, softmax=True, temperature=1.5),
                 "softmax-eos": dict(num_objectives=40, softmax=True, temperature=0.7)}.get(variant, {})
        model = LDLRewardModel27B(Gemma2Config(**common, head_dim=8, **extra))
    else:  # remote code: tiny_adapters' modeling file next to config.json, named in auto_map
        ta = tiny_adapters()
        named = ta.write_code(dest, variant)
        extra = {"internlm2": dict(reward_token_id=tok.convert_tokens_to_ids("<|reward|>")),
                 "armorm": dict(num_objectives=5, gating_hidden_dim=8)}.get(variant, {})
        cfg = getattr(transformers, f"{ta.REMOTE[variant].decoder}Config")(**common, **extra)
        model = randomize(ta.load_class(dest, variant)(cfg), 5)
        model.save_pretrained(dest)
        saved = json.loads((dest / "config.json").read_text())
        saved.update(named)
        (dest / "config.json").write_text(json.dumps(saved, indent=1))
        (dest / "BUILT").write_text("ok\n")
        return
    randomize(model, 5).save_pretrained(dest)
    (dest / "BUILT").write_text("ok\n")


def patch_starling7(base, dest):
    """Starling-7B's official builder, offline: its hub calls get the local tiny model."""
    import rewardbench.models.starling as st
    from transformers import AutoTokenizer, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(dest)
    lm = LlamaForCausalLM.from_pretrained  # st.AutoModelForCausalLM / st.AutoTokenizer are transformers' own classes
    st.AutoModelForCausalLM = type("Hub", (), {"from_pretrained": staticmethod(
        lambda path, **kw: lm(base, **{k: v for k, v in kw.items() if k != "device_map"}))})
    st.AutoTokenizer = type("Hub", (), {"from_pretrained": staticmethod(lambda path, **kw: tokenizer)})
    st.snapshot_download = lambda name, **kw: str(dest)
    return st


def official(builder, argv):
    """official_flow.py's main, with the stated patches for families it cannot run on CPU."""
    import torch
    import transformers

    sys.argv = ["official_flow.py", *argv]
    sys.path.insert(0, str(HERE))
    import official_flow

    args = {k: argv[i + 1] for i, k in enumerate(argv[:-1]) if k.startswith("--") and not argv[i + 1].startswith("--")}
    if builder.startswith(("qrm", "ldl")):  # flash_attention_2 forced: same weights, sdpa / eager, float32
        original = transformers.PreTrainedModel.from_pretrained.__func__
        attn = "eager" if builder.startswith("ldl") else "sdpa"

        def from_pretrained(cls, path, *a, **kw):
            if kw.get("attn_implementation") == "flash_attention_2":
                kw.update(attn_implementation=attn, torch_dtype=torch.float32)
            model = original(cls, path, *a, **kw)
            for p in model.parameters():
                p.data = p.data.float()
            return model

        transformers.PreTrainedModel.from_pretrained = classmethod(from_pretrained)
    from rewardbench import REWARD_MODEL_CONFIG

    entry = REWARD_MODEL_CONFIG.get(args["--model"].replace("RewardModels/", ""), {})
    if builder in ("inform", "remote:worldpm"):  # the entry pins bfloat16: compared at float32
        entry["torch_dtype"] = torch.float32
    if builder.startswith("ldl"):  # its builder takes device_map "auto" (CUDA) or none, not "cpu"
        ldl = entry["model_builder"]
        entry["model_builder"] = lambda path, device_map=None, **kw: ldl(path, **kw)
    if builder == "remote:ziya" and args["--dtype"] == "float32":  # ZiyaPipeline's .half() made a no-op
        torch.nn.Module.half = lambda self: self
    if builder == "starling7":
        path = Path(args["--model"]).resolve()
        patch_starling7(path.parent / "_llama2_base", path)
    if builder == "remote:armorm":
        return armorm_card(args)
    official_flow.main()


def armorm_card(args):
    """ArmoRM as its model card documents: one conversation at a time, output.score."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    sys.path.insert(0, str(HERE))
    from official_flow import load_items

    tok = AutoTokenizer.from_pretrained(args["--model"])
    model = AutoModelForSequenceClassification.from_pretrained(args["--model"], trust_remote_code=True,
                                                               torch_dtype=torch.float32).eval()
    results = []
    for domain, items in load_items(args["--data"], int(args["--limit"])):
        for x in items:
            out = {"score_chosen": [], "score_rejected": []}
            for k in range(3):
                for side in ("chosen", "rejected"):
                    msgs = [{"role": "user", "content": x["prompt"]}, {"role": "assistant", "content": x[side][k]}]
                    with torch.no_grad():
                        ids = tok.apply_chat_template(msgs, return_tensors="pt")
                        out["score_" + side].append(model(ids).score.float().item())
            results.append({**x, "domain": domain, **out})
    Path(args["--output"]).write_text(json.dumps(results))

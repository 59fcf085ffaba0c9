"""Reward-model adapters against the official flow, measured on CPU in float32.

For every family of rewardbench 0.1.4's REWARD_MODEL_CONFIG that rmbench-fast scores, a tiny
random instance is built with the peer environment's own classes (rewardbench's; for remote-code
families, a minimal modeling file of the published architecture written here) under
WORK/RewardModels/<official name>, so that both sides select that entry by name as run_rm.py does.
Then, from WORK:
- official: benchmarks/peer/official_flow.py --mode rm --model RewardModels/<name> (peer venv);
- ours: rmbench-fast score --model RewardModels/<name> --compat official --dtype float32.
Both score the same RM-Bench items (--limit per domain). The per-sample |diff| and whether the
accuracies are identical go to benchmarks/results/adapters-equivalence-cpu.json; a markdown table
is printed.

Where the official flow cannot run as is, the peer side is patched, as stated: QRM and LDL force
flash_attention_2 (CUDA only), so their from_pretrained loads the same weights with sdpa / eager
attention in float32; Starling-7B's builder downloads Llama-2-7b-chat, so its hub calls return the
local tiny model (its folder is the bare official name, the only one that builder accepts); ArmoRM
has no official number (run_rm.py raises NotImplementedError), so it is compared with its model
card's usage (apply_chat_template, model(input_ids).score), one sequence at a time. Starling-7B's
official score depends on the batch: compared on rows without padding in their official batch.

    python benchmarks/peer/adapters_equivalence.py --limit 2      (main venv; calls the peer venv)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
PEER = HERE / ".venv" / "bin" / "python"

# family -> (official name, tokenizer kind, builder, which rows are compared)
FAMILIES = {
    "grm-llama3": ("Ray2333/GRM-llama3-8B-sftreg", "tmpl", "grm:llama", "all"),
    "grm-gemma": ("Ray2333/GRM-Gemma-2B-sftreg", "tmpl-left", "grm:gemma", "all"),
    "grm-gemma2": ("Ray2333/GRM-Gemma2-2B-sftreg", "tmpl-left", "grm:gemma2", "all"),
    "grm-llama3.2": ("Ray2333/GRM-llama3.2-3B-sftreg", "tmpl", "grm:llama-linear", "all"),
    "beaver-reward": ("PKU-Alignment/beaver-7b-v1.0-reward", "llama", "beaver:reward", "all"),
    "beaver-cost": ("PKU-Alignment/beaver-7b-v2.0-cost", "llama", "beaver:cost", "all"),
    "starling-34b": ("Nexusflow/Starling-RM-34B", "yi", "starling34", "all"),
    "starling-7b": ("berkeley-nest/Starling-RM-7B-alpha", "llama", "starling7", "unpadded"),
    "ultrarm": ("openbmb/UltraRM-13b", "llama", "ultrarm", "all"),
    "eurus": ("openbmb/Eurus-RM-7b", "tmpl", "remote:eurus", "all"),
    "ziya": ("IDEA-CCNL/Ziya-LLaMA-7B-Reward", "llama", "remote:ziya", "all"),
    "ziya-fp32": ("IDEA-CCNL/Ziya-LLaMA-7B-Reward", "llama", "remote:ziya", "all"),
    "internlm2": ("internlm/internlm2-7b-reward", "internlm", "remote:internlm2", "all"),
    "qrm-llama3.1": ("nicolinho/QRM-Llama3.1-8B", "llama3", "qrm:31", "all"),
    "qrm-llama3": ("nicolinho/QRM-Llama3-8B", "llama3", "qrm:3", "all"),
    "inf-orm": ("infly/INF-ORM-Llama3.1-70B", "llama3", "inform", "all"),
    "ldl": ("ShikaiChen/LDL-Reward-Gemma-2-27B-v0.1", "gemma", "ldl", "all"),
    "worldpm": ("Qwen/WorldPM-72B", "qwen", "remote:worldpm", "all"),
    "armorm": ("RLHFlow/ArmoRM-Llama3-8B-v0.1", "llama3", "remote:armorm", "all"),
}
NOTES = {
    "grm-gemma": "left padding (GRM's L-1 branch)", "grm-gemma2": "left padding; eager attention with softcapping",
    "grm-llama3.2": "linear value head", "beaver-reward": "do_normalize (affine) with stored statistics",
    "beaver-cost": "do_normalize (scale); negated", "starling-34b": "pads with id 0, the read id: well defined",
    "starling-7b": "official reads before the first BOS in the padded batch: compared on rows without padding",
    "eurus": "model's own code (AutoModel)", "internlm2": "model's own code; reward token appended, right padding",
    "ziya": "the official pipeline forces float16 (.half()): both sides float16",
    "ziya-fp32": "the same in float32, the official pipeline's .half() patched out",
    "qrm-llama3.1": "official forces flash_attention_2: same weights with sdpa, float32",
    "qrm-llama3": "official forces flash_attention_2 and bf16 autocast: same weights, sdpa, float32",
    "inf-orm": "doubled BOS masked (RewardBenchPipeline); the entry pins bfloat16: both sides float32",
    "ldl": "official forces bf16 + flash_attention_2: same weights, eager, float32; all rows doubled BOS, right "
           "padding (where LDLPipeline's column drop is batch-independent)",
    "worldpm": "model's own code; no special tokens, no attention mask; the entry pins bfloat16: both sides float32",
    "armorm": "no official number (run_rm.py raises NotImplementedError): vs the model card's usage, one sequence "
              "at a time",
}
TMPL = "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}{{ eos_token }}\n{% endfor %}"
LLAMA3_TMPL = ("{% for m in messages %}{% set c = '<|start_header_id|>' + m['role'] + '<|end_header_id|>\n\n' + "
               "m['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set c = bos_token + c %}{% endif %}"
               "{{ c }}{% endfor %}")
QWEN_TMPL = ("{% if messages[0]['role'] != 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
             "{% endif %}{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}")


# ---- tokenizers (main venv) -------------------------------------------------------------------


def corpus(data, limit):
    texts = []
    for f in sorted(Path(data).glob("*_filtered.json")):
        for x in json.loads(f.read_text())[:limit]:
            texts += [x["prompt"], *x["chosen"], *x["rejected"]]
    return texts


def build_tokenizer(kind, texts, dest):
    """A byte-level BPE tokenizer trained on `texts`, shaped like the family's real one."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    from rmbench_fast.tiny import save_tokenizer

    sp = {"tmpl": ("<s>", "</s>"), "tmpl-left": ("<s>", "</s>"), "llama": ("<unk>", "<s>", "</s>"),
          "yi": ("<unk>", "<|startoftext|>", "<|endoftext|>"), "gemma": ("<pad>", "<eos>", "<bos>"),
          "qwen": ("<|endoftext|>", "<|im_start|>", "<|im_end|>"), "internlm": ("<s>", "</s>", "<|reward|>"),
          "llama3": ()}[kind]
    bos = {"llama": "<s>", "yi": "<|startoftext|>", "gemma": "<bos>", "qwen": None, "llama3": "<|begin_of_text|>"}.get(
        kind, "<s>")
    t = Tokenizer(models.BPE())
    t.pre_tokenizer, t.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
    t.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=1200, special_tokens=list(sp), show_progress=False,
                                                     initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    if kind == "llama3":
        t = llama3_ids(t)
    if bos:
        t.post_processor = processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
                                                         special_tokens=[(bos, t.token_to_id(bos))])
    kw = {"tmpl": dict(eos_token="</s>"), "tmpl-left": dict(eos_token="</s>", padding_side="left"),
          "llama": dict(eos_token="</s>", unk_token="<unk>"), "gemma": dict(eos_token="<eos>", pad_token="<pad>"),
          "yi": dict(eos_token="<|endoftext|>", unk_token="<unk>", pad_token="<unk>"),
          "qwen": dict(eos_token="<|im_end|>", pad_token="<|endoftext|>"),
          "internlm": dict(eos_token="</s>"),
          "llama3": dict(eos_token="<|eot_id|>", pad_token="<|pad|>")}[kind]
    tok = PreTrainedTokenizerFast(tokenizer_object=t, bos_token=bos, model_input_names=["input_ids", "attention_mask"],
                                  **kw)
    tok.chat_template = {"tmpl": TMPL, "tmpl-left": TMPL, "gemma": TMPL, "internlm": TMPL, "llama3": LLAMA3_TMPL,
                         "qwen": QWEN_TMPL}.get(kind)
    tok._rmbench_class = "LlamaTokenizerFast" if kind in ("llama", "yi") else "PreTrainedTokenizerFast"
    save_tokenizer(tok, dest)


def llama3_ids(trained):
    """The trained BPE re-numbered so that Llama-3's ids hold: "\\n\\n" 271, "assistant" 78191 (both
    added tokens, so the header always tokenizes to them), specials at 128000+, pad 128256."""
    from tokenizers import AddedToken, Tokenizer

    data = json.loads(trained.to_str())
    fixed = {271: "\n\n", 78191: "assistant", 128000: "<|begin_of_text|>", 128001: "<|end_of_text|>",
             128006: "<|start_header_id|>", 128007: "<|end_header_id|>", 128009: "<|eot_id|>", 128256: "<|pad|>"}
    free = (i for i in range(128257) if i not in fixed)
    vocab = {tok: next(free) for tok in sorted(data["model"]["vocab"], key=data["model"]["vocab"].get)
             if tok not in fixed.values()}
    vocab.update({f"<|reserved_{i}|>": i for i in free})
    vocab.update({v: k for k, v in fixed.items()})
    data["model"]["vocab"], data["added_tokens"] = vocab, []
    t = Tokenizer.from_str(json.dumps(data))
    t.add_tokens([AddedToken(s, normalized=False) for s in ("\n\n", "assistant")])
    t.add_special_tokens([AddedToken(fixed[i], normalized=False, special=True) for i in fixed if i >= 128000])
    assert t.token_to_id("assistant") == 78191 and t.token_to_id("<|pad|>") == 128256
    return t


# ---- the model's own code of remote-code families: minimal versions of the published classes ----

HEADER = """
import torch, torch.nn as nn
from transformers import {model}, PreTrainedModel, {cfg}
from transformers.modeling_outputs import SequenceClassifierOutputWithPast
def last(mask):  # the last attended token
    return mask.long().cumsum(1).argmax(1)
def before_pad(ids, pad):  # just before the first pad id, else the last column
    return (torch.eq(ids, pad).int().argmax(-1) - 1) % ids.shape[-1]
class Base(PreTrainedModel):
    config_class = {cfg}
    base_model_prefix = "model"
    def __init__(self, config):
        super().__init__(config)
        self.model = {model}(config)
        self.heads(config)
        self.post_init()
    def hidden(self, input_ids, attention_mask):
        return self.model(input_ids=input_ids, attention_mask=attention_mask)[0]
"""
REMOTE = {  # builder -> (file, class, auto class, decoder, source after HEADER)
    "eurus": ("modeling_eurus_rm.py", "EurusRewardModel", "AutoModel", "Mistral", """
class EurusRewardModel(Base):  # regression_head at the last attended token, [B, 1]
    def heads(self, c):
        self.regression_head = nn.Linear(c.hidden_size, 1, bias=False)
    def forward(self, input_ids=None, attention_mask=None, **kw):
        r = self.regression_head(self.hidden(input_ids, attention_mask)).squeeze(-1)
        return torch.gather(r, 1, last(attention_mask).view(-1, 1))
"""),
    "ziya": ("modeling_llama_rm.py", "LlamaRewardModel", "AutoModelForSequenceClassification", "Llama", """
class LlamaRewardModel(Base):  # value_head on the last hidden state at the last attended token, [B]
    def heads(self, c):
        self.value_head = nn.Linear(c.hidden_size, 1, bias=False)
    def forward(self, input_ids=None, attention_mask=None, **kw):
        h = self.model(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True).hidden_states[-1]
        return self.value_head(h[torch.arange(h.shape[0]), last(attention_mask)]).squeeze(-1)
"""),
    "internlm2": ("modeling_internlm2.py", "InternLM2ForRewardModel", "AutoModel", "Llama", """
class InternLM2ForRewardModel(Base):  # v_head at the last attended token, which must be the reward token
    def heads(self, c):
        self.v_head, self.reward_token_id = nn.Linear(c.hidden_size, 1, bias=False), c.reward_token_id
    def forward(self, input_ids=None, attention_mask=None, **kw):
        end = last(attention_mask).view(-1, 1)
        assert (torch.gather(input_ids, 1, end) == self.reward_token_id).all()
        r = self.v_head(self.hidden(input_ids, attention_mask)).squeeze(-1)
        return SequenceClassifierOutputWithPast(logits=torch.gather(r, 1, end))
"""),
    "worldpm": ("modeling_qwen2_rm.py", "Qwen2ForRewardModel", "AutoModel", "Qwen2", """
class Qwen2ForRewardModel(Base):  # two-layer score head just before the first pad id
    def heads(self, c):
        self.score = nn.Sequential(nn.Linear(c.hidden_size, c.hidden_size), nn.ReLU(), nn.Linear(c.hidden_size, 1))
    def forward(self, input_ids=None, attention_mask=None, **kw):
        logits = self.score(self.hidden(input_ids, attention_mask))
        at = before_pad(input_ids, self.config.pad_token_id)
        return SequenceClassifierOutputWithPast(logits=logits[torch.arange(input_ids.shape[0]), at])
"""),
    "armorm": ("modeling_custom.py", "LlamaForRewardModelWithGating", "AutoModelForSequenceClassification", "Llama", """
from dataclasses import dataclass
from typing import Optional
from transformers.utils import ModelOutput
PATTERN = [128009, 128006, 78191, 128007, 271]
@dataclass
class Out(ModelOutput):
    rewards: Optional[torch.FloatTensor] = None
    score: Optional[torch.FloatTensor] = None
    logits: Optional[torch.FloatTensor] = None
class LlamaForRewardModelWithGating(Base):  # objectives mixed by a gating network read at the assistant header
    def heads(self, c):
        k, h = c.num_objectives, c.gating_hidden_dim
        self.regression_layer = nn.Linear(c.hidden_size, k, bias=False)
        self.reward_transform_matrix = nn.Parameter(torch.eye(k), requires_grad=False)
        self.gating = nn.Module()
        self.gating.layers = nn.ModuleList([nn.Linear(c.hidden_size, h), nn.Linear(h, h), nn.Linear(h, h), nn.Linear(h, k)])
        self.gating.logit_scale = nn.Parameter(torch.ones(1))
    def forward(self, input_ids=None, attention_mask=None, **kw):
        h, b = self.hidden(input_ids, attention_mask), torch.arange(input_ids.shape[0])
        x = h[b, [max(j for j in range(len(r) - 4) if r[j:j + 5] == PATTERN) for r in input_ids.tolist()]]
        for i, layer in enumerate(self.gating.layers):
            x = layer(x) if i == 3 else torch.relu(layer(x))
        gate = torch.softmax(x / 10, dim=1) * self.gating.logit_scale[0]
        rewards = self.regression_layer(h[b, before_pad(input_ids, self.config.pad_token_id)]) @ self.reward_transform_matrix
        score = (gate * rewards).sum(1)
        return Out(rewards=rewards, score=score, logits=score)
"""),
}


# ---- models (peer venv): rewardbench's classes; random weights that keep activations of order one ----


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
    import importlib.util

    import torch
    from safetensors.torch import save_file
    from transformers import AutoTokenizer, Gemma2Config, GemmaConfig, LlamaConfig, LlamaForCausalLM, MistralConfig, \
        Qwen2Config

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

        model = LDLRewardModel27B(Gemma2Config(**common, head_dim=8))
    else:  # remote code: the modeling file next to config.json, named in auto_map
        file, cls_name, auto, decoder, source = REMOTE[variant]
        (dest / file).write_text(HEADER.format(model=f"{decoder}Model", cfg=f"{decoder}Config") + source)
        spec = importlib.util.spec_from_file_location(file[:-3], dest / file)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        extra = {"internlm2": dict(reward_token_id=tok.convert_tokens_to_ids("<|reward|>")),
                 "armorm": dict(num_objectives=5, gating_hidden_dim=8)}.get(variant, {})
        cfg = {"Mistral": MistralConfig, "Llama": LlamaConfig, "Qwen2": Qwen2Config}[decoder](**common, **extra)
        model = randomize(getattr(module, cls_name)(cfg), 5)
        model.save_pretrained(dest)
        saved = json.loads((dest / "config.json").read_text())
        saved.update(architectures=[cls_name], auto_map={auto: f"{file[:-3]}.{cls_name}"})
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
        attn = "eager" if builder == "ldl" else "sdpa"

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
    if builder == "ldl":  # its builder takes device_map "auto" (CUDA) or none, not "cpu"
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


# ---- the comparison (main venv) ---------------------------------------------------------------


def run(cmd, cwd, env=None):
    r = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, env={**os.environ, **(env or {})})
    if r.returncode != 0:
        raise SystemExit(f"failed ({r.returncode}): {' '.join(map(str, cmd))}\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}")
    return r


def unpadded(lengths, domains) -> list[bool]:
    """Per sequence (layout order), whether it is the longest of its official batch: per domain and
    style, the chosen (or rejected) texts of up to 8 consecutive items."""
    keep, start = [False] * len(lengths), 0
    for d in dict.fromkeys(domains):
        n = domains.count(d)
        for k in range(3):
            for side in range(2):
                for b in range(0, n, 8):
                    idx = [(start + i) * 6 + 2 * k + side for i in range(b, min(n, b + 8))]
                    for i in idx:
                        keep[i] = lengths[i] == max(lengths[j] for j in idx)
        start += n
    return keep


def compare(official, ours, which):
    import numpy as np

    from rmbench_fast.metrics import summarize

    o, u = json.loads(Path(official).read_text()), json.loads((ours / "results.json").read_text())
    domains = [x["domain"] for x in o]
    oc, orj = np.array([x["score_chosen"] for x in o]), np.array([x["score_rejected"] for x in o])
    uc, urj = np.array([x["score_chosen"] for x in u]), np.array([x["score_rejected"] for x in u])
    diff = np.stack([np.abs(oc - uc), np.abs(orj - urj)], -1).reshape(-1)  # layout order
    keep = np.ones(len(diff), bool)
    if which == "unpadded":
        keep = np.array(unpadded(json.loads((ours / "run.json").read_text())["sequences"]["lengths"], domains))
    return {"compared": int(keep.sum()), "sequences": len(diff), "max_abs_diff": float(diff[keep].max()),
            "accuracy_identical": summarize(oc, orj, domains) == summarize(uc, urj, domains)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(REPO.parent / "shared" / "rm-bench"))
    ap.add_argument("--limit", type=int, default=2)
    ap.add_argument("--work", default=None, help="folder for the models and results [default: a temp folder]")
    ap.add_argument("--families", nargs="*", default=list(FAMILIES))
    ap.add_argument("--output", default=str(REPO / "benchmarks" / "results" / "adapters-equivalence-cpu.json"))
    args = ap.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="adapters-eq-")).resolve()
    texts, rows = corpus(args.data, args.limit), []
    for fam in args.families:
        name, tok_kind, builder, which = FAMILIES[fam]
        model = name if builder == "starling7" else f"RewardModels/{name}"  # the 7B builder takes the bare name only
        if not (work / model / "BUILT").is_file():
            build_tokenizer(tok_kind, texts, work / model)
            run([PEER, __file__, "build", builder, work / model], work)
        out = work / "out" / fam
        out.mkdir(parents=True, exist_ok=True)
        dtype = "float16" if fam == "ziya" else "float32"
        common = ["--model", model, "--data", args.data, "--limit", args.limit, "--dtype", dtype, "--trust-remote-code"]
        run([PEER, __file__, "official", builder, "--mode", "rm", *common, "--output", out / "official.json"], work)
        run([sys.executable, "-m", "rmbench_fast", "score", *common, "--compat", "official", "--no-cache", "-q",
             "--overwrite", "--output", out / "ours"], work, {"PYTHONPATH": str(REPO)})
        adapter = json.loads((out / "ours" / "run.json").read_text()).get("adapter")
        rows.append({"family": fam, "official_name": name, "adapter": adapter, "comparison": which,
                     **compare(out / "official.json", out / "ours", which), "note": NOTES.get(fam, "")})
        print(json.dumps(rows[-1]), flush=True)
    result = {"what": "rmbench-fast adapters vs the official flow (rewardbench 0.1.4 pipelines through official_flow.py)"
                      ", tiny random models, CPU", "dtype": "float32 (ziya: float16, as its pipeline forces)",
              "data": args.data, "limit_per_domain": args.limit, "goal_max_abs_diff_fp32": 1e-4, "families": rows}
    Path(args.output).write_text(json.dumps(result, indent=1) + "\n")
    print("\n| family | official entry | adapter | compared | max abs diff | accuracy identical | note |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['family']} | `{r['official_name']}` | {r['adapter']} | {r['compared']}/{r['sequences']} | "
              f"{r['max_abs_diff']:.1e} | {'yes' if r['accuracy_identical'] else 'NO'} | {r['note']} |")


if __name__ == "__main__":
    if sys.argv[1:2] == ["build"]:
        build(sys.argv[2], sys.argv[3])
    elif sys.argv[1:2] == ["official"]:
        official(sys.argv[2], sys.argv[3:])
    else:
        main()

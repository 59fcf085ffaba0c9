"""The official RM-Bench flow, run by calling allenai's rewardbench 0.1.4 package (in the peer
environment that benchmarks/peer/setup.sh makes: transformers 4.51, trl 0.17, fastchat).

It does what RM-Bench's scripts/run_rm.py and scripts/run_dpo.py do (run_rm.sh / run_dpo.sh:
batch size 8), offline and without their hub and logging plumbing:
- each data file is split into three datasets, one per style index; each is formatted with the
  tokenizer's chat template, else fastchat's conversation template (--chat-template, tulu by
  default), by rewardbench's own prepare_dialogue / prepare_dialogue_from_tokenizer;
- RM (run_rm.py): REWARD_MODEL_CONFIG looked up by the model name (a `RewardModels/` prefix
  stripped; else "default"), its model_builder and pipeline_builder (for "default":
  AutoModelForSequenceClassification and rewardbench's RewardBenchPipeline, which masks the first
  of two leading BOS tokens); truncation_side "left"; pad = EOS in tokenizer and config when the
  tokenizer has none, config pad = tokenizer pad when the config has none; add_eos_token = True when
  the tokenizer has no chat template; a DataLoader of 8 rows through accelerate, the pipeline called
  per batch on the chosen texts, then the rejected texts, with batch_size 8, truncation, padding,
  max_length 2048, function_to_apply "none"; raw logits as scores, lists of one value flattened when
  saving, as run_rm.py does (lists of several are kept);
- DPO (run_dpo.py): rewardbench.DPOInference (tokenize_row, concatenated forward,
  full-vocabulary log_softmax) with trl's DPODataCollatorWithPadding, batch size 8.
Departures, all of the device only: without CUDA, the `.to("cuda")` / `.cuda()` calls hard-coded in
rewardbench's pipelines are redirected to --device, and run_rm.py's torch.cuda memory bookkeeping
(which changes no number) is skipped. --dtype stands for run_rm.py's --torch_dtype; 8-bit loading
(run_rm.py's default for entries marked quantized, needs bitsandbytes and CUDA) only with
--quantized, i.e. the default here is run_rm.py's --not_quantized.
Writes the official results format (each item plus score_chosen / score_rejected, and domain) and,
with --timing, a JSON of wall time and token counts; with --progress, one JSON line per phase and per
batch as it happens (wall-clock "t"), so a run cut off by a time limit still shows where its time
went (benchmarks/gpu_e2e.py reads it). The events change no number: they are written between the
official calls.

    benchmarks/peer/.venv/bin/python benchmarks/peer/official_flow.py --mode dpo --model P \
        --ref-model R --data ../shared/rm-bench --limit 20 --output /tmp/official.json
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

DOMAINS = ("chat", "code", "math", "safety-refuse", "safety-response")


class EventLog:
    """--progress FILE: {"event", "t": time.time(), ...} per line, line-buffered (nothing lost when
    the process is killed); a no-op without a file."""

    def __init__(self, path: str | None):
        self.file = open(path, "a", buffering=1) if path else None

    def __call__(self, event: str, **fields) -> None:
        if self.file is not None:
            self.file.write(json.dumps({"event": event, "t": time.time(), **fields}) + "\n")


def load_items(data: str, limit: int | None) -> list[tuple[str, list[dict]]]:
    """(domain, items) per data file, the first `limit` items of each, in domain order."""
    path = Path(data)
    files = sorted(path.glob("*_filtered.json")) if path.is_dir() else [path]
    out = []
    for f in files:
        items = json.loads(f.read_text())
        if "_filtered" not in f.name and items and all(isinstance(x, dict) and "domain" in x for x in items):
            # one file of every domain, each item naming its own (the package's demo data): per domain,
            # as rmbench-fast's --limit counts
            by_domain = {}
            for x in items:
                by_domain.setdefault(x["domain"], []).append(x)
            out += [(d, xs[:limit] if limit else xs) for d, xs in by_domain.items()]
            continue
        domain = f.name.split("_filtered")[0]
        if limit:
            items = items[:limit]
        out.append((domain, items))
    out.sort(key=lambda x: DOMAINS.index(x[0]) if x[0] in DOMAINS else len(DOMAINS))
    return out


def style_dataset(items, k, tokenizer, conv):
    """One style's preference dataset, formatted as the official load_eval_dataset does."""
    from datasets import Dataset
    from rewardbench.utils import check_tokenizer_chat_template, prepare_dialogue, prepare_dialogue_from_tokenizer

    rows = [{"prompt": x["prompt"], "chosen": x["chosen"][k], "rejected": x["rejected"][k]} for x in items]
    ds = Dataset.from_list(rows)
    if check_tokenizer_chat_template(tokenizer):
        return ds.map(prepare_dialogue_from_tokenizer, fn_kwargs={"tokenizer": tokenizer})
    return ds.map(prepare_dialogue, fn_kwargs={"dialogue_template": conv})


def score_files(files, tokenizer, conv, score_style, log, flatten=False):
    """Each file, each style index as its own pass, as the official scripts do. score_style(ds)
    returns (chosen scores, rejected scores, real tokens, padded tokens) of one style's dataset.
    flatten: run_rm.py's saving rule, lists of one score each become plain scores."""
    tokens = padded = 0
    results = []
    for domain, items in files:
        chosen, rejected = [[0.0] * 3 for _ in items], [[0.0] * 3 for _ in items]
        for k in range(3):
            ds = style_dataset(items, k, tokenizer, conv)
            log("formatted", domain=domain, style=k, rows=len(ds))
            cho, rej, real, pad = score_style(ds)
            tokens, padded = tokens + real, padded + pad
            for i, (c, r) in enumerate(zip(cho, rej)):
                chosen[i][k], rejected[i][k] = c, r
        for x, c, r in zip(items, chosen, rejected):
            if flatten and all(isinstance(e, list) and len(e) == 1 for e in c):
                c = [e[0] for e in c]
            if flatten and all(isinstance(e, list) and len(e) == 1 for e in r):
                r = [e[0] for e in r]
            results.append({**x, "domain": domain, "score_chosen": c, "score_rejected": r})
    return results, tokens, padded


LLAMA3_SPELLINGS_RM = ("llama-3", "Llama3", "Llama-3", "LLaMA3", "llama3")  # run_rm.py: no 8-bit for these


def redirect_cuda(device: str) -> None:
    """Without CUDA, the pipelines' hard-coded .to("cuda") / .cuda() go to `device` instead."""
    import torch
    from transformers.tokenization_utils_base import BatchEncoding

    if device.startswith("cuda"):
        return
    to = BatchEncoding.to
    BatchEncoding.to = lambda self, dev, *a, **k: to(self, device if str(dev).startswith("cuda") else dev, *a, **k)
    tensor_to = torch.Tensor.to

    def _tensor_to(self, *a, **k):
        a = tuple(device if isinstance(x, str) and x.startswith("cuda") else x for x in a)
        if isinstance(k.get("device"), str) and k["device"].startswith("cuda"):
            k["device"] = device
        return tensor_to(self, *a, **k)

    torch.Tensor.to = _tensor_to
    torch.Tensor.cuda = lambda self, *a, **k: self
    torch.nn.Module.cuda = lambda self, *a, **k: self
    module_to = torch.nn.Module.to  # Starling-7B's builder moves its model with .to("cuda")

    def _module_to(self, *a, **k):
        a = tuple(device if isinstance(x, str) and x.startswith("cuda") else x for x in a)
        return module_to(self, *a, **k)

    torch.nn.Module.to = _module_to


def run_rm(args, tokenizer, conv, files, dtype):
    """run_rm.py's custom-pipeline branch (the one every REWARD_MODEL_CONFIG entry takes)."""
    import torch
    from accelerate import Accelerator
    from rewardbench import REWARD_MODEL_CONFIG, check_tokenizer_chat_template
    from torch.utils.data.dataloader import default_collate
    from transformers import pipeline

    name = args.model.replace("RewardModels/", "")
    config = REWARD_MODEL_CONFIG.get(name, REWARD_MODEL_CONFIG["default"])
    if config["model_type"] == "Custom Classifier":
        raise NotImplementedError("For the Custom Classifier model like NVIDIA SteerLM, plz refer to the NVIDIA "
                                  "original code")
    quantized = config["quantized"] and args.quantized and not any(s in args.model for s in LLAMA3_SPELLINGS_RM)
    torch_dtype = config.get("torch_dtype", None)
    if torch_dtype is None:
        if dtype == torch.bfloat16:
            quantized = False
        torch_dtype = dtype
    if not config["custom_dialogue"]:
        tokenizer.truncation_side = "left"
    kwargs = {"batch_size": 8, "truncation": True, "padding": True, "max_length": 2048, "function_to_apply": "none",
              "return_token_type_ids": False}
    if quantized:
        model_kwargs = {"load_in_8bit": True, "device_map": {"": 0}, "torch_dtype": torch_dtype}
    else:
        model_kwargs = {"device_map": "auto" if args.device.startswith("cuda") else args.device,
                        "torch_dtype": torch_dtype}
    redirect_cuda(args.device)
    model = config["model_builder"](args.model, **model_kwargs, trust_remote_code=args.trust_remote_code)
    pipe = config["pipeline_builder"]("text-classification", model=model, tokenizer=tokenizer)
    args.t_loaded = time.perf_counter()  # timing only: what follows is the scoring
    args.log("loaded")
    if pipe.tokenizer.pad_token_id is None:
        pipe.model.config.pad_token_id = pipe.tokenizer.eos_token_id
        pipe.tokenizer.pad_token_id = pipe.tokenizer.eos_token_id
    if pipe.model.config.pad_token_id is None:
        pipe.model.config.pad_token_id = pipe.tokenizer.pad_token_id
    if not check_tokenizer_chat_template(tokenizer):
        pipe.tokenizer.add_eos_token = True
    if config["pipeline_builder"] == pipeline:  # no entry of rewardbench 0.1.4 takes this branch
        raise NotImplementedError("the transformers text-classification branch of run_rm.py is not reproduced")
    accelerator = Accelerator(cpu=not args.device.startswith("cuda"))

    def collate(batch):
        return batch if isinstance(batch[0]["text_chosen"][0], dict) else default_collate(batch)

    def score_style(ds):
        ds = ds.select_columns(["text_chosen", "text_rejected"])
        loader = torch.utils.data.DataLoader(ds, batch_size=8, collate_fn=collate, shuffle=False, drop_last=False)
        loader, pipe.model = accelerator.prepare(loader, pipe.model)
        cho, rej, real, pad = [], [], 0, 0
        for batch in loader:
            for side, out in (("text_chosen", cho), ("text_rejected", rej)):
                rewards = pipe(batch[side], **kwargs)
                if isinstance(rewards[0], dict):
                    out += [r["score"] for r in rewards]
                else:
                    out += rewards.float().cpu().numpy().tolist()
                lens = [len(x) for x in tokenizer(batch[side], truncation=True, max_length=2048)["input_ids"]]
                real, pad = real + sum(lens), pad + len(lens) * max(lens)
                args.log("batch", side=side, rows=len(lens), real=sum(lens), padded=len(lens) * max(lens))
        return cho, rej, real, pad

    return score_files(files, tokenizer, conv, score_style, args.log, flatten=True)


def run_dpo(args, tokenizer, conv, files, dtype):
    import torch
    from accelerate import Accelerator
    from rewardbench import DPOInference
    from transformers import AutoModelForCausalLM
    from trl.trainer.utils import DPODataCollatorWithPadding

    tokenizer.pad_token = tokenizer.eos_token
    if tokenizer.bos_token is None:
        tokenizer.bos_token_id = tokenizer.eos_token_id
        tokenizer.pad_token_id = tokenizer.eos_token_id
    model = AutoModelForCausalLM.from_pretrained(args.model, torch_dtype=dtype, attn_implementation="sdpa")
    ref = AutoModelForCausalLM.from_pretrained(args.ref_model, torch_dtype=dtype) if args.ref_model else None
    model.to(args.device)
    if ref is not None:
        ref.to(args.device)
    args.t_loaded = time.perf_counter()  # timing only: what follows is the scoring
    args.log("loaded")
    dpo = DPOInference(model, ref, tokenizer=tokenizer, accelerator=Accelerator(cpu=args.device == "cpu"),
                       ref_free_norm=args.ref_free)
    collate = DPODataCollatorWithPadding(pad_token_id=tokenizer.pad_token_id, label_pad_token_id=-100,
                                         is_encoder_decoder=False)

    def score_style(ds):
        ds = ds.select_columns(["text_chosen", "text_rejected", "prompt"])
        tokenized = ds.map(dpo.tokenize_row, remove_columns=list(ds.features))
        lc = [len(x) for x in tokenized["chosen_input_ids"]]
        lr = [len(x) for x in tokenized["rejected_input_ids"]]
        args.log("tokenized", rows=len(lc))
        # the collator pads the chosen and rejected rows of a batch to one common length
        pad = sum(2 * len(lc[b:b + 8]) * max(lc[b:b + 8] + lr[b:b + 8]) for b in range(0, len(lc), 8))
        loader = torch.utils.data.DataLoader(tokenized, batch_size=8, shuffle=False, drop_last=False,
                                             collate_fn=collate)
        cho, rej = [], []
        for b, batch in enumerate(loader):
            rc, rr = dpo.inference_step(batch, ref_free=ref is None)
            cho += rc.float().tolist()
            rej += rr.float().tolist()
            rows = lc[8 * b:8 * b + 8] + lr[8 * b:8 * b + 8]
            args.log("batch", rows=len(rows), real=sum(rows), padded=len(rows) * max(rows))
        return cho, rej, sum(lc) + sum(lr), pad

    return score_files(files, tokenizer, conv, score_style, args.log)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=["rm", "dpo"], required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--ref-model", default=None)
    ap.add_argument("--ref-free", default="avg", choices=["sum", "avg", "norm"])
    ap.add_argument("--data", required=True)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--chat-template", default="tulu", help="fastchat template for tokenizers without one")
    ap.add_argument("--tokenizer", default=None, help="tokenizer path (run_rm.py's --tokenizer)")
    ap.add_argument("--trust-remote-code", action="store_true")
    ap.add_argument("--quantized", action="store_true", help="8-bit where REWARD_MODEL_CONFIG says (CUDA, bitsandbytes)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--output", required=True)
    ap.add_argument("--timing", default=None)
    ap.add_argument("--progress", default=None, help="append one JSON line per phase and batch to this file")
    args = ap.parse_args()
    args.log = EventLog(args.progress)
    args.log("start", pid=os.getpid())

    import torch
    from fastchat.conversation import get_conv_template
    from transformers import AutoTokenizer

    if args.threads:
        torch.set_num_threads(args.threads)
    args.log("imported")
    t0 = time.perf_counter()
    dtype = getattr(torch, args.dtype)
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer or args.model, trust_remote_code=args.trust_remote_code)
    conv = get_conv_template(args.chat_template)
    files = load_items(args.data, args.limit)
    args.log("tokenizer", files=len(files), prompts=sum(len(items) for _, items in files))
    with torch.no_grad():
        run = run_rm if args.mode == "rm" else run_dpo
        results, tokens, padded = run(args, tokenizer, conv, files, dtype)
    if args.device.startswith("cuda"):
        torch.cuda.synchronize()
    t_end = time.perf_counter()
    Path(args.output).write_text(json.dumps(results, indent=1, ensure_ascii=False))
    info = {"wall_s": time.perf_counter() - t0, "score_s": t_end - args.t_loaded, "real_tokens": tokens,
            "padded_tokens": padded, "n_prompts": len(results)}
    if args.device.startswith("cuda"):
        info["peak_gpu_gib"] = torch.cuda.max_memory_allocated() / 2**30
    if args.timing:
        Path(args.timing).write_text(json.dumps(info))
    args.log("done", **info)
    print(json.dumps(info))


if __name__ == "__main__":
    main()

"""The official RM-Bench flow, run by calling allenai's rewardbench 0.1.4 package (in the peer
environment that benchmarks/peer/setup.sh makes: transformers 4.51, trl 0.17, fastchat).

It does what RM-Bench's scripts/run_rm.py and scripts/run_dpo.py do, offline and without their
hub and GPU plumbing:
- each data file is split into three datasets, one per style index; each is formatted with the
  tokenizer's chat template, else fastchat's conversation template (tulu), by rewardbench's own
  prepare_dialogue / prepare_dialogue_from_tokenizer;
- RM: the transformers `text-classification` pipeline, batch size 8, padding, truncation at 2048
  (left), function_to_apply="none"; pad = EOS when missing; add_eos_token = True when the tokenizer
  has no chat template; the rejected list, then the chosen list;
- DPO: rewardbench.DPOInference (tokenize_row, concatenated forward, full-vocabulary log_softmax)
  with trl's DPODataCollatorWithPadding, batch size 8.
Writes the official results format (each item plus score_chosen / score_rejected, and domain) and,
with --timing, a JSON of wall time and token counts.

    benchmarks/peer/.venv/bin/python benchmarks/peer/official_flow.py --mode dpo --model P \
        --ref-model R --data ../shared/rm-bench --limit 20 --output /tmp/official.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

DOMAINS = ("chat", "code", "math", "safety-refuse", "safety-response")


def load_items(data: str, limit: int | None) -> list[tuple[str, list[dict]]]:
    """(domain, items) per data file, the first `limit` items of each, in domain order."""
    path = Path(data)
    files = sorted(path.glob("*_filtered.json")) if path.is_dir() else [path]
    out = []
    for f in files:
        items = json.loads(f.read_text())
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


def score_files(files, tokenizer, conv, score_style):
    """Each file, each style index as its own pass, as the official scripts do. score_style(ds)
    returns (chosen scores, rejected scores, real tokens, padded tokens) of one style's dataset."""
    tokens = padded = 0
    results = []
    for domain, items in files:
        chosen, rejected = [[0.0] * 3 for _ in items], [[0.0] * 3 for _ in items]
        for k in range(3):
            cho, rej, real, pad = score_style(style_dataset(items, k, tokenizer, conv))
            tokens, padded = tokens + real, padded + pad
            for i, (c, r) in enumerate(zip(cho, rej)):
                chosen[i][k], rejected[i][k] = c, r
        results += [{**x, "domain": domain, "score_chosen": c, "score_rejected": r}
                    for x, c, r in zip(items, chosen, rejected)]
    return results, tokens, padded


def run_rm(args, tokenizer, conv, files, dtype):
    from rewardbench.utils import check_tokenizer_chat_template
    from transformers import AutoModelForSequenceClassification, pipeline

    tokenizer.truncation_side = "left"
    model = AutoModelForSequenceClassification.from_pretrained(args.model, torch_dtype=dtype)
    pipe = pipeline("text-classification", model=model, tokenizer=tokenizer, device=args.device)
    if pipe.tokenizer.pad_token_id is None:
        pipe.model.config.pad_token_id = pipe.tokenizer.eos_token_id
        pipe.tokenizer.pad_token_id = pipe.tokenizer.eos_token_id
    if pipe.model.config.pad_token_id is None:
        pipe.model.config.pad_token_id = pipe.tokenizer.pad_token_id
    if not check_tokenizer_chat_template(tokenizer):
        pipe.tokenizer.add_eos_token = True
    kwargs = {"batch_size": 8, "truncation": True, "padding": True, "max_length": 2048,
              "function_to_apply": "none", "return_token_type_ids": False}

    def score_style(ds):
        texts_rej, texts_cho = list(ds["text_rejected"]), list(ds["text_chosen"])  # newer datasets: a Column
        rej = [r["score"] for r in pipe(texts_rej, **kwargs)]
        cho = [r["score"] for r in pipe(texts_cho, **kwargs)]
        real = pad = 0
        for texts in (texts_rej, texts_cho):  # the pipeline pads each batch of 8 to its longest
            lens = [len(tokenizer(t, truncation=True, max_length=2048)["input_ids"]) for t in texts]
            real += sum(lens)
            pad += sum(len(lens[b:b + 8]) * max(lens[b:b + 8]) for b in range(0, len(lens), 8))
        return cho, rej, real, pad

    return score_files(files, tokenizer, conv, score_style)


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
    dpo = DPOInference(model, ref, tokenizer=tokenizer, accelerator=Accelerator(cpu=args.device == "cpu"),
                       ref_free_norm=args.ref_free)
    collate = DPODataCollatorWithPadding(pad_token_id=tokenizer.pad_token_id, label_pad_token_id=-100,
                                         is_encoder_decoder=False)

    def score_style(ds):
        ds = ds.select_columns(["text_chosen", "text_rejected", "prompt"])
        tokenized = ds.map(dpo.tokenize_row, remove_columns=list(ds.features))
        lc = [len(x) for x in tokenized["chosen_input_ids"]]
        lr = [len(x) for x in tokenized["rejected_input_ids"]]
        # the collator pads the chosen and rejected rows of a batch to one common length
        pad = sum(2 * len(lc[b:b + 8]) * max(lc[b:b + 8] + lr[b:b + 8]) for b in range(0, len(lc), 8))
        loader = torch.utils.data.DataLoader(tokenized, batch_size=8, shuffle=False, drop_last=False,
                                             collate_fn=collate)
        cho, rej = [], []
        for batch in loader:
            rc, rr = dpo.inference_step(batch, ref_free=ref is None)
            cho += rc.float().tolist()
            rej += rr.float().tolist()
        return cho, rej, sum(lc) + sum(lr), pad

    return score_files(files, tokenizer, conv, score_style)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=["rm", "dpo"], required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--ref-model", default=None)
    ap.add_argument("--ref-free", default="avg", choices=["sum", "avg", "norm"])
    ap.add_argument("--data", required=True)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--chat-template", default="tulu")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--output", required=True)
    ap.add_argument("--timing", default=None)
    args = ap.parse_args()

    import torch
    from fastchat.conversation import get_conv_template
    from transformers import AutoTokenizer

    if args.threads:
        torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    dtype = getattr(torch, args.dtype)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    conv = get_conv_template(args.chat_template)
    files = load_items(args.data, args.limit)
    with torch.no_grad():
        run = run_rm if args.mode == "rm" else run_dpo
        results, tokens, padded = run(args, tokenizer, conv, files, dtype)
    wall = time.perf_counter() - t0
    Path(args.output).write_text(json.dumps(results, indent=1, ensure_ascii=False))
    info = {"wall_s": wall, "real_tokens": tokens, "padded_tokens": padded, "n_prompts": len(results)}
    if args.device.startswith("cuda"):
        info["peak_gpu_gib"] = torch.cuda.max_memory_allocated() / 2**30
    if args.timing:
        Path(args.timing).write_text(json.dumps(info))
    print(json.dumps(info))


if __name__ == "__main__":
    main()

"""Token ids identical to the official pipeline's, token for token, for the same tokenizer.

RM mode follows the transformers `text-classification` pipeline as the official script drives it:
the full chat text tokenized with the tokenizer's default special tokens; when the tokenizer has no
chat template, the official script sets `tokenizer.add_eos_token = True`, which (in transformers
4.51, which rewardbench pins) appends EOS only for the tokenizer classes that implement it.
DPO mode follows `rewardbench.DPOInference.tokenize_row`.

Truncation happens only in compat mode (`--compat official`), and is counted (Encoded.cut; run.json's
`truncated`). RM: 2048 tokens with the special tokens kept, from the left as run_rm.py sets it (RM-Bench,
RewardBench v1, pairs), or on the tokenizer's own `truncation_side` as run_v2.py leaves it (RewardBench
2). DPO, in every benchmark: tokenize_row's rule over a group of responses (RM-Bench: each style's
chosen/rejected pair, as its script's rows; another benchmark: a row's responses, which for
RewardBench v1 and 1x1 pairs is tokenize_row's pair). `--score-span` (inputs.spans) moves a DPO
sequence's `start` to its span.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

OFFICIAL_MAX_LENGTH = 2048
OFFICIAL_MAX_PROMPT_LENGTH = 128
# Tokenizer classes whose `add_eos_token` setter changed the output in transformers 4.51.
_ADD_EOS_CLASSES = {"LlamaTokenizer", "CodeLlamaTokenizer", "GemmaTokenizer", "GPTNeoXTokenizer", "CohereTokenizer"}


@dataclass
class Encoded:
    """One sequence. `start`: index of the first scored token (DPO: ids[start:] are the labels,
    each predicted from the position before it). `cut`: tokens removed by compat truncation."""

    ids: list[int]
    start: int = 0
    cut: int = 0


def official_tokenizer_class(tokenizer, path=None) -> str:
    """The class transformers 4.51 would build ("Fast" dropped): the one tokenizer_config.json
    names, else config.json's, else the model type's (tokenizer_loading.class_451), when the
    tokenizer is a local folder; else the class of `tokenizer`."""
    from ..models.tokenizer_loading import class_451, read_json

    name = None
    if path is not None and Path(path).is_dir():
        name = class_451(Path(path), read_json(Path(path) / "tokenizer_config.json"))
    name = name or type(tokenizer).__name__
    return name[:-4] if name.endswith("Fast") else name


def rm_appends_eos(tokenizer, tokenizer_has_template: bool, path=None) -> bool:
    """Whether the official RM flow ends every sequence with EOS for this tokenizer: it sets
    `add_eos_token = True` when there is no chat template, which only some classes honour."""
    if tokenizer_has_template or tokenizer.eos_token_id is None:
        return False
    return official_tokenizer_class(tokenizer, path) in _ADD_EOS_CLASSES


def encode_rm(tokenizer, texts: list[str], append_eos: bool, max_length: int | None = None,
              side: str = "left") -> list[Encoded]:
    """Token ids of each full text, as the official RM pipeline builds them. With `max_length`
    (compat), sequences are truncated on `side` ("left": as run_rm.py sets `truncation_side`;
    "right"), keeping the special tokens, as the tokenizer's own truncation does."""
    if side not in ("left", "right"):
        raise ValueError(f"truncation side {side!r}: expected left or right")
    eos = tokenizer.eos_token_id
    ids = tokenizer(list(texts), add_special_tokens=True, return_attention_mask=False,
                    return_token_type_ids=False)["input_ids"]
    out = []
    for text, seq in zip(texts, ids):
        seq = list(seq) + ([eos] if append_eos else [])
        cut = 0
        if max_length is not None and len(seq) > max_length:
            seq, cut = _truncate(tokenizer, text, seq, append_eos, max_length, side)
        out.append(Encoded(seq, 0, cut))
    return out


def rm_truncation(tokenizer, benchmark: str, compat: bool) -> tuple[int | None, str]:
    """(max_length, side) of the official RM flow for `benchmark`: none without compat; run_v2.py
    (reward-bench-2) truncates on the tokenizer's own side, run_rm.py (every other) from the left."""
    if not compat:
        return None, "left"
    if benchmark == "reward-bench-2":
        return OFFICIAL_MAX_LENGTH, getattr(tokenizer, "truncation_side", None) or "right"
    return OFFICIAL_MAX_LENGTH, "left"


def _truncate(tokenizer, text, seq, append_eos, max_length, side="left"):
    """Drop content tokens from `side` so that content + special tokens fit in max_length."""
    content = tokenizer(text, add_special_tokens=False)["input_ids"]
    full = seq[:-1] if append_eos else seq
    front = 0
    for front in range(len(full) - len(content) + 1):  # where the content sits among the specials
        if full[front:front + len(content)] == content:
            break
    head, tail = full[:front], full[front + len(content):] + (seq[-1:] if append_eos else [])
    keep = max(0, max_length - len(head) - len(tail))
    kept = (content[-keep:] if side == "left" else content[:keep]) if keep else []
    new = head + kept + tail
    return new, len(seq) - len(new)


def dpo_bos_eos(tokenizer) -> tuple[int, int]:
    """The official DPO flow sets pad = EOS, and BOS = EOS when the tokenizer has no BOS."""
    eos = tokenizer.eos_token_id
    bos = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else eos
    return bos, eos


def encode_dpo(tokenizer, prompt_texts: list[str], full_texts: list[list[str]], compat: bool,
               groups: list[list[int]] | None = None, after: list[list[str | None]] | None = None
               ) -> list[list[Encoded]]:
    """For each prompt, its responses' sequences, as `DPOInference.tokenize_row` builds them.

    prompt_texts[p]: the template applied to the user turn alone; full_texts[p]: the full texts of
    that prompt's responses. groups[p]: the sizes of the consecutive groups of responses that compat
    truncation treats together (tokenize_row's pair: it depends on the longer response of the
    group); None: pairs [chosen_0, rejected_0, chosen_1, rejected_1, ...], RM-Bench's layout.
    after[p][k]: the TEXT after whose last occurrence response k's scored span starts (inputs.spans),
    or None (the whole response); after None: no span.
    """
    bos, eos = dpo_bos_eos(tokenizer)
    # The official code removes the prompt text from the full text, then tokenizes prompt + rest.
    answers = [[full.replace(pt, "") for full in fulls] for pt, fulls in zip(prompt_texts, full_texts)]
    joined = [pt + a for pt, ans in zip(prompt_texts, answers) for a in ans]
    prompt_ids = tokenizer(list(prompt_texts), add_special_tokens=False)["input_ids"]
    joined_ids = iter(tokenizer(joined, add_special_tokens=False)["input_ids"])
    spans = iter(_span_starts(tokenizer, prompt_texts, answers, joined, after))
    out = []
    for p, ans in enumerate(answers):
        p_ids = list(prompt_ids[p])
        parts, rel = [], []
        for _ in ans:
            full = list(next(joined_ids))
            start = len(p_ids)
            # a tokenizer that merges across the boundary changes the prompt's last token
            if p_ids != full[:start]:
                start -= 1
            parts.append(([bos] + full[:start], full[start:] + [eos]))
            span = next(spans)
            rel.append(0 if span is None else max(0, span - start))  # where the span starts in the answer
        sizes = groups[p] if groups is not None else [2] * (len(parts) // 2) + [1] * (len(parts) % 2)
        if sum(sizes) != len(parts):
            raise ValueError(f"prompt {p}: groups {sizes} do not cover its {len(parts)} responses")
        seqs, k = [], 0
        for size in sizes:
            group = parts[k:k + size]
            cut_group = _official_truncation(group) if compat else group
            for (prompt, answer), (orig_p, orig_a), r in zip(cut_group, group, rel[k:k + size]):
                cut = len(orig_p) + len(orig_a) - len(prompt) - len(answer)
                seqs.append(Encoded(prompt + answer, len(prompt) + min(r, len(answer)), cut))
            k += size
        out.append(seqs)
    return out


def _span_starts(tokenizer, prompt_texts, answers, joined, after):
    """Per joined text (in order), the token index (among its tokens without special tokens) where its
    span starts, or None (no span, or a response without the span's TEXT)."""
    if after is None:
        return [None] * len(joined)
    from .spans import span_start

    flat = [t for per in after for t in per]
    if len(flat) != len(joined) or any(len(a) != len(b) for a, b in zip(after, answers)):
        raise ValueError("span marks do not match the responses")
    lens = [len(pt) for pt, ans in zip(prompt_texts, answers) for _ in ans]
    where = [(p, k) for p, ans in enumerate(answers) for k in range(len(ans))]
    return span_start(tokenizer, joined, lens, [a for ans in answers for a in ans], flat,
                      lambda i: f"prompt {where[i][0]}, response {where[i][1]}")


def _official_truncation(pair):
    """tokenize_row's rule: if prompt + the group's longest response exceeds 2048 tokens, keep the
    prompt's last 128 tokens; if still too long, cut responses to their first 2048 - 128."""
    longer = max(len(a) for _, a in pair)
    out = []
    for prompt, answer in pair:
        if len(prompt) + longer > OFFICIAL_MAX_LENGTH:
            prompt = prompt[-OFFICIAL_MAX_PROMPT_LENGTH:]
        if len(prompt) + longer > OFFICIAL_MAX_LENGTH:
            answer = answer[:OFFICIAL_MAX_LENGTH - OFFICIAL_MAX_PROMPT_LENGTH]
        out.append((prompt, answer))
    return out


def pack(seqs: list[Encoded]) -> dict:
    """Sequences as flat arrays, for the result store."""
    lengths = np.array([len(e.ids) for e in seqs], dtype=np.int64)
    return {"ids": np.array([t for e in seqs for t in e.ids], dtype=np.int64),
            "offsets": np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
            "starts": np.array([e.start for e in seqs], dtype=np.int64),
            "cuts": np.array([e.cut for e in seqs], dtype=np.int64)}


def unpack(a: dict) -> list[Encoded]:
    ids, off = a["ids"].tolist(), a["offsets"].tolist()
    return [Encoded(ids[off[i]:off[i + 1]], int(a["starts"][i]), int(a["cuts"][i])) for i in range(len(off) - 1)]

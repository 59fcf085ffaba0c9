"""A judge model in this process: transformers' `generate` over batches of chat requests.

Each request's messages go through the tokenizer's own chat template (or one given in its place)
with the generation prompt, and are tokenized without added special tokens, as transformers'
apply_chat_template(tokenize=True) and vLLM's chat endpoint do. Requests are grouped by what their
batch shares (greedy: max_tokens; sampling: temperature, top_p and max_tokens; not the seed), sorted
by prompt length, longest first, and cut into batches of at most `max_batch_size` rows and
`max_tokens_per_batch` padded tokens (rows x (longest prompt + max_tokens)). Rows are left-padded
(pad: the tokenizer's pad token, else EOS) with an attention mask.

Decoding is greedy for temperature 0. Otherwise each row samples from softmax(logits /
temperature) cut to its top_p nucleus (no top-k, no penalties) with its own generator seeded from
the request's seed (a fresh random seed when None): one uniform draw per step, inverse-CDF. So a
sampled request's tokens depend on its seed and its logits only, not on which requests share its
batch, its row, the batch size, an out-of-memory halving, or the process's global RNG.
Reproducible: the same requests and seeds on the same device, dtype, torch and transformers give
the same completions. Not reproducible: across devices, dtypes or versions (logits differ in their
last bits, which can flip a greedy argmax or a draw that lands at a token boundary), and batch
composition changes the logits' last bits as well (padding, batch shape), rarely a token with them.
Requests without a seed are not reproducible by design.

The model's own generation_config.json (its top_k, repetition penalty, ...) is set aside while
generating: what a request gets is what its Sampling says. (vLLM applies those defaults unless
told `--generation-config vllm`.) EOS: the tokenizer's EOS and every id the model's generation
config names EOS (judges.generation: read from the folder's generation_config.json, else its
config.json, as transformers reads them; the store key holds these ids, the generation config in
force and generate()'s arguments). A completion ends at the first EOS ("stop"; the EOS counts as a completion
token, as servers count it) or after max_tokens ("length"); its text is decoded without special
tokens and kept whole. A `<think>...</think>` block opening it (or, when the prompt itself ends with
`<think>`, the text up to `</think>`) is also returned as `reasoning`; `text` still holds it.

Out of memory in a batch: its rows are halved and each half retried (no retry as is: a long
generation that ran out of memory runs out again), and later batches keep to half the padded
tokens that failed. A single request that does not fit is a UsageError naming it: nothing is
dropped silently.
"""

from __future__ import annotations

import hashlib

import torch

from ..errors import UsageError, one_line
from ..models.device import OUT_OF_MEMORY, resolve_device, resolve_dtype
from ..models.loading import load_model, load_tokenizer
from .generation import folder_generation_config, generate_kwargs, generation_settings, neutral_config
from .requests import Completion, Request

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


def split_reasoning(text: str, prompt_text: str = "") -> str | None:
    """The reasoning of a completion that opens with a <think> block (an unclosed one: all of it),
    or, when the prompt ends with <think>, the text before </think>; else None."""
    body = text.lstrip()
    if body.startswith(THINK_OPEN):
        body = body[len(THINK_OPEN):]
        return body.split(THINK_CLOSE, 1)[0] if THINK_CLOSE in body else body
    if prompt_text.rstrip().endswith(THINK_OPEN) and THINK_CLOSE in text:
        return text.split(THINK_CLOSE, 1)[0]
    return None


class SeededSampler:
    """A logits processor that samples each row (temperature, top_p) with its own generator and
    leaves only the drawn token finite, so that greedy decoding picks it."""

    def __init__(self, seeds: list[int], temperature: float, top_p: float):
        self.generators = [torch.Generator().manual_seed(s) for s in seeds]
        self.temperature, self.top_p = temperature, top_p

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        probs = torch.softmax(scores.float() / self.temperature, dim=-1)
        if self.top_p < 1.0:  # keep the most probable tokens until their mass reaches top_p
            sorted_p, order = probs.sort(dim=-1, descending=True, stable=True)
            drop = (sorted_p.cumsum(-1) - sorted_p) >= self.top_p
            drop[:, 0] = False  # the most probable token always stays
            probs = probs.scatter(-1, order, sorted_p.masked_fill(drop, 0.0))
        cdf = probs.double().cumsum(-1)
        u = torch.cat([torch.rand(1, generator=g, dtype=torch.float64) for g in self.generators])
        u = u.to(cdf.device) * cdf[:, -1]
        picked = torch.searchsorted(cdf, u.unsqueeze(1), right=True).clamp_(max=cdf.shape[1] - 1)
        zero = probs.gather(1, picked) <= 0  # only if rounding put u at the very end
        picked = torch.where(zero, probs.argmax(-1, keepdim=True), picked)
        return torch.full_like(scores, float("-inf")).scatter_(1, picked, 0.0)


class HFBackend:
    """Generates completions for judge requests with a causal LM in this process."""

    def __init__(self, model_path: str, device: str | None = None, dtype: str | None = None,
                 max_batch_size: int = 32, max_tokens_per_batch: int | None = None,
                 trust_remote_code: bool = False, allow_pickle_weights: bool = False,
                 chat_template: str | None = None):
        dev = resolve_device(device)
        torch_dtype = resolve_dtype(dtype, dev)
        tokenizer = load_tokenizer(model_path, trust_remote_code)
        self._setup(tokenizer, model_path, chat_template, max_batch_size, max_tokens_per_batch)
        generation_config = folder_generation_config(model_path, trust_remote_code)
        model = load_model(model_path, "lm", torch_dtype, dev, trust_remote_code, allow_pickle_weights)
        self._set_model(model, generation_config)

    @classmethod
    def from_loaded(cls, model, tokenizer, path: str = "(in memory)", max_batch_size: int = 32,
                    max_tokens_per_batch: int | None = None, chat_template: str | None = None) -> "HFBackend":
        """A backend over a model and tokenizer already loaded (the model in eval mode, on its device)."""
        self = cls.__new__(cls)
        self._setup(tokenizer, path, chat_template, max_batch_size, max_tokens_per_batch)
        self._set_model(model, model.generation_config)
        return self

    def _setup(self, tokenizer, path, chat_template, max_batch_size, max_tokens_per_batch):
        if max_batch_size < 1 or (max_tokens_per_batch is not None and max_tokens_per_batch < 1):
            raise UsageError("max_batch_size and max_tokens_per_batch must be positive")
        self.path, self.tokenizer, self.model = path, tokenizer, None
        self.max_batch_size, self.max_tokens_per_batch = max_batch_size, max_tokens_per_batch
        own = getattr(tokenizer, "chat_template", None)
        if chat_template is not None:
            self.template = chat_template
            self.template_name = "given:" + hashlib.sha256(chat_template.encode()).hexdigest()[:12]
        elif isinstance(own, dict) and "default" in own:
            self.template, self.template_name = own["default"], "tokenizer"
        elif isinstance(own, str):
            self.template, self.template_name = own, "tokenizer"
        elif isinstance(own, dict):
            raise UsageError(f"judge model {path}: its tokenizer has several chat templates ({', '.join(own)}) "
                             "and none is named default: pass one with --chat-template")
        else:
            raise UsageError(f"judge model {path}: its tokenizer has no chat template, so the judge's messages "
                             "cannot be rendered: pass a Jinja chat template file with --chat-template, or use "
                             "an instruction-tuned (chat) model")
        self.oom_cap = None  # padded tokens per batch after an out-of-memory
        self.stats = {"batches": 0, "out_of_memory_halvings": 0, "generated_tokens": 0}

    def _set_model(self, model, generation_config) -> None:
        """generation_config: the one its ids come from (the folder's, as the store key reads it)."""
        self.model = model
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self.settings = generation_settings(generation_config, self.tokenizer)
        self.eos_ids, self.pad_id = self.settings["eos_token_id"], self.settings["pad_token_id"]
        if not self.eos_ids:
            raise UsageError(f"judge model {self.path}: neither its tokenizer nor its generation config names an "
                             "EOS token, so generation could not stop")
        self.vocab = model.get_input_embeddings().num_embeddings
        self.neutral = neutral_config(self.settings)

    def describe(self) -> dict:
        return {"backend": "hf", "path": self.path, "class": type(self.model).__name__,
                "dtype": str(self.dtype).removeprefix("torch."), "device": str(self.device),
                "chat_template": self.template_name}

    def prompt(self, request: Request) -> tuple[str, list[int]]:
        """The rendered prompt of a request and its token ids."""
        try:
            text = self.tokenizer.apply_chat_template([dict(m) for m in request.messages], chat_template=self.template,
                                                      tokenize=False, add_generation_prompt=True)
        except Exception as e:
            raise UsageError(f"judge model {self.path}: chat template ({self.template_name}) failed to render "
                             f"request {request.key}: {type(e).__name__}: {one_line(e, 200)}") from None
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        if not ids:
            raise UsageError(f"judge model {self.path}: request {request.key} renders to an empty prompt")
        if max(ids) >= self.vocab:
            raise UsageError(f"judge model {self.path}: token id {max(ids)} is outside the model's vocabulary of "
                             f"{self.vocab} (tokenizer and model do not match)")
        return text, ids

    def generate(self, requests: list[Request], on_done) -> None:
        """Complete every request, calling on_done(request, Completion) for each as its batch ends."""
        prompts = [self.prompt(r) for r in requests]
        groups: dict[tuple, list[int]] = {}
        for i, r in enumerate(requests):
            s = r.sampling
            groups.setdefault((s.max_tokens,) if s.temperature <= 0 else (s.max_tokens, s.temperature, s.top_p),
                              []).append(i)
        for group in groups.values():
            order = sorted(group, key=lambda i: -len(prompts[i][1]))  # longest first; ties keep input order
            new = requests[order[0]].sampling.max_tokens
            pos = 0
            while pos < len(order):
                longest = len(prompts[order[pos]][1]) + new
                budget = min(b for b in (self.max_tokens_per_batch, self.oom_cap, 1 << 62) if b is not None)
                rows = max(1, min(self.max_batch_size, budget // longest))
                self._run(requests, prompts, order[pos:pos + rows], on_done)
                pos += rows

    def _run(self, requests, prompts, rows: list[int], on_done) -> None:
        """One batch, halved on out-of-memory (outside the except block, so the failed attempt's
        tensors are freed first)."""
        try:
            completions = self._batch([requests[i] for i in rows], [prompts[i] for i in rows])
        except OUT_OF_MEMORY:
            completions = None
        if completions is None:
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
            r = requests[rows[0]]
            if len(rows) == 1:
                raise UsageError(f"judge model {self.path}: out of memory generating request {r.key} alone "
                                 f"({len(prompts[rows[0]][1])} prompt tokens, max_tokens {r.sampling.max_tokens}): "
                                 "use a smaller max_tokens or dtype, or a bigger device") from None
            padded = len(rows) * (max(len(prompts[i][1]) for i in rows) + r.sampling.max_tokens)
            self.oom_cap = max(1, padded // 2)
            self.stats["out_of_memory_halvings"] += 1
            mid = len(rows) // 2
            self._run(requests, prompts, rows[:mid], on_done)
            self._run(requests, prompts, rows[mid:], on_done)
            return
        self.stats["batches"] += 1
        for i, c in zip(rows, completions):
            on_done(requests[i], c)

    def _batch(self, batch: list[Request], prompts: list[tuple[str, list[int]]]) -> list[Completion]:
        s = batch[0].sampling
        width = max(len(ids) for _, ids in prompts)
        input_ids = torch.full((len(batch), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for r, (_, ids) in enumerate(prompts):  # left padding
            input_ids[r, width - len(ids):] = torch.as_tensor(ids, dtype=torch.long)
            mask[r, width - len(ids):] = 1
        kwargs = {}
        if s.temperature > 0:
            from transformers import LogitsProcessorList

            seeds = [r.sampling.seed if r.sampling.seed is not None else torch.Generator().seed() for r in batch]
            kwargs["logits_processor"] = LogitsProcessorList([SeededSampler(seeds, s.temperature, s.top_p)])
        saved = self.model.generation_config
        self.model.generation_config = self.neutral
        try:
            with torch.inference_mode():
                out = self.model.generate(input_ids=input_ids.to(self.device), attention_mask=mask.to(self.device),
                                          **generate_kwargs(self.settings, s), **kwargs)
        finally:
            self.model.generation_config = saved
        completions = []
        for (text_in, ids), row in zip(prompts, out[:, width:].tolist()):
            stop = next((k for k, t in enumerate(row) if t in self.eos_ids), None)
            tokens = row if stop is None else row[:stop + 1]
            text = self.tokenizer.decode(tokens if stop is None else tokens[:-1], skip_special_tokens=True)
            completions.append(Completion(text=text, reasoning=split_reasoning(text, text_in),
                                          finish_reason="length" if stop is None else "stop",
                                          prompt_tokens=len(ids), completion_tokens=len(tokens)))
            self.stats["generated_tokens"] += len(tokens)
        return completions


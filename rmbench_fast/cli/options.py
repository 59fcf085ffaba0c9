"""The options `score` and `sweep` share, built from the library's own choices and defaults
(rmbench_fast.options), and the ScoreOptions they become."""

from __future__ import annotations

from dataclasses import fields

import click

from ..engine.options import (COMPAT, DEFAULT_MAX_TOKENS, DEVICE_MAPS, DTYPES, ENGINES, LOGPROB_IMPLS, MODES, REF_FREE,
                              ScoreOptions, default, parse_max_memory)
from ..errors import UsageError


def _score_span(ctx, param, value):
    """--score-span checked when given (inputs.spans.parse: after:TEXT with TEXT not empty)."""
    from ..inputs.spans import parse

    try:
        parse(value, None)
    except UsageError as e:
        raise click.BadParameter(str(e)) from None
    return value


def _opts():
    cpu, gpu = DEFAULT_MAX_TOKENS["cpu"], DEFAULT_MAX_TOKENS["cuda"]
    return [
        click.option("--ref-model", default=None, help="DPO reference model (reward = sum log p_policy - log p_ref)."),
        click.option("--mode", type=click.Choice(MODES), default=default("mode"), show_default=True,
                     help="auto: *ForSequenceClassification -> rm, causal LM -> dpo."),
        click.option("--ref-free", type=click.Choice(REF_FREE), default=None,
                     help="DPO without a reference: sum, avg (per token; the official default) or norm "
                          "(minus the L2 norm of the token log-probs)."),
        click.option("--data", default=default("data"), show_default=True,
                     help="RM-Bench data: folder, .json/.jsonl file, or hub dataset id."),
        click.option("--tokenizer", default=None, help="Tokenizer to use instead of the model's."),
        click.option("--chat-template", default=None,
                     help="A FastChat conversation template name (tulu built in; others need the fastchat "
                          "extra), one of the tokenizer's named templates, or a Jinja file. Default: the tokenizer's "
                          "own chat template, else tulu, as the official scripts; overriding a tokenizer's own "
                          "template departs from them (warned, recorded in run.json)."),
        click.option("--dtype", type=click.Choice(DTYPES), default=None,
                     help="Model dtype [default: float32 on CPU, bfloat16 on GPU]."),
        click.option("--device", default=None, help="cpu, cuda, cuda:1, ... [default: cuda when available]."),
        click.option("--max-tokens-per-batch", type=int, default=None,
                     help=f"Padded tokens (rows x longest row) per batch [default: {gpu} on GPU, {cpu} on CPU, "
                          "where larger batches only add page faults]."),
        click.option("--max-batch-size", type=int, default=None, help="At most this many sequences per batch."),
        click.option("--compat", type=click.Choice(COMPAT), default=None,
                     help="Reproduce the official pipeline's truncation (RM: left, 2048 tokens; DPO: prompt "
                          "to its last 128 tokens, responses to 1920), its multi-label scores (the whole logits "
                          "vector, compared as a list) and, on CUDA, its precision (float16, 8-bit)."),
        click.option("--score-span", default=None, metavar="after:TEXT", callback=_score_span,
                     help="Score only what follows the last TEXT of each response (reasoning models: "
                          "after:</think>). DPO sums the log-probs of those tokens with the reasoning kept as "
                          "context; a reward model reads the response with everything up to TEXT removed. A "
                          "response without TEXT is scored whole (run.json counts them)."),
        click.option("--label-index", type=int, default=None, help="Logit column of a multi-label reward head."),
        click.option("--adapter", default=None, help="Score with this reward-model adapter (`rmbench-fast adapters` "
                     "lists them) [default: chosen from the model's name as the official scripts do, else its "
                     "architecture or auto_map; plain sequence classifiers need none]."),
        click.option("--logprob-impl", type=click.Choice(LOGPROB_IMPLS), default=default("logprob_impl"),
                     show_default=True, help="DPO log-prob path: the fused Triton kernel (GPU), its chunked "
                     "torch twin (CPU), or plain (the model's full logits). auto: triton on CUDA, torch otherwise."),
        click.option("--share-prefix/--no-share-prefix", default=None,
                     help="Causal decoders: run each prompt's shared prefix (its six sequences start with the "
                          "same templated prompt) once, and the responses on top of its KV cache. Saves the "
                          "prompt tokens (12-16% on RM-Bench); in fp32 results move by a few 1e-6 relative (the "
                          "attention is summed in another order). [default: on for DPO on the CPU for Llama, "
                          "Mistral and Qwen2, where its forwards ran 6% faster; off for reward models, whose "
                          "last-layer read-out saves more, for --compat official, other architectures, Ray, and on "
                          "GPUs, unmeasured there]"),
        click.option("--prefix-cache-mb", type=int, default=None,
                     help="Memory for shared-prefix KV caches at a time; prompts are taken in waves that fit "
                          "[default: 1024 on CPU, a tenth of the GPU's memory]."),
        click.option("--tp", type=click.IntRange(min=1), default=default("tp"), show_default=True,
                     help="Tensor parallel over N ranks this command starts (transformers' own plan; NCCL on "
                          "GPUs, one GPU a rank; gloo on CPU): for models larger than one device. With --engine "
                          "ray, every worker holds such a group (--gpus-per-worker N, or 0 on CPU workers)."),
        click.option("--trust-remote-code", is_flag=True,
                     help="Allow code shipped with the model to run (off by default)."),
        click.option("--limit", type=int, default=None, help="Only the first N prompts of each domain."),
        click.option("--domains", multiple=True, help="Only these domains (chat, code, math, safety-refuse, "
                     "safety-response, safety); repeat or separate with commas."),
        click.option("--cache-dir", default=None, help="The result store: finished work is reused and "
                     "interrupted work resumed [default: $RMBENCH_CACHE/store, ~/.cache/rmbench-fast/store]."),
        click.option("--no-cache", is_flag=True, help="Turn the result store off: compute everything."),
        click.option("--engine", type=click.Choice(ENGINES), default=default("engine"), show_default=True,
                     help="ray: spread the work over Ray workers (pip install -e '.[ray]')."),
        click.option("--ray-address", default=None, help="Ray cluster to join [default: RAY_ADDRESS, else start "
                     "a local Ray instance]."),
        click.option("--num-workers", type=int, default=default("num_workers"), show_default=True,
                     help="Ray workers (one model each)."),
        click.option("--gpus-per-worker", type=float, default=default("gpus_per_worker"), show_default=True,
                     help="GPUs per Ray worker (0: CPU workers). Above 1, each worker splits its model over its "
                          "GPUs as a tensor-parallel group: pass --tp with the same number."),
        click.option("--device-map", type=click.Choice(DEVICE_MAPS), default=None,
                     help="Place the model over the visible devices with accelerate, as the official run_rm.py "
                          "loads (auto: every GPU, then the CPU, then disk), for models larger than one device."),
        click.option("--max-memory", multiple=True, metavar="DEVICE=SIZE[,...]",
                     help="Memory per device, as accelerate takes it, e.g. 0=70GiB,cpu=200GiB (repeatable). With "
                          "--device-map: what it may place on each device; for the memory pre-flight: what the run "
                          "may count on [default: what is free]."),
        click.option("--offload-folder", default=None,
                     help="Where --device-map offloads weights to disk [default: a temporary folder per pass]."),
        click.option("--preflight/--no-preflight", default=default("preflight"), show_default=True,
                     help="Before loading, refuse a model whose weights plus the largest batch's activations do not "
                          "fit its device (naming the flags that would make it fit); run.json records the estimate "
                          "and the measured peak either way."),
        click.option("--allow-pickle-weights", is_flag=True, help="Load pickle-format weights (.bin), which can "
                     "run code; without it only safetensors load."),
        click.option("--overwrite", is_flag=True, help="Replace another run's results in the output folder."),
        click.option("--bootstrap", type=click.IntRange(min=0), default=default("bootstrap"), show_default=True,
                     help="Resamples of the prompts for the 95% intervals of every summary number (0: none)."),
        click.option("--quiet", "-q", is_flag=True, help="No progress output."),
    ]


def scoring_options(f):
    """Decorate a command with the shared options."""
    for opt in reversed(_opts()):
        f = opt(f)
    return f


def score_options(model, output, kw) -> ScoreOptions:
    """ScoreOptions from the shared options: same names, except --no-cache, --quiet, --domains and
    --max-memory (DEVICE=SIZE strings -> a dict)."""
    names = {f.name for f in fields(ScoreOptions)}
    given = {k: v for k, v in kw.items() if k in names}
    try:
        given["max_memory"] = parse_max_memory(kw.get("max_memory"))
    except ValueError as e:
        raise UsageError(f"--max-memory: {e}") from None
    given.update(model=model, output=output, domains=tuple(kw["domains"]), cache=not kw["no_cache"],
                 progress=not kw["quiet"])
    return ScoreOptions(**given)


def benchmark_options(f):
    """`score`'s choice of benchmark (engine.benchmarks)."""
    from ..engine.options import BENCHMARK_NAMES

    f = click.option("--tie-credit", type=click.FloatRange(0, 1), default=0.0, show_default=True,
                     help="--benchmark pairs: what a tie between chosen and rejected counts (0: wrong, 0.5: "
                          "half).")(f)
    return click.option("--benchmark", type=click.Choice(BENCHMARK_NAMES), default=None,
                        help="The benchmark --data holds: rm-bench, reward-bench (RewardBench v1: sections weighted "
                             "as its leaderboard), reward-bench-2 (best-of-N, Ties), pairs (your own TRL-format "
                             "preference pairs) [default: detected from the data; a line says which when it is "
                             "not RM-Bench].")(f)

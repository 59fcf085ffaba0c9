"""`rmbench-fast judge`: a generative judge (an LLM that reads two answers and names the better)
on RM-Bench's 3x3 matrix, on an OpenAI-compatible server or in this process."""

from __future__ import annotations

import click

from ..engine.options import BENCHMARK_NAMES
from ..judges.options import BACKENDS, ORDERS, VERDICTS, JudgeOptions, default


@click.command()
@click.option("--model", required=True, help="The judge: a local folder or hub id (--backend hf), or the model "
              "name the server serves (--backend openai).")
@click.option("--data", default=default("data"), show_default=True, help="The data: RM-Bench's folder, .json/.jsonl "
              "file or hub id; another benchmark's .json/.jsonl/.parquet file or folder.")
@click.option("--benchmark", type=click.Choice(BENCHMARK_NAMES), default=None,
              help="The benchmark the data holds: each comparison judged pairwise, its numbers by its own rules "
                   "[default: detected from --data, one line says which].")
@click.option("--output", "-o", default=None, help="Folder for results.json (each prompt's 3x3 cells), "
              "summary.json, judgements.jsonl (every request and answer) and run.json.")
@click.option("--backend", type=click.Choice(BACKENDS), default=None,
              help="openai: any OpenAI-compatible server (vllm serve, SGLang, transformers serve, a hosted API); "
                   "hf: transformers in this process [default: openai with --base-url, else hf].")
@click.option("--base-url", default=None, help="The server's API root, e.g. http://localhost:8000/v1.")
@click.option("--api-key-env", default=None, help="The environment variable holding the server's API key "
              "(never printed, logged or stored).")
@click.option("--concurrency", type=int, default=default("concurrency"), show_default=True,
              help="Requests in flight at once (openai).")
@click.option("--max-retries", type=int, default=default("max_retries"), show_default=True,
              help="Retries per request on 429, 5xx, dropped connections and timeouts, with backoff (openai).")
@click.option("--timeout", "timeout_s", type=float, default=default("timeout_s"), show_default=True,
              help="Seconds one attempt may take (openai).")
@click.option("--protocol", default=default("protocol"), show_default=True,
              help="Template, verdict parser and tie/invalid rules: rmbench (RM-Bench README's template, last "
                   "\\boxed{A>B}), rewardbench (rewardbench 0.1.4's [[A]]/[[B]]), rm-r1, rm-r1-reasoning, "
                   "custom (--template and --verdict-regex); reward-bench-2 only: rb2-4way (one of four, the chosen "
                   "slot drawn from --seed) or rb2-ratings (each response rated 1-10).")
@click.option("--template", default=None, help="A Jinja file over question, answer_a, answer_b (one user "
              "message; a .json file: a list of {role, content} messages).")
@click.option("--verdict-regex", default=None, help="A regex whose last match decides, by its group 'verdict' "
              "(or group 1): A, B, or tie/C/A=B.")
@click.option("--orders", type=click.Choice(ORDERS), default=default("orders"), show_default=True,
              help="both: every pair in both A/B orders; random: one order per pair, drawn with --seed.")
@click.option("--seed", type=int, default=default("seed"), show_default=True,
              help="Seeds the random orders, sampling and --invalid coin.")
@click.option("--samples", type=int, default=default("samples"), show_default=True,
              help="Answers per request (needs --temperature > 0); a cell is the mean over orders and samples.")
@click.option("--temperature", type=float, default=default("temperature"), show_default=True,
              help="0: greedy decoding.")
@click.option("--top-p", type=float, default=default("top_p"), show_default=True)
@click.option("--max-tokens", type=int, default=default("max_tokens"), show_default=True,
              help="Tokens one answer may generate (reasoning judges need thousands).")
@click.option("--tie", type=float, default=None, help="What a tie counts [default: the protocol's rule; "
              "rmbench 0, as the scalar metric's strict >].")
@click.option("--invalid", default=None, help="What an answer without a verdict counts: a number in [0, 1] "
              "or 'coin' (a fair coin from --seed) [default: the protocol's rule; rmbench 0].")
@click.option("--verdict", type=click.Choice(VERDICTS), default=default("verdict"), show_default=True,
              help="logits (hf): no decoding; read the two verdict tokens' logits after the protocol's answer "
                   "prefix; a pair is won when the chosen answer's probability, averaged over orders, exceeds 0.5. Every "
                   "benchmark, with a pairwise protocol (not rb2-4way / rb2-ratings, which decode).")
@click.option("--share-prefix/--no-share-prefix", default=False, show_default=True,
              help="--verdict logits: run each prompt's shared text (template and question) once.")
@click.option("--engine", type=click.Choice(("local", "ray")), default="local", show_default=True,
              help="--verdict logits: ray spreads the pass over Ray workers.")
@click.option("--ray-address", default=None, help="--verdict logits: the Ray cluster to join.")
@click.option("--num-workers", type=int, default=default("num_workers"), show_default=True,
              help="--verdict logits: Ray workers.")
@click.option("--gpus-per-worker", type=float, default=default("gpus_per_worker"), show_default=True,
              help="--verdict logits: GPUs per Ray worker.")
@click.option("--limit", type=int, default=None,
              help="Only the first N prompts of each domain (another benchmark: rows of each subset).")
@click.option("--domains", multiple=True, help="Only these domains (chat, code, math, safety-refuse, "
              "safety-response, safety); repeat or separate with commas.")
@click.option("--chat-template", default=None, help="hf: a Jinja chat template file replacing the tokenizer's.")
@click.option("--dtype", default=None, help="hf: model dtype [default: float32 on CPU, bfloat16 on GPU].")
@click.option("--device", default=None, help="hf: cpu, cuda, cuda:1, ... [default: cuda when available].")
@click.option("--max-batch-size", type=int, default=default("max_batch_size"), show_default=True,
              help="hf: requests per generation batch.")
@click.option("--max-tokens-per-batch", type=int, default=None, help="hf: rows x (prompt + answer) tokens per batch.")
@click.option("--trust-remote-code", is_flag=True, help="hf: allow code shipped with the model to run.")
@click.option("--allow-pickle-weights", is_flag=True, help="hf: load pickle-format weights (.bin).")
@click.option("--cache-dir", default=None, help="The result store, which keeps every generation as it arrives: "
              "a rerun asks only for what is missing [default: $RMBENCH_CACHE/store].")
@click.option("--no-cache", is_flag=True, help="Keep generations in memory only (no resume).")
@click.option("--failed-as-invalid", is_flag=True, help="Count requests the server refused for good (a 400: prompt "
              "too long, say) as answers without a verdict (--invalid) instead of stopping without results.")
@click.option("--max-invalid", "max_invalid", type=click.FloatRange(0, 1), default=None, metavar="RATE",
              help="Fail (exit status 2, nothing written) when a domain's share of answers without a verdict (cut "
                   "at --max-tokens, no verdict found, failed or refused: each counts as --invalid) is above RATE, "
                   "e.g. 0.05 [default: no limit; above 0.05 a warning names the most common cause].")
@click.option("--overwrite", is_flag=True, help="Replace another run's results in the output folder (a rerun that "
              "changes only --tie, --invalid, --verdict-regex or a --seed that draws only --invalid coins re-parses "
              "the stored answers into its own folder without it).")
@click.option("--bootstrap", type=click.IntRange(min=0), default=default("bootstrap"), show_default=True,
              help="Resamples of the prompts for the 95% intervals of every summary number (0: none).")
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
def judge(no_cache, quiet, domains, **kw):
    """Judge RM-Bench with a generative model: every (chosen_i, rejected_j) pair of every prompt.

    Per prompt a 3x3 matrix of cells, each the mean over orders and samples of 1 (chosen wins),
    --tie, 0 (rejected wins) or --invalid; hard/normal/easy, domains and overall follow the same
    formulas as `score`. Every generation is kept in the result store as it arrives: a killed run
    resumes without asking anything twice, and a changed --protocol parser, --verdict-regex, --tie
    or --invalid re-parses the stored answers without generating. `rmbench-fast accuracy` and
    `rmbench-fast plot` read the output folder as they read a score run's.

    Another benchmark (--benchmark reward-bench, reward-bench-2 or pairs, or detected from --data):
    each of its comparisons is one pairwise judgement, and its own rules make the numbers
    (summary.json as `score --benchmark` writes it); RewardBench 2 also takes --protocol rb2-4way
    and rb2-ratings (docs/judging-benchmarks.md).
    """
    from ..judges.run import judge as run_judge
    from ..judges.validity import table_lines
    from ..results.describe import about_line, run_facts
    from ..results.metrics import format_table

    o = JudgeOptions(**kw, domains=tuple(domains), cache=not no_cache, progress=not quiet)
    result = run_judge(o)
    run = result.run
    if run.get("benchmark"):
        benchmark_lines(result, o)
        return
    click.echo(format_table(result.summary, about_line(run_facts(run))))
    if run.get("verdict") == "logits":
        click.echo(logits_line(run))
        return
    click.echo("\n" + "\n".join(table_lines(run, run["invalid_rule"])))
    gen = run["generated"]
    agree = run["order_agreement"]
    click.echo(f"\n{run['asks']} verdicts ({run['requests']} requests: {run['from_store']} from the store, "
               f"{gen['requests']} generated"
               + (f" at {gen['requests_per_s']:.1f} req/s, {gen['tokens_per_s']:.0f} tokens/s" if gen.get("requests_per_s") else "")
               + f"); {position_bias(run)}; "
               + ("no pair was decided in both orders" if agree["rate"] is None else
                  f"the two orders of a pair agreed on {100 * agree['rate']:.1f}% of {agree['pairs']} pairs decided in both"))
    if o.output:
        click.echo(f"results: {o.output}/results.json, results.jsonl, summary.json, judgements.jsonl, run.json")


def position_bias(run: dict) -> str:
    """'position bias: the first answer won 52.0% of decided pairs (25)', of run.json's position_bias."""
    pb = run["position_bias"]
    if pb["first_shown_wins"] is None:
        return "position bias: no pair was decided"
    return f"position bias: the first answer won {100 * pb['first_shown_wins']:.1f}% of decided pairs ({pb['verdicts']})"


def logits_line(run: dict) -> str:
    """A logit-verdict run's counts: its asks, prompt tokens, speed and position bias."""
    speed = f"{run['tokens_per_s']:,.0f} tokens/s" if run["tokens_per_s"] else "from the result store"
    return f"\n{run['asks']} logit verdicts, {run['tokens']['prompt']:,} prompt tokens ({speed}); {position_bias(run)}"


def benchmark_lines(result, o) -> None:
    """Another benchmark's judge run: its numbers (as `score --benchmark` prints them), the answers
    without a verdict, and the run's counts."""
    from ..engine.benchmarks import table
    from ..judges.validity import table_lines

    run = result.run
    click.echo(table(result.summary))
    if run.get("verdict") == "logits":
        click.echo(logits_line(run))
    else:
        click.echo("\n" + "\n".join(table_lines(run, run["invalid_rule"])))
        bias = f"; {position_bias(run)}" if "position_bias" in run else ""
        click.echo(f"\n{run['asks']} verdicts ({run['requests']} requests: {run['from_store']} from the store, "
                   f"{run['generated']['requests']} generated){bias}")
    if o.output:
        click.echo(f"results: {o.output}/results.jsonl, summary.json, judgements.jsonl, run.json")

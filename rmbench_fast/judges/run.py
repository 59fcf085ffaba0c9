"""A generative judge on RM-Bench: data -> asks (judges.plan) -> generations (a backend, through the
journal) -> verdicts (the protocol's parser) -> cells -> the summary -> results, judgements.jsonl
and run.json."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ..errors import RmbenchError, UsageError, one_line
from ..inputs.data import load_dataset
from ..results.files import write_cell_results
from ..results.intervals import bootstrap
from ..results.metrics import summarize_cells
from ..store.atomic import atomic_open, atomic_write_json
from ..store.entries import Store
from ..store.fingerprints import sha256_text
from ..store.paths import store_root
from . import plan as planning
from .journal import Journal
from .options import JudgeOptions, check, invalid_rule, read_template, safe_url
from .protocols import get_protocol
from .requests import Sampling

log = logging.getLogger("rmbench_fast")
# options that decide a judge run's numbers: an output folder holding results of other values is
# another run's
JUDGED_OPTIONS = ("model", "data", "backend", "base_url", "protocol", "template", "verdict_regex", "orders", "seed",
                  "samples", "temperature", "top_p", "max_tokens", "tie", "invalid", "verdict", "limit", "domains",
                  "chat_template", "dtype")


@dataclass
class JudgeRun:
    samples: list
    cells: np.ndarray
    summary: dict
    run: dict


def check_output(o: JudgeOptions) -> None:
    out = Path(o.output)
    if o.overwrite or not ((out / "run.json").exists() or (out / "results.json").exists()):
        return
    try:
        before = json.loads((out / "run.json").read_text())["options"]
    except (OSError, ValueError, KeyError, TypeError):
        raise UsageError(f"--output {o.output}: holds results.json of an unknown run; pass --overwrite to replace it") from None
    now = asdict(o)
    changed = [k for k in JUDGED_OPTIONS if json.dumps(before.get(k)) != json.dumps(now.get(k))]
    if changed:
        raise UsageError(f"--output {o.output}: holds another run's results (different {', '.join(changed)}); "
                         "pass --overwrite to replace them, or choose another folder")


def hf_identity(o: JudgeOptions, store: Store) -> dict:
    """What decides an in-process judge's generations: its weights, tokenizer files and chat
    template, dtype and device, and the libraries (store.keys)."""
    from ..models.device import local_target, resolve_dtype
    from ..store.fingerprints import model_fingerprint, tokenizer_fingerprint
    from ..store.keys import device_versions, library_versions

    target = local_target(o.device)
    fp = model_fingerprint(o.model, store.hashes, content=True)
    store.hashes.save()
    template = read_template(o)
    return {"backend": "hf", "weights": fp.get("sha256"),
            "tokenizer": tokenizer_fingerprint(o.model, store.hashes),
            "chat_template": None if template is None else sha256_text(template),
            "dtype": str(resolve_dtype(o.dtype, target.device)), "device": target.device.type,
            "versions": {**library_versions(), **device_versions(target.gpu)}}


def make_backend(o: JudgeOptions):
    if o.kind == "openai":
        from .openai_backend import OpenAIBackend

        return OpenAIBackend(o.base_url, o.model, o.api_key_env, o.concurrency, o.timeout_s, o.max_retries)
    from .hf_backend import HFBackend

    template = read_template(o)
    return HFBackend(o.model, o.device, o.dtype, o.max_batch_size, o.max_tokens_per_batch, o.trust_remote_code,
                     o.allow_pickle_weights, template)


def generate(todo, journal: Journal, backend, progress: bool) -> dict:
    """Ask `backend` for every request of `todo`, each completion into the journal as it arrives."""
    from tqdm import tqdm

    t0 = time.perf_counter()
    tokens = failed = 0
    bar = tqdm(total=len(todo), unit="req", desc="judging", disable=not progress, dynamic_ncols=True)

    def on_done(request, completion):
        nonlocal tokens, failed
        journal.add(request.key, completion)
        tokens += completion.completion_tokens or 0
        failed += completion.text is None
        bar.update(1)
        dt = max(time.perf_counter() - t0, 1e-9)
        bar.set_postfix_str(f"{bar.n / dt:.1f} req/s, {tokens / dt:.0f} tok/s", refresh=False)

    try:
        backend.generate(todo, on_done)
    finally:
        bar.close()
        journal.close()
    wall = time.perf_counter() - t0
    return {"requests": len(todo), "failed": failed, "completion_tokens": tokens, "wall_s": wall,
            "requests_per_s": len(todo) / wall if wall > 0 and todo else None,
            "tokens_per_s": tokens / wall if wall > 0 and todo else None}


def judge(o: JudgeOptions) -> JudgeRun:
    """Judge every (chosen_i, rejected_j) pair of `o.data` with `o.model`; write results when
    `o.output` is set. Finished generations come from the journal in the result store."""
    t_start = time.perf_counter()
    check(o)
    protocol = get_protocol(o.protocol, o.template, o.verdict_regex)
    tie = protocol.tie if o.tie is None else o.tie
    invalid = invalid_rule(o.invalid, protocol.invalid)
    if o.output:
        check_output(o)
    samples = load_dataset(o.data, domains=o.domains, limit=o.limit)
    store = Store(store_root(o.cache_dir) if o.cache else None)
    try:
        if o.verdict == "logits":
            from .logits import judge_logits

            cells, summary, run = judge_logits(o, protocol, samples, store, t_start)
            return JudgeRun(samples, cells, summary, run)
        return _judge_text(o, protocol, samples, store, tie, invalid, t_start)
    finally:
        store.close()


def _judge_text(o, protocol, samples, store, tie, invalid, t_start) -> JudgeRun:
    backend = make_backend(o) if o.kind == "openai" else None  # hf: loaded only when there is work
    identity = backend.describe() if backend is not None else hf_identity(o, store)
    root = store.root
    if backend is not None:
        log.warning("judge %s at %s: remote weights cannot be fingerprinted; its generations are kept under the "
                    "server's URL, model name and what the server reports", o.model, safe_url(o.base_url))
    elif identity["weights"] is None:
        log.warning("judge %s: its weights could not be fingerprinted (not a local folder); generations are kept "
                    "for this run only (download it to a folder to resume)", o.model)
        root = None
    key = sha256_text(identity)
    asks = planning.plan(samples, protocol, key, o.orders, o.seed, o.samples,
                         Sampling(o.temperature, o.top_p, o.max_tokens))
    requests = planning.unique_requests(asks)
    journal = Journal(root, key)
    todo = [r for r in requests if r.key not in journal.done]
    gen = {"requests": 0, "failed": 0}
    if todo:
        gen = generate(todo, journal, backend or make_backend(o), o.progress)
    failed = [r for r in todo if journal.done.get(r.key) is None or journal.done[r.key].text is None]
    if failed and not o.failed_as_invalid:
        first = journal.done.get(failed[0].key)
        raise RmbenchError(f"{len(failed)} of {len(requests)} judge requests failed (first: "
                           f"{one_line(first.error if first else 'no answer', 200)}); nothing written: a rerun asks "
                           "them again, or pass --failed-as-invalid to count them as answers without a verdict")
    winners, values, verdicts = [], np.zeros(len(asks)), []
    for n, a in enumerate(asks):
        c = journal.done.get(a.request.key)
        v = protocol.parse(c.text if c is not None else None)
        verdicts.append(v)
        winners.append(v.winner)
        values[n] = planning.value(a, v.winner, tie, invalid, o.seed)
    cells = planning.cells(asks, values, len(samples))
    domains = [s.domain for s in samples]
    summary = summarize_cells(cells, domains, [s.subset for s in samples], [s.name for s in samples])
    summary["intervals"] = bootstrap(cells, domains, o.bootstrap)  # 95% intervals over prompts (None: --bootstrap 0)
    chars, reusable = planning.shared_prefix_chars(requests)
    run = {
        "options": {**asdict(o), "base_url": safe_url(o.base_url)}, "kind": "judge", "protocol": protocol.describe(),
        "tie": tie, "invalid": invalid, "judge": identity, "judge_key": key, "n_prompts": len(samples),
        "asks": len(asks), "requests": len(requests), "from_store": len(requests) - len(todo),
        "failed_requests": len(failed),  # counted as answers without a verdict (--failed-as-invalid)
        "journal": {"path": str(journal.path) if journal.path else None, "cut_lines_skipped": journal.cut_lines},
        "generated": gen, **planning.stats(asks, winners, domains),
        "tokens": _tokens(journal, requests),
        "prefix_cache": {"prompt_chars": chars, "reusable_prompt_chars": reusable,
                         # estimated: the prompt tokens the backend counted times the reusable characters' share
                         "reusable_prompt_tokens_estimate": _reusable_tokens(journal, requests, chars, reusable)},
        "wall_s": time.perf_counter() - t_start, "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    if o.output:
        write_cell_results(o.output, samples, cells, summary)
        write_judgements(Path(o.output) / "judgements.jsonl", samples, asks, journal, verdicts, values)
        atomic_write_json(Path(o.output) / "run.json", run)
    return JudgeRun(samples, cells, summary, run)


def _tokens(journal: Journal, requests) -> dict:
    done = [journal.done[r.key] for r in requests if r.key in journal.done]
    return {"prompt": sum(c.prompt_tokens or 0 for c in done), "completion": sum(c.completion_tokens or 0 for c in done),
            "finished_by_length": sum(c.finish_reason == "length" for c in done)}


def _reusable_tokens(journal, requests, chars, reusable) -> int | None:
    """The prompt tokens a prefix cache could reuse, estimated from the reusable characters and the
    prompt tokens the backend counted (None when it counted none)."""
    prompt = _tokens(journal, requests)["prompt"]
    return round(prompt * reusable / chars) if prompt and chars else None


def write_judgements(path: Path, samples, asks, journal: Journal, verdicts, values) -> None:
    """Every ask of the run: where it belongs, what was sent, what came back and what it counted as."""
    with atomic_open(path, "w") as f:
        for a, v, x in zip(asks, verdicts, values):
            c = journal.done.get(a.request.key)
            rec = {"prompt": samples[a.prompt].name, "domain": samples[a.prompt].domain, "chosen": a.i,
                   "rejected": a.j, "order": "chosen_first" if a.chosen_first else "rejected_first",
                   "sample": a.sample, "key": a.request.key, "messages": list(a.request.messages),
                   "sampling": a.request.sampling.as_dict(), **(c.as_dict() if c is not None else {"text": None}),
                   "verdict": v.winner, "strength": v.strength, "why": v.why, "value": float(x)}
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")

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
from . import validity
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
# of those, the ones that only re-read the stored generations: a rerun into the run's own folder that
# changes them re-parses (generating nothing) and replaces the results without --overwrite
REPARSE_OPTIONS = ("tie", "invalid", "verdict_regex")


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
    now = {**asdict(o), "base_url": safe_url(o.base_url)}  # as run.json records it: never the credentials
    reparsed = reparse_options(o)
    changed = [k for k in JUDGED_OPTIONS if json.dumps(before.get(k)) != json.dumps(now.get(k)) and k not in reparsed]
    if changed:
        raise UsageError(f"--output {o.output}: holds another run's results (different {', '.join(changed)}); "
                         "pass --overwrite to replace them, or choose another folder")


def reparse_options(o: JudgeOptions) -> tuple:
    """The judged options a rerun may change and still hold the same generations: the parser and
    scoring rules, and --seed where it draws only --invalid coins (both orders, greedy decoding)."""
    return REPARSE_OPTIONS + (("seed",) if o.orders == "both" and o.temperature == 0 else ())


def hf_identity(o: JudgeOptions, store: Store) -> dict:
    """What decides an in-process judge's generations: its weights and every other file of its
    folder (generation_config.json too), tokenizer files and chat template, dtype and device, the
    libraries (store.keys), and the generation settings in force: the EOS, pad and BOS ids drawn
    from its generation config and tokenizer, the generation config generate() runs under, and
    the model's own generation config as read (judges.generation)."""
    from ..models.device import local_target, resolve_dtype
    from ..models.loading import load_tokenizer
    from ..store.fingerprints import model_fingerprint, tokenizer_fingerprint
    from ..store.keys import device_versions, library_versions
    from .generation import config_dict, folder_generation_config, generation_settings, neutral_config

    tokenizer = load_tokenizer(o.model, o.trust_remote_code)  # a model that is not there fails here, first
    generation_config = folder_generation_config(o.model, o.trust_remote_code)
    settings = generation_settings(generation_config, tokenizer)
    target = local_target(o.device)
    fp = model_fingerprint(o.model, store.hashes, content=True)
    store.hashes.save()
    template = read_template(o)
    return {"backend": "hf", "weights": fp.get("sha256"),
            "tokenizer": tokenizer_fingerprint(o.model, store.hashes),
            "chat_template": None if template is None else sha256_text(template),
            "dtype": str(resolve_dtype(o.dtype, target.device)), "device": target.device.type,
            "versions": {**library_versions(), **device_versions(target.gpu)},
            "generation": settings, "generation_config": config_dict(neutral_config(settings)),
            "model_generation_config": config_dict(generation_config)}


def key_maker(identity: dict, backend) -> tuple[str, object]:
    """(the judge's key, key_of(messages, sampling) -> a request's store key): a hash of the judge's
    identity and everything the request is sent with (openai: its JSON body; hf: its messages,
    generate()'s arguments and the sampler's)."""
    key = sha256_text(identity)
    if identity["backend"] == "openai":
        return key, lambda messages, sampling: sha256_text("judge", key, backend.body(messages, sampling))
    from .generation import request_inputs

    settings = identity["generation"]
    return key, lambda messages, sampling: sha256_text("judge", key, request_inputs(settings, messages, sampling))


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
    root = store.root
    if o.kind == "openai":
        backend = make_backend(o)
        identity = backend.describe()  # the first probe: a server that is not there stops the run here
        log.warning("judge %s at %s: remote weights cannot be fingerprinted; its generations are kept under the "
                    "server's URL, model name and what the server reports", o.model, safe_url(o.base_url))
    else:
        backend = None  # loaded only when there is work
        identity = hf_identity(o, store)
        if identity["weights"] is None:
            backend = make_backend(o)  # everything is generated: load it now, so that its own errors come first
            log.warning("judge %s: its weights could not be fingerprinted (not a local folder); generations are kept "
                        "for this run only (download it to a folder to resume)", o.model)
            root = None
    key, key_of = key_maker(identity, backend)
    asks = planning.plan(samples, protocol, key_of, o.orders, o.seed, o.samples,
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
    winners, values, verdicts, causes = [], np.zeros(len(asks)), [], []
    for n, a in enumerate(asks):
        c = journal.done.get(a.request.key)
        v = protocol.parse(c.text if c is not None else None)
        verdicts.append(v)
        winners.append(v.winner)
        causes.append(validity.cause(c, v))
        values[n] = planning.value(a, v.winner, tie, invalid, o.seed)
    cells = planning.cells(asks, values, len(samples))
    domains = [s.domain for s in samples]
    summary = summarize_cells(cells, domains, [s.subset for s in samples], [s.name for s in samples])
    valid = validity.rates(asks, causes, domains, list(summary["domains"]))
    validity.check_max_invalid(valid, o.max_invalid)  # before anything is written
    line = validity.warning(valid, invalid)
    if line:
        log.warning("%s", line)
    summary.update(valid)
    summary["intervals"] = bootstrap(cells, domains, o.bootstrap)  # 95% intervals over prompts (None: --bootstrap 0)
    chars, reusable = planning.shared_prefix_chars(requests)
    run = {
        "options": {**asdict(o), "base_url": safe_url(o.base_url)}, "kind": "judge", "protocol": protocol.describe(),
        "tie": tie, "invalid_rule": invalid, "judge": identity, "judge_key": key, "n_prompts": len(samples),
        "asks": len(asks), "requests": len(requests), "from_store": len(requests) - len(todo),
        "failed_requests": len(failed),  # counted as answers without a verdict (--failed-as-invalid)
        "journal": {"path": str(journal.path) if journal.path else None, "cut_lines_skipped": journal.cut_lines},
        "generated": gen, **planning.stats(asks, winners), **valid,
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

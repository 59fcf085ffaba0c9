"""What every judge run shares, whatever the benchmark: the output folder's check (another run's results
need --overwrite), the judge's identity and request keys, the backend, and asking the backend for what
the journal lacks."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict
from pathlib import Path

from ..errors import RmbenchError, UsageError, one_line
from ..store.entries import Store
from ..store.fingerprints import sha256_text
from .journal import Journal
from .options import JudgeOptions, read_template, safe_url

log = logging.getLogger("rmbench_fast")
# options that decide a judge run's numbers: an output folder holding results of other values is
# another run's
JUDGED_OPTIONS = ("model", "data", "benchmark", "backend", "base_url", "protocol", "template", "verdict_regex",
                  "orders", "seed", "samples", "temperature", "top_p", "max_tokens", "tie", "invalid", "verdict", "limit",
                  "domains", "chat_template", "dtype")
# of those, the ones that only re-read the stored generations: a rerun into the run's own folder that
# changes them re-parses (generating nothing) and replaces the results without --overwrite
REPARSE_OPTIONS = ("tie", "invalid", "verdict_regex")


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


def setup_backend(o: JudgeOptions, store: Store) -> tuple:
    """(the backend or None until there is work, the judge's identity, the journal's root): a server
    is probed first (one that is not there stops the run here); a local judge without a fingerprint
    keeps its generations for this run only."""
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
    return backend, identity, root


def complete(o: JudgeOptions, requests, journal: Journal, backend) -> tuple[list, dict, list]:
    """(the requests generated now, their statistics, those that failed): every request the journal
    lacks is asked; failures stop the run (nothing written) unless --failed-as-invalid."""
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
    return todo, gen, failed


def _tokens(journal: Journal, requests) -> dict:
    done = [journal.done[r.key] for r in requests if r.key in journal.done]
    return {"prompt": sum(c.prompt_tokens or 0 for c in done), "completion": sum(c.completion_tokens or 0 for c in done),
            "finished_by_length": sum(c.finish_reason == "length" for c in done)}

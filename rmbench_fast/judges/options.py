"""What a judge run is asked to do: the options of `rmbench-fast judge`, their choices and defaults."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

from ..errors import UsageError
from ..inputs.data import HUB_DEFAULT

BACKENDS = ("hf", "openai")
ORDERS = ("both", "random")
VERDICTS = ("text", "logits")


@dataclass
class JudgeOptions:
    model: str  # a local folder or hub id (hf), or the model name a server serves (openai)
    data: str = HUB_DEFAULT
    benchmark: str | None = None  # rm-bench, reward-bench, reward-bench-2, pairs; default: detected from --data
    output: str | None = None
    backend: str | None = None  # BACKENDS; default: openai with --base-url, else hf
    base_url: str | None = None  # an OpenAI-compatible server, e.g. http://localhost:8000/v1
    api_key_env: str | None = None  # the environment variable holding the server's key
    concurrency: int = 16
    max_retries: int = 6
    timeout_s: float = 600.0
    protocol: str = "rmbench"
    template: str | None = None  # a Jinja file over question, answer_a, answer_b
    verdict_regex: str | None = None
    orders: str = "both"  # ORDERS
    seed: int = 0
    samples: int = 1
    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens: int = 4096
    tie: float | None = None  # default: the protocol's rule
    invalid: str | None = None  # a number in [0, 1] or "coin"; default: the protocol's rule
    verdict: str = "text"  # VERDICTS; logits: read the two verdict tokens' logits, no decoding (hf)
    limit: int | None = None
    domains: tuple = ()
    chat_template: str | None = None  # hf: a Jinja file replacing the tokenizer's chat template
    dtype: str | None = None
    device: str | None = None
    max_batch_size: int = 32
    max_tokens_per_batch: int | None = None
    trust_remote_code: bool = False
    allow_pickle_weights: bool = False
    # --verdict logits runs through the scalar engine: these are its options (engine.options)
    share_prefix: bool = False
    engine: str = "local"
    ray_address: str | None = None
    num_workers: int = 2
    gpus_per_worker: float = 0.0
    cache: bool = True
    cache_dir: str | None = None
    failed_as_invalid: bool = False  # requests that failed for good count as answers without a verdict
    # a domain with a larger share of answers without a verdict ends the run, nothing written (None: no limit)
    max_invalid: float | None = None
    overwrite: bool = False
    progress: bool = True
    # resamples of the prompts for summary.json's 95% intervals (results.intervals; 0: none); not one
    # of JUDGED_OPTIONS: another count gives the same cells
    bootstrap: int = 10_000

    @property
    def kind(self) -> str:
        return self.backend or ("openai" if self.base_url else "hf")


def default(name: str):
    return next(f.default for f in fields(JudgeOptions) if f.name == name)


def invalid_rule(text, protocol_default):
    """--invalid as a number in [0, 1] or "coin"; None: the protocol's rule."""
    if text is None:
        return protocol_default
    if str(text) == "coin":
        return "coin"
    try:
        v = float(text)
    except ValueError:
        raise UsageError(f"--invalid {text}: expected a number in [0, 1] or 'coin'") from None
    if not 0 <= v <= 1:
        raise UsageError(f"--invalid {text}: expected a number in [0, 1] or 'coin'")
    return v


def check(o: JudgeOptions) -> None:
    if o.kind not in BACKENDS:
        raise UsageError(f"--backend {o.backend}: expected one of {', '.join(BACKENDS)}")
    if o.kind == "openai" and not o.base_url:
        raise UsageError("--backend openai needs --base-url (an OpenAI-compatible server, e.g. http://localhost:8000/v1)")
    if o.orders not in ORDERS:
        raise UsageError(f"--orders {o.orders}: expected one of {', '.join(ORDERS)}")
    if o.verdict not in VERDICTS:
        raise UsageError(f"--verdict {o.verdict}: expected one of {', '.join(VERDICTS)}")
    if o.verdict == "logits" and o.kind != "hf":
        raise UsageError("--verdict logits reads the judge's own logits: it needs --backend hf (a model in this process)")
    if o.verdict != "logits" and (o.share_prefix or o.engine != "local"):
        raise UsageError("--share-prefix and --engine ray are for --verdict logits (which runs through the scoring "
                         "engine); generation batches on its own backend")
    if o.samples < 1:
        raise UsageError("--samples must be at least 1")
    if o.limit is not None and o.limit < 1:
        raise UsageError("--limit must be at least 1")
    if o.samples > 1 and o.verdict == "logits":
        raise UsageError("--samples is for decoded verdicts: --verdict logits reads one set of logits per request")
    if o.samples > 1 and o.temperature == 0:
        raise UsageError(f"--samples {o.samples} with greedy decoding (--temperature 0) asks the same question "
                         f"{o.samples} times for one answer: give --temperature > 0, or --samples 1")
    if o.concurrency < 1 or o.max_batch_size < 1:
        raise UsageError("--concurrency and --max-batch-size must be at least 1")
    if o.temperature < 0 or not 0 < o.top_p <= 1 or o.max_tokens < 1:
        raise UsageError("--temperature must be >= 0, --top-p in (0, 1], --max-tokens >= 1")
    if o.bootstrap < 0:
        raise UsageError(f"--bootstrap {o.bootstrap}: expected a number of resamples >= 0 (0: no intervals)")
    if o.tie is not None and not 0 <= o.tie <= 1:
        raise UsageError(f"--tie {o.tie}: expected a number in [0, 1]")
    if o.max_invalid is not None and not 0 <= o.max_invalid <= 1:
        raise UsageError(f"--max-invalid {o.max_invalid}: expected a share in [0, 1] (0.05: 5%)")


def read_template(o: JudgeOptions) -> str | None:
    """--chat-template's text (None: the tokenizer's own)."""
    if not o.chat_template:
        return None
    try:
        return Path(o.chat_template).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"--chat-template {o.chat_template}: cannot be read ({e.__class__.__name__})") from None


def safe_url(url: str | None) -> str | None:
    """A URL without the user:password@ it may carry (never recorded or logged)."""
    from urllib.parse import urlsplit, urlunsplit

    if not url:
        return url
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    netloc = (parts.hostname or "") + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))

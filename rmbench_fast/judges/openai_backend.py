"""A judge backend for any OpenAI-compatible chat server (vLLM, SGLang, TGI, transformers serve,
llama.cpp, OpenAI itself): POST {base_url}/chat/completions, `concurrency` requests in flight.

Threading: generate() runs an asyncio loop in a helper thread and calls `on_done` on the thread
that called generate(), one completion at a time, in the order they finish, so the caller can store
each at once without locks; a slow on_done never holds up the requests in flight.

Failures: a server that is not there (the connection refused, or not made, before it ever
answered: the first probe, GET /models) stops the run at once with one line naming the URL and how
to start a server. Once it has answered, 429, 408, 5xx, refused or dropped connections, timeouts
and unreadable answers are retried (exponential backoff with jitter, at least the server's
Retry-After) up to `max_retries` times per request, with a line on the log ("retrying (3/7): HTTP
503 from URL") once a request has been retrying for NOTICE_AFTER_S (at most one such line every
NOTICE_AFTER_S); then the run stops with a BackendError (one line: the URL, the status, the
server's message). 401/403/404 stop it at once (every request would fail the same way). Any other
4xx (a prompt past the context length) fails that request alone: a Completion with text None and
`error` set. The API key goes out in the Authorization header only: never in repr, describe() or a
message (where a server echoes it, it is blanked).

body() is what one request sends (model, messages, sampling, extra body): its store key is made
from it. HTTP: httpx2 (a dependency of huggingface_hub >= 2), else httpx: same API. Measured against the
`openai` package in benchmarks/judge_client.py: about 3x less client CPU per request.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import queue
import random
import threading
import time
from typing import Callable
from urllib.parse import urlsplit, urlunsplit

from ..errors import RmbenchError, UsageError, one_line
from .requests import Completion, Request
from .wire import parse_completion, retry_after_s, server_message, text_of

RETRY_STATUS = frozenset({408, 409, 425, 429})  # and every 5xx
FATAL_STATUS = frozenset({401, 403, 404})  # wrong key, no access, wrong URL or model: no request can work
RETRY_AFTER_CAP_S = 300.0
MESSAGE_CHARS = 300
NOTICE_AFTER_S = 2.0  # a request retrying this long gets a line on the log (one line per this many seconds)
log = logging.getLogger("rmbench_fast")


class BackendError(RmbenchError):
    """The server kept failing (after the retries) or refused the whole run."""


def _http():
    """httpx2 (what huggingface_hub >= 2 installs), else httpx: the same API."""
    try:
        import httpx2 as http
    except ImportError:
        try:
            import httpx as http
        except ImportError:
            raise UsageError("the openai backend needs httpx2 or httpx: pip install 'rmbench-fast[judge]'") from None
    return http


class _Fail(Exception):
    """One attempt failed: `what` for the message, retryable or not, the server's Retry-After."""

    def __init__(self, what: str, retry: bool = True, retry_after: float | None = None, status: int | None = None):
        super().__init__(what)
        self.what, self.retry, self.retry_after, self.status, self.attempts = what, retry, retry_after, status, 1


class OpenAIBackend:
    name = "openai"

    def __init__(self, base_url: str, model: str, api_key_env: str | None = None, concurrency: int = 16,
                 timeout_s: float = 600.0, max_retries: int = 6, backoff_s: float = 1.0, backoff_max_s: float = 60.0,
                 extra_body: dict | None = None):
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UsageError(f"--base-url must look like http://host:port/v1, not {one_line(base_url, 100)!r}")
        if concurrency < 1 or max_retries < 0 or timeout_s <= 0:
            raise UsageError("--concurrency must be >= 1, --max-retries >= 0 and --timeout > 0")
        netloc = parts.hostname + (f":{parts.port}" if parts.port else "")  # never user:password@
        self.base_url = urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))
        self._userinfo = (parts.username, parts.password)
        self.model, self.api_key_env, self.concurrency = model, api_key_env, concurrency
        self.timeout_s, self.max_retries = timeout_s, max_retries
        self.backoff_s, self.backoff_max_s = backoff_s, backoff_max_s
        self.extra_body = dict(extra_body or {})
        self._key = None
        if api_key_env:
            self._key = os.environ.get(api_key_env)
            if not self._key:
                raise UsageError(f"--api-key-env {api_key_env}: that environment variable is not set")
        basic = None  # the userinfo as an Authorization: Basic header carries it (a server may echo that)
        if any(self._userinfo):
            import base64

            basic = base64.b64encode(":".join(x or "" for x in self._userinfo).encode()).decode()
        self._secrets = [s for s in (self._key, *self._userinfo, basic) if s]
        self._described: dict | None = None
        self._answered = False  # whether the server ever answered (before that, no connection is retried)
        self._noticed = float("-inf")  # when the last "retrying" line was logged
        _http()  # a missing HTTP stack fails here, in one line

    def __repr__(self) -> str:
        return f"OpenAIBackend(base_url={self.base_url!r}, model={self.model!r}, concurrency={self.concurrency})"

    # ---- public ----
    def describe(self) -> dict:
        """What identifies the judge: backend, URL, model name and what GET {base_url}/models says of
        the model (id, owned_by, root; None where the server does not list it). `created` is left
        out (vLLM sets it to the time of the call), and so is max_model_len: a server restarted with
        a longer context serves the same weights, and what it generated before still holds."""
        if self._described is None:
            entry = self._run(lambda deliver: self._models())
            if entry is not None:
                entry = {k: entry[k] for k in ("id", "owned_by", "root") if entry.get(k) is not None}
            self._described = {"backend": self.name, "base_url": self.base_url, "model": self.model,
                               "server_model": entry, **({"extra_body": self.extra_body} if self.extra_body else {})}
        return dict(self._described)

    def body(self, messages, sampling) -> dict:
        """The JSON body of one chat request (None sampling values left out): what the store key is
        made from."""
        return {"model": self.model, "messages": [dict(m) for m in messages],
                **{k: v for k, v in sampling.as_dict().items() if v is not None}, **self.extra_body}

    def generate(self, requests: list[Request], on_done: Callable[[Request, Completion], None]) -> None:
        """Send every request; on_done(request, completion) on this thread as each finishes. Raises
        BackendError (after the completions that finished before it were handed over)."""
        requests = list(requests)
        if requests:
            self._run(lambda deliver: self._generate(requests, deliver), on_done)

    # ---- the event loop in a helper thread ----
    def _run(self, make, on_done=None):
        """make(deliver) -> coroutine, run on a fresh event loop in a helper thread; what it delivers
        goes to on_done here, one at a time. Returns the coroutine's result or raises its error."""
        out: queue.SimpleQueue = queue.SimpleQueue()
        state: dict = {"ready": threading.Event()}

        def thread():
            loop = asyncio.new_event_loop()
            state["task"] = task = loop.create_task(make(out.put))
            state["loop"] = loop
            state["ready"].set()
            try:
                state["result"] = loop.run_until_complete(task)
            except BaseException as e:  # noqa: BLE001 - raised again on the caller's thread
                state["error"] = e
            finally:
                loop.close()
                out.put(None)

        worker = threading.Thread(target=thread, name="openai-backend", daemon=True)
        worker.start()
        state["ready"].wait()
        try:
            while (item := out.get()) is not None:
                on_done(*item)
        finally:
            if worker.is_alive():  # on_done raised, or KeyboardInterrupt: cancel what is in flight
                try:
                    state["loop"].call_soon_threadsafe(state["task"].cancel)
                except RuntimeError:  # the loop had just finished
                    pass
            worker.join()
        if "error" in state:
            raise state["error"]
        return state.get("result")

    def _client(self):
        http = _http()
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        auth = tuple(s or "" for s in self._userinfo) if any(self._userinfo) else None
        return http.AsyncClient(headers=headers, auth=auth,  # trust_env: HTTPS_PROXY, SSL_CERT_FILE as usual
                                timeout=http.Timeout(self.timeout_s, connect=min(self.timeout_s, 30.0)),
                                limits=http.Limits(max_connections=self.concurrency,
                                                   max_keepalive_connections=self.concurrency))

    async def _models(self):
        async with self._client() as client:
            try:
                data, _ = await self._call(client, "GET", self.base_url + "/models", None)
            except _Fail as e:  # 404: a server without /models still serves
                if e.status == 404:
                    return None
                raise BackendError(f"GET {self.base_url}/models: {e.what}") from None
        for entry in data.get("data") or [] if isinstance(data, dict) else []:
            if isinstance(entry, dict) and entry.get("id") == self.model:
                return entry
        return None

    async def _generate(self, requests: list[Request], deliver):
        todo = iter(requests)
        url = self.base_url + "/chat/completions"
        async with self._client() as client:
            async def worker():
                for req in todo:
                    deliver((req, await self._complete(client, url, req)))

            tasks = [asyncio.ensure_future(worker()) for _ in range(min(self.concurrency, len(requests)))]
            try:
                await asyncio.gather(*tasks)
            finally:
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)

    async def _complete(self, client, url: str, req: Request) -> Completion:
        payload = json.dumps(self.body(req.messages, req.sampling)).encode()
        try:
            (msg, choice, usage), attempts = await self._call(client, "POST", url, payload, parse_completion)
        except _Fail as e:  # not retryable: this request alone
            return Completion(text=None, error=e.what, attempts=e.attempts)
        return Completion(text=text_of(msg.get("content")) or "",
                          reasoning=text_of(msg.get("reasoning_content")) or text_of(msg.get("reasoning")),
                          finish_reason=choice.get("finish_reason"), prompt_tokens=usage.get("prompt_tokens"),
                          completion_tokens=usage.get("completion_tokens"), attempts=attempts)

    async def _call(self, client, method: str, url: str, payload: bytes | None, parse=lambda data: data):
        """(parse(JSON answer), attempts) of one call, retried. Raises _Fail for a 4xx that is this
        request's alone, BackendError when the retries run out or the run cannot go on."""
        http = _http()
        attempt, first_failure = 0, None
        while True:
            attempt += 1
            try:
                try:
                    resp = await client.request(method, url, content=payload)
                except (http.ConnectError, http.ConnectTimeout) as e:
                    if not self._answered:  # nothing there: no retry makes a server appear
                        raise BackendError(self._not_there(e)) from None
                    raise _Fail(f"connection failed ({type(e).__name__}: {e})") from None
                except http.TimeoutException:
                    raise _Fail(f"no answer within {self.timeout_s:g} s (timeout)") from None
                except http.TransportError as e:
                    raise _Fail(f"connection failed ({type(e).__name__}: {e})") from None
                self._answered = True
                status = resp.status_code
                if status == 200:
                    try:
                        return parse(json.loads(resp.content)), attempt
                    except (ValueError, LookupError, TypeError, AttributeError):
                        raise _Fail(f"HTTP 200 with an unreadable answer: {resp.text}") from None
                what = f"HTTP {status}: {server_message(resp)}"
                if status < 500 and status not in RETRY_STATUS:
                    raise _Fail(what, retry=False, status=status)
                raise _Fail(what, retry_after=retry_after_s(resp.headers.get("retry-after")), status=status)
            except _Fail as fail:  # the secrets go before the cut: no prefix of one survives
                fail.what, fail.attempts = one_line(self._clean(fail.what), MESSAGE_CHARS), attempt
                if fail.status in FATAL_STATUS and not (fail.status == 404 and method == "GET"):
                    raise BackendError(f"{method} {url}: {fail.what}") from None
                if not fail.retry:
                    raise
                if attempt > self.max_retries:
                    raise BackendError(f"{method} {url}: {fail.what} (after {attempt} attempts)") from None
                first_failure = time.monotonic() if first_failure is None else first_failure
                self._notice(attempt, fail, url, first_failure)
                await asyncio.sleep(self._delay(attempt, fail.retry_after))

    def _notice(self, attempt: int, fail: _Fail, url: str, first_failure: float) -> None:
        """The "retrying (3/7): HTTP 503 from URL" line, once a request has been retrying for
        NOTICE_AFTER_S, at most one every NOTICE_AFTER_S for the backend."""
        now = time.monotonic()
        if now - first_failure < NOTICE_AFTER_S or now - self._noticed < NOTICE_AFTER_S:
            return
        self._noticed = now
        head = f"HTTP {fail.status}" if fail.status is not None else fail.what
        rest = fail.what[len(head) + 2:] if fail.status is not None else ""
        log.warning("retrying (%d/%d): %s from %s%s", attempt + 1, self.max_retries + 1, head, url,
                    f" ({rest})" if rest else "")

    def _not_there(self, e) -> str:
        """One line for a server that is not there: the URL, what happened, how to start one."""
        parts = urlsplit(self.base_url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        what = one_line(self._clean(f"{type(e).__name__}: {e}"), 120)
        return (f"--base-url {self._clean(self.base_url)}: no server answers there ({what}); start one first, e.g. "
                f"`vllm serve {self.model} --port {port}`, `python -m sglang.launch_server --model-path {self.model} "
                f"--port {port}` or `transformers serve {self.model} --port {port}`, or fix --base-url")

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        """Exponential backoff with jitter (half to all of backoff_s * 2^(attempt-1), capped at
        backoff_max_s), and never less than the server's Retry-After."""
        step = min(self.backoff_max_s, self.backoff_s * 2 ** (attempt - 1))
        delay = random.uniform(step / 2, step)
        return max(delay, min(retry_after, RETRY_AFTER_CAP_S)) if retry_after is not None else delay

    def _clean(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

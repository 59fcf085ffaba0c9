"""The OpenAI-compatible judge backend against real local servers: the scripted one of
tests/judge_server.py (every failure on purpose) and `transformers serve` on a tiny Llama, killed
and restarted mid-run."""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from judge_server import start_thread  # noqa: E402

from rmbench_fast.errors import UsageError  # noqa: E402
from rmbench_fast.judges.requests import Request, Sampling  # noqa: E402

if importlib.util.find_spec("httpx2") is None and importlib.util.find_spec("httpx") is None:
    pytest.skip("the openai backend needs httpx2 or httpx: pip install 'rmbench-fast[judge]'", allow_module_level=True)

from rmbench_fast.judges.openai_backend import BackendError, OpenAIBackend  # noqa: E402

KEY = "sk-PLANTED-7f3a9c1e5b2d4086"
ENV = "RMBENCH_TEST_JUDGE_KEY"
FAST = dict(backoff_s=0.01, backoff_max_s=0.05)  # retries without the waits


def req(content: str, key: str | None = None, **sampling) -> Request:
    return Request(key=key or content, messages=({"role": "system", "content": "judge"},
                                                 {"role": "user", "content": content}),
                   sampling=Sampling(**sampling))


def run(backend, requests):
    """generate(); every (request key, completion) handed over, in order, and the threads on_done ran on."""
    got, threads = [], set()

    def on_done(r, c):
        got.append((r.key, c))
        threads.add(threading.get_ident())
    backend.generate(requests, on_done)
    return got, threads


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch):
    """The backend honours HTTPS_PROXY and friends; the local servers are never behind one."""
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


@pytest.fixture
def server(monkeypatch):
    monkeypatch.setenv(ENV, KEY)
    srv = start_thread(api_key=KEY)
    yield srv
    srv.stop()


def backend(srv, **kw) -> OpenAIBackend:
    return OpenAIBackend(srv.url, "judge-test", api_key_env=ENV, **{"concurrency": 4, **FAST, **kw})


def test_every_request_answered_once(server):
    reqs = [req(f"question {i}" + (" !reasoning" if i % 5 == 0 else ""), seed=None if i % 2 else 100 + i,
                temperature=0.5, top_p=0.9, max_tokens=32) for i in range(40)]
    got, threads = run(backend(server), reqs)
    assert sorted(k for k, _ in got) == sorted(r.key for r in reqs)
    assert threads == {threading.get_ident()}  # on_done runs on the caller's thread
    assert server.max_in_flight <= 4
    for key, c in got:
        assert c.text == "A:" + key and c.error is None and c.attempts == 1 and c.finish_reason == "stop"
        assert (c.prompt_tokens, c.completion_tokens) == (len(key), len(key) + 2)
        assert c.reasoning == ("thinking about " + key if "!reasoning" in key else None)
    sent = server.bodies["question 2"]
    assert sent["model"] == "judge-test" and sent["messages"][1] == {"role": "user", "content": "question 2"}
    assert (sent["temperature"], sent["top_p"], sent["max_tokens"], sent["seed"]) == (0.5, 0.9, 32, 102)
    assert "seed" not in server.bodies["question 1"]  # None is left out


def test_retries_then_answers(server):
    plan = {"a !429x2": 3, "b !500x3": 4, "c !dropx1": 2, "d !badjsonx2": 3, "e !sleepx1:3": 2, "f": 1}
    t0 = time.monotonic()
    got, _ = run(backend(server, timeout_s=0.5), [req(k) for k in plan])
    assert time.monotonic() - t0 < 3  # the sleeper was cut at the timeout, not waited for
    assert {k: c.attempts for k, c in got} == plan
    assert all(c.text == "A:" + k for k, c in got)
    assert {k: server.attempts[k] for k in plan} == plan


def test_retry_after_is_honoured(server):
    t0 = time.monotonic()
    got, _ = run(backend(server), [req("slow down !429x1:1")])
    assert time.monotonic() - t0 >= 1.0 and got[0][1].attempts == 2


def test_a_4xx_fails_one_request_only(server):
    got, _ = run(backend(server), [req("fine 1"), req("too long !400"), req("fine 2")])
    out = dict(got)
    assert out["fine 1"].text == "A:fine 1" and out["fine 2"].text == "A:fine 2"
    bad = out["too long !400"]
    assert bad.text is None and bad.attempts == 1 and server.attempts["too long !400"] == 1
    assert bad.error == "HTTP 400: This model's maximum context length is 8 tokens. Your request had 9."


def test_retries_run_out_one_line(server):
    b = backend(server, max_retries=2, concurrency=1)
    got = []
    with pytest.raises(BackendError) as e:
        b.generate([req("ok"), req("broken !500x99"), req("never sent")], lambda r, c: got.append(r.key))
    msg = e.value.one_line()
    assert msg == str(e.value) and "\n" not in msg
    assert msg == f"POST {server.url}/chat/completions: HTTP 500: Internal error Traceback: boom (after 3 attempts)"
    assert got == ["ok"] and server.attempts["broken !500x99"] == 3 and "never sent" not in server.attempts


def test_server_gone_and_back(server):
    """The server stops after 5 answers and comes back on its port 0.5 s later: every request
    completes, once, the ones in flight by retrying."""
    port, got = server.port, []
    restarted = []

    def on_done(r, c):
        got.append(r.key)
        if len(got) == 5:
            server.stop()
            threading.Timer(0.5, lambda: restarted.append(start_thread(api_key=KEY, port=port))).start()
    b = backend(server, backoff_s=0.1, backoff_max_s=0.4, max_retries=8)
    reqs = [req(f"q{i}") for i in range(30)]
    b.generate(reqs, on_done)
    assert sorted(got) == sorted(r.key for r in reqs)
    assert restarted and restarted[0].total > 0
    restarted[0].stop()


def closed_port() -> int:
    """A loopback port nothing listens on: bound, then closed again."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_no_server_fails_fast_in_one_line():
    """A refused connection before the server ever answered is not retried (the defaults would take
    about 50 s): one line naming the URL and how to start a server, within 5 s, from the first probe
    (describe: GET /models) or from generate()."""
    port = closed_port()
    url = f"http://127.0.0.1:{port}/v1"
    for call in (lambda b: b.describe(), lambda b: b.generate([req("x")], lambda r, c: None)):
        b = OpenAIBackend(url, "judge-test")  # the default retries and backoff
        t0 = time.monotonic()
        with pytest.raises(BackendError) as e:
            call(b)
        assert time.monotonic() - t0 < 5
        msg = e.value.one_line()
        assert msg == str(e.value) and "\n" not in msg
        assert msg.startswith(f"--base-url {url}: no server answers there (ConnectError")
        for how in (f"`vllm serve judge-test --port {port}`", "sglang.launch_server", f"`transformers serve judge-test --port {port}`"):
            assert how in msg, how


def test_no_server_through_the_command_line(data_path):
    """The judge command at a closed port: exit status 2 and the one line, within 5 s, the password
    of the URL in neither."""
    from click.testing import CliRunner

    from rmbench_fast.cli.main import main

    port = closed_port()
    t0 = time.monotonic()
    out = CliRunner().invoke(main, ["judge", "--model", "judge-test", "--base-url",
                                    f"http://user:pw-secret@127.0.0.1:{port}/v1", "--data", data_path, "--limit", "1",
                                    "--no-cache", "-q"])
    assert time.monotonic() - t0 < 5
    assert out.exit_code == 2
    lines = out.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"rmbench-fast: error: --base-url http://127.0.0.1:{port}/v1: "
                                                   "no server answers there"), out.output
    assert "vllm serve" in lines[0] and "pw-secret" not in out.output


def test_a_server_gone_after_answering_is_retried(server):
    """Refused connections of a server that answered before are retried, up to --max-retries."""
    b = backend(server, max_retries=1)
    run(b, [req("first")])
    server.stop()
    with pytest.raises(BackendError, match=rf"^POST {server.url}/chat/completions: connection failed "
                                           r"\(ConnectError: .*\) \(after 2 attempts\)$"):
        b.generate([req("x")], lambda r, c: None)


def test_retrying_is_said_after_two_seconds(server, caplog):
    """503s with Retry-After 1: the retries wait for it and the request is answered; once a request
    has retried for 2 s a line says so ("retrying (n/7): HTTP 503 from URL (message)"), none before."""
    caplog.set_level(logging.WARNING, logger="rmbench_fast")
    t0 = time.monotonic()
    got, _ = run(backend(server, max_retries=6), [req("busy !503x4:1"), req("briefly !503x1")])
    assert time.monotonic() - t0 >= 4.0
    out = dict(got)
    assert out["busy !503x4:1"].attempts == 5 and out["busy !503x4:1"].text == "A:busy !503x4:1"
    assert out["briefly !503x1"].attempts == 2
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("retrying")]
    shape = re.compile(rf"retrying \((\d)/7\): HTTP 503 from {re.escape(server.url)}/chat/completions "
                       r"\(Service is loading, try again\)")
    assert lines and all(shape.fullmatch(x) for x in lines), lines
    # failures at about 0, 1, 2 and 3 s: the first line comes at the third (the 4th attempt next), and
    # at most one line every 2 s
    assert int(shape.fullmatch(lines[0]).group(1)) >= 4 and len(lines) <= 2


def test_on_done_error_stops_the_run(server):
    calls = []

    def on_done(r, c):
        calls.append(r.key)
        if len(calls) == 3:
            raise ValueError("store full")
    with pytest.raises(ValueError, match="store full"):
        backend(server).generate([req(f"q{i}") for i in range(50)], on_done)
    assert len(calls) == 3
    assert not [t for t in threading.enumerate() if t.name == "openai-backend"]


def test_describe(server, monkeypatch):
    b = backend(server)
    d = b.describe()
    assert d == {"backend": "openai", "base_url": server.url, "model": "judge-test",
                 "server_model": {"id": "judge-test", "owned_by": "judge-server", "root": "/models/judge-test"}}
    # `created` differs on every call and max_model_len with the server's settings: both are left out
    again = start_thread(api_key=KEY)
    try:
        assert backend(again).describe() == {**d, "base_url": again.url}
        assert backend(again, extra_body={"top_k": 5}).describe()["extra_body"] == {"top_k": 5}
    finally:
        again.stop()
    assert OpenAIBackend(server.url, "not-served", api_key_env=ENV).describe()["server_model"] is None


def test_usage_errors(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    with pytest.raises(UsageError, match=f"^--api-key-env {ENV}: that environment variable is not set$"):
        OpenAIBackend("http://127.0.0.1:1/v1", "m", api_key_env=ENV)
    with pytest.raises(UsageError, match="--base-url must look like"):
        OpenAIBackend("127.0.0.1:8000/v1", "m")
    with pytest.raises(UsageError, match="--concurrency"):
        OpenAIBackend("http://127.0.0.1:1/v1", "m", concurrency=0)


def test_the_key_never_leaks(server, monkeypatch, capsys, caplog):
    """Every error path with a key planted: it appears in no message, completion, repr, describe()
    or log record (httpx and httpcore log at DEBUG here)."""
    caplog.set_level(logging.DEBUG)
    seen = []
    b = backend(server, max_retries=1, timeout_s=0.3)
    seen += [repr(b), str(b), str(b.describe()), str(vars(b).get("base_url"))]
    got, _ = run(b, [req("echo it back !leak:400"), req("fine"), req("x !429x1"), req("t !sleepx1:2")])
    seen += [str(c.as_dict()) for _, c in got]
    assert dict(got)["echo it back !leak:400"].error.endswith("authorization: Bearer ***")
    for bad in ("!leak", "!500x9", "!sleepx9:2", "!dropx9", "!badjsonx9"):
        with pytest.raises(BackendError) as e:
            b.generate([req(bad)], lambda r, c: None)
        seen.append(e.value.one_line())
    assert "authorization: Bearer ***" in seen[-5]
    monkeypatch.setenv(ENV, KEY + "-wrong")  # a 401 that echoes the key sent: the run stops at once
    with pytest.raises(BackendError, match=r"HTTP 401: Incorrect API key provided: Bearer \*\*\*$") as e:
        backend(server).generate([req("q")], lambda r, c: None)
    seen.append(e.value.one_line())
    monkeypatch.setenv(ENV, KEY)
    url_key = OpenAIBackend(f"http://user:{KEY}@127.0.0.1:{server.port}/v1", "judge-test")
    seen += [repr(url_key), str(url_key.describe())]
    out = capsys.readouterr()
    seen += [out.out, out.err, caplog.text]
    assert "HTTP Request: POST" in caplog.text  # the client's log was captured
    for text in seen:
        assert KEY[:12] not in text, text


# ---- transformers serve on a tiny model ----

def _serve_available() -> str | None:
    try:
        import transformers
        from transformers.utils.import_utils import is_serve_available
    except ImportError:
        return "transformers without the serve command"
    if int(transformers.__version__.split(".")[0]) < 5:
        return "transformers serve with a preloaded model needs transformers >= 5"
    if not is_serve_available():
        return "transformers serve needs fastapi, uvicorn and openai: pip install 'rmbench-fast[judge]'"
    return None


DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # no proxy, whatever the environment


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(model: Path, port: int, log) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "transformers.cli.transformers", "serve", str(model), "--host",
                             "127.0.0.1", "--port", str(port), "--device", "cpu", "--dtype", "float32"],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"transformers serve exited {proc.returncode}: {Path(log.name).read_text()[-2000:]}")
        try:
            DIRECT.open(f"http://127.0.0.1:{port}/health", timeout=1).read()
            return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("transformers serve did not come up in 120 s")


@pytest.fixture(scope="module")
def tiny_chat_model(tmp_path_factory):
    reason = _serve_available()
    if reason:
        pytest.skip(reason)
    from rmbench_fast.tiny.models import CHAT_TEMPLATE, build_model, llama_config, save_model, train_tokenizer

    tok = train_tokenizer(["Which answer is better, A or B? The answer is A.", "judge the two answers"] * 4,
                          vocab_size=300, chat_template=CHAT_TEMPLATE)
    return save_model(build_model("lm", llama_config(len(tok), hidden=32, layers=1, heads=4), 0), tok,
                      tmp_path_factory.mktemp("judge") / "tiny-chat")


@pytest.fixture(scope="module")
def served(tiny_chat_model):
    """One transformers serve process on the tiny model for the module (the last test kills it):
    (model path, port, the log, [processes])."""
    port, log = _free_port(), open(tiny_chat_model.parent / "serve.log", "w")
    procs = [_serve(tiny_chat_model, port, log)]
    yield tiny_chat_model, port, log, procs
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    log.close()


@pytest.mark.slow  # starts transformers serve (~10 s on 2 cores, once for both tests)
def test_transformers_serve(served):
    model, port, _, _ = served
    b = OpenAIBackend(f"http://127.0.0.1:{port}/v1", str(model), concurrency=2)
    d = b.describe()
    assert d["server_model"]["id"] == str(model) and d["server_model"]["owned_by"]
    reqs = [req(f"Which is better, A or B? case {i}", max_tokens=4, seed=i) for i in range(4)]
    got, _ = run(b, reqs)
    assert sorted(k for k, _ in got) == sorted(r.key for r in reqs)
    for _, c in got:
        assert isinstance(c.text, str) and c.error is None and c.attempts == 1
        assert c.finish_reason in ("length", "stop") and c.prompt_tokens > 0 and 0 < c.completion_tokens <= 4


@pytest.mark.slow  # kills transformers serve and starts another (~15 s on 2 cores)
def test_transformers_serve_killed_and_restarted(served):
    """SIGKILL the server after 3 answers; a new one comes up on the same port: the requests in
    flight and the rest all complete, once, by retrying."""
    model, port, log, procs = served
    got = []

    def on_done(r, c):
        got.append((r.key, c))
        if len(got) == 3:
            os.killpg(procs[0].pid, signal.SIGKILL)
            procs[0].wait()
            threading.Thread(target=lambda: procs.append(_serve(model, port, log)), daemon=True).start()
    b = OpenAIBackend(f"http://127.0.0.1:{port}/v1", str(model), concurrency=3, backoff_s=0.5, backoff_max_s=4,
                      max_retries=30, timeout_s=60)
    reqs = [req(f"Which is better, A or B? case {i}", max_tokens=4) for i in range(12)]
    b.generate(reqs, on_done)
    assert sorted(k for k, _ in got) == sorted(r.key for r in reqs)
    assert all(isinstance(c.text, str) and c.error is None for _, c in got)
    assert len(procs) == 2 and procs[1].poll() is None
    assert max(c.attempts for _, c in got) > 1  # some went through the restart

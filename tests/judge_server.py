"""A scripted OpenAI-compatible chat server (stdlib only) for the judge backend's tests and benchmark.

It answers POST /v1/chat/completions by a rule on the last message's content: the reply is
"A:" + that content. Directives in the content make it misbehave on purpose, per request (counted
by content, so each request fails its own first N attempts):

    !429xN[:S]  429 with Retry-After: S (default 0) for the first N attempts
    !500xN      500 for the first N attempts (N large: always)
    !503xN[:S]  503 with Retry-After: S (default none) for the first N attempts
    !dropxN     close the connection without an answer
    !sleepxN:S  sleep S seconds before answering (past the client's timeout)
    !badjsonxN  200 with a truncated JSON body
    !400        always 400 "maximum context length exceeded"
    !leak[:S]   always status S (default 500) whose message echoes the Authorization header it got
    !reasoning  the message carries reasoning_content besides the content

With `reply` (the request's body -> text, or (text, finish_reason)) it answers by that rule instead: a judge
whose verdicts are known.
GET /v1/models lists one model with a `created` that changes every call (as vLLM's does). With
`api_key` set, a request without "Authorization: Bearer <api_key>" gets a 401 that echoes the header
it got (as real servers echo a wrong key). It counts attempts per content, keeps each content's last
request body, and records the most requests it held at once.

    start_thread(**kw) -> ScriptedServer   (serving on server.port in a daemon thread; .stop())
    python tests/judge_server.py [--port P]  (serves in this process; prints "PORT <p>" when ready)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import socket
import threading
import time
from collections import Counter

DIRECTIVE = re.compile(r"!(429|500|503|drop|sleep|badjson|400|leak|reasoning)(?:x(\d+))?(?::([\d.]+))?")
REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 429: "Too Many Requests",
           500: "Internal Server Error", 503: "Service Unavailable"}


class ScriptedServer:
    def __init__(self, model: str = "judge-test", api_key: str | None = None, port: int = 0, reply=None):
        self.model, self.api_key, self.port = model, api_key, port
        self.reply = reply  # request body -> the answer's text (a judge that follows a rule); default "A:" + content
        self.attempts: Counter = Counter()  # content -> chat requests seen
        self.bodies: dict = {}  # content -> last request body
        self.in_flight = self.max_in_flight = self.total = 0
        self.loop: asyncio.AbstractEventLoop | None = None
        self._server = None
        self._writers: set = set()

    # ---- the rules ----
    def _chat(self, body: dict, auth: str | None):
        """(status, headers, payload bytes) or ("drop",) or ("sleep", seconds, then)."""
        content = body["messages"][-1]["content"]
        if self.api_key is not None and auth != f"Bearer {self.api_key}":
            return 401, {}, _err(f"Incorrect API key provided: {auth}")
        self.attempts[content] += 1
        self.bodies[content] = body
        n = self.attempts[content]
        for m in DIRECTIVE.finditer(content):
            what, times, arg = m.group(1), int(m.group(2) or 1), m.group(3)
            if what == "400":
                return 400, {}, _err("This model's maximum context length is 8 tokens.\nYour request had 9.")
            if what == "leak":
                return int(arg or 500), {}, _err(f"error handling request with headers\nauthorization: {auth}")
            if n > times or what == "reasoning":
                continue
            if what == "429":
                return 429, {"Retry-After": arg or "0"}, _err("Rate limit reached, slow down")
            if what == "500":
                return 500, {}, _err("Internal error\n  Traceback: boom")
            if what == "503":
                return 503, {"Retry-After": arg} if arg else {}, _err("Service is loading, try again")
            if what == "drop":
                return ("drop",)
            if what == "sleep":
                return "sleep", float(arg or 5), (200, {}, self._answer(body, content))
            if what == "badjson":
                return 200, {}, b'{"id": "x", "choices": [{"message": {"content": "A:'
        return 200, {}, self._answer(body, content)

    def _answer(self, body: dict, content: str) -> bytes:
        text = "A:" + content if self.reply is None else self.reply(body)
        text, finish = text if isinstance(text, tuple) else (text, "stop")
        msg = {"role": "assistant", "content": text}
        if "!reasoning" in content:
            msg["reasoning_content"] = "thinking about " + content
        return json.dumps({"id": "c", "object": "chat.completion", "created": int(time.time()),
                           "model": body.get("model"),
                           "choices": [{"index": 0, "message": msg, "finish_reason": finish}],
                           "usage": {"prompt_tokens": len(content), "completion_tokens": len(content) + 2,
                                     "total_tokens": 2 * len(content) + 2}}).encode()

    def _models(self) -> bytes:
        return json.dumps({"object": "list", "data": [
            {"id": self.model, "object": "model", "created": int(time.time() * 1000), "owned_by": "judge-server",
             "root": f"/models/{self.model}", "parent": None, "max_model_len": 4096}]}).encode()

    # ---- HTTP/1.1 with keep-alive ----
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self._writers.add(writer)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                method, path = lines[0].split(" ")[:2]
                headers = {k.strip().lower(): v.strip() for k, v in
                           (ln.split(":", 1) for ln in lines[1:] if ":" in ln)}
                raw = await reader.readexactly(int(headers.get("content-length", 0)))
                if method == "POST" and path.endswith("/chat/completions"):
                    self.total += 1
                    self.in_flight += 1
                    self.max_in_flight = max(self.max_in_flight, self.in_flight)
                    try:
                        out = self._chat(json.loads(raw), headers.get("authorization"))
                        if out[0] == "sleep":
                            await asyncio.sleep(out[1])
                            out = out[2]
                    finally:
                        self.in_flight -= 1
                    if out[0] == "drop":
                        return
                elif method == "GET" and path.endswith("/models"):
                    out = 200, {}, self._models()
                else:
                    out = 404, {}, _err(f"no route {method} {path}")
                status, extra, payload = out
                hdr = "".join(f"{k}: {v}\r\n" for k, v in extra.items())
                writer.write(f"HTTP/1.1 {status} {REASONS.get(status, 'X')}\r\nContent-Type: application/json\r\n"
                             f"Content-Length: {len(payload)}\r\n{hdr}\r\n".encode() + payload)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            self._writers.discard(writer)
            writer.close()

    async def _start(self):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        self.port = sock.getsockname()[1]
        self._server = await asyncio.start_server(self._handle, sock=sock, backlog=1024)

    async def _close(self):
        self._server.close()
        for w in list(self._writers):
            w.close()
        await self._server.wait_closed()

    def stop(self):
        """Stop serving (the port refuses connections); open connections are closed."""
        if self.loop is not None and self._server is not None:
            asyncio.run_coroutine_threadsafe(self._close(), self.loop).result(10)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.loop = self._server = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


def _err(message: str) -> bytes:
    return json.dumps({"error": {"message": message, "type": "invalid_request_error", "code": None}}).encode()


def start_thread(**kw) -> ScriptedServer:
    """A ScriptedServer serving in a daemon thread; port=0 picks a free one (pass the old port to
    restart on it)."""
    server = ScriptedServer(**kw)
    ready = threading.Event()

    def run():
        loop = asyncio.new_event_loop()
        server.loop = loop
        loop.run_until_complete(server._start())
        ready.set()
        loop.run_forever()
        loop.close()

    threading.Thread(target=run, daemon=True, name="judge-server").start()
    if not ready.wait(10):
        raise RuntimeError("judge server did not start")
    return server


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--model", default="judge-test")
    args = ap.parse_args()

    async def main():
        server = ScriptedServer(model=args.model, port=args.port)
        await server._start()
        print(f"PORT {server.port}", flush=True)
        await asyncio.Event().wait()

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass

"""The openai judge backend's own overhead: requests/s and client CPU per request against a local
server that answers at once, next to the HTTP stacks it could have been built on.

The server (tests/judge_server.py: stdlib asyncio, a canned JSON answer) runs in its own process;
each client runs N chat requests at each concurrency in a fresh subprocess, and reports wall time
and its own CPU time (all its threads, time.process_time):

  backend         OpenAIBackend.generate on httpx2 (what it uses), on_done collecting Completions
  backend-httpx   the same on httpx 0.28 (its fallback where httpx2 is missing)
  openai          the `openai` package (AsyncOpenAI, its retries off, the same pool of workers)
  aiohttp         bare aiohttp (reference: the cheapest client at hand)
  httpx2, httpx   bare AsyncClient.post + json.loads (reference: the floor of each stack)
  judge           the whole `judge` run (rmbench_fast.judges.run.judge): N/18 prompts planned, every
                  answer journaled in a fresh store, parsed, results and judgements.jsonl written;
                  requests/s over the whole run, so it counts what the pipeline adds to the backend

A client that is not installed is skipped. The goal: >= 300 requests/s on a 2-core machine.

    python benchmarks/judge_client.py [--n 3000] [--concurrency 16 64] [--clients backend openai ...]

Results: benchmarks/results/judge-client-cpu.json (or --out).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
CLIENTS = ("backend", "judge", "backend-httpx", "openai", "aiohttp", "httpx2", "httpx")
MODULE = {"backend": "httpx2", "judge": "httpx2", "backend-httpx": "httpx", "openai": "openai", "aiohttp": "aiohttp",
          "httpx2": "httpx2", "httpx": "httpx"}
GOAL_RPS = 300


def messages(i: int) -> list:
    return [{"role": "system", "content": "You are a fair judge."},
            {"role": "user", "content": f"Question {i}: which answer is better, [[A]] or [[B]]? Say A or B."}]


def body(i: int) -> bytes:
    return json.dumps({"model": "judge-test", "messages": messages(i), "temperature": 0.0, "top_p": 1.0,
                       "max_tokens": 16}).encode()


async def pool(n: int, concurrency: int, one) -> None:
    todo = iter(range(n))

    async def worker():
        for i in todo:
            await one(i)

    await asyncio.gather(*[worker() for _ in range(concurrency)])


def run_client(client: str, url: str, n: int, concurrency: int) -> None:
    """In the child: `client` sends n requests; prints JSON {wall_s, cpu_s, done}."""
    done = []
    if client.startswith("backend"):
        from rmbench_fast.judges import openai_backend
        from rmbench_fast.judges.requests import Request, Sampling

        if client == "backend-httpx":
            import httpx
            openai_backend._http = lambda: httpx
        backend = openai_backend.OpenAIBackend(url, "judge-test", concurrency=concurrency)
        reqs = [Request(key=str(i), messages=tuple(messages(i)), sampling=Sampling(max_tokens=16)) for i in range(n)]
        go = lambda: backend.generate(reqs, lambda r, c: done.append(c.text))  # noqa: E731
    elif client == "judge":
        import tempfile

        from rmbench_fast.judges.options import JudgeOptions
        from rmbench_fast.judges.run import judge

        tmp = Path(tempfile.mkdtemp(prefix="judge-bench-"))
        prompts = max(1, n // 18)  # 18 asks per prompt (9 pairs, both orders)
        items = [{"id": i, "prompt": f"Question {i}?", "chosen": [f"good {i}.{k}" for k in range(3)],
                  "rejected": [f"bad {i}.{k}" for k in range(3)]} for i in range(prompts)]
        (tmp / "data.json").write_text(json.dumps([dict(it, domain="chat") for it in items]))
        o = JudgeOptions(model="judge-test", base_url=url, data=str(tmp / "data.json"), output=str(tmp / "out"),
                         cache_dir=str(tmp / "store"), concurrency=concurrency, max_tokens=16, progress=False)
        go = lambda: done.extend(range(judge(o).run["generated"]["requests"]))  # noqa: E731
    elif client == "openai":
        import openai

        async def main():
            http = openai.DefaultAsyncHttpxClient(limits=__import__("httpx2").Limits(
                max_connections=concurrency, max_keepalive_connections=concurrency))
            api = openai.AsyncOpenAI(base_url=url, api_key="none", max_retries=0, http_client=http)

            async def one(i):
                r = await api.chat.completions.create(model="judge-test", messages=messages(i), temperature=0.0,
                                                      top_p=1.0, max_tokens=16)
                done.append(r.choices[0].message.content)
            await pool(n, concurrency, one)
            await api.close()
        go = lambda: asyncio.run(main())  # noqa: E731
    elif client == "aiohttp":
        import aiohttp

        async def main():
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as s:
                async def one(i):
                    async with s.post(url + "/chat/completions", data=body(i),
                                      headers={"Content-Type": "application/json"}) as r:
                        done.append(json.loads(await r.read())["choices"][0]["message"]["content"])
                await pool(n, concurrency, one)
        go = lambda: asyncio.run(main())  # noqa: E731
    else:
        http = __import__(client)

        async def main():
            limits = http.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
            async with http.AsyncClient(limits=limits, timeout=600, trust_env=False) as c:
                async def one(i):
                    r = await c.post(url + "/chat/completions", content=body(i),
                                     headers={"Content-Type": "application/json"})
                    done.append(json.loads(r.content)["choices"][0]["message"]["content"])
                await pool(n, concurrency, one)
        go = lambda: asyncio.run(main())  # noqa: E731
    t0, c0 = time.perf_counter(), time.process_time()
    go()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(json.dumps({"wall_s": wall, "cpu_s": cpu, "done": len(done)}))


def installed(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[16, 64])
    ap.add_argument("--clients", nargs="+", default=list(CLIENTS), choices=CLIENTS)
    ap.add_argument("--rounds", type=int, default=1, help="runs per cell; the median is reported")
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "judge-client-cpu.json"))
    ap.add_argument("--child", nargs=4, metavar=("CLIENT", "URL", "N", "CONCURRENCY"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return run_client(args.child[0], args.child[1], int(args.child[2]), int(args.child[3]))

    server = subprocess.Popen([sys.executable, str(REPO / "tests" / "judge_server.py")], stdout=subprocess.PIPE,
                              text=True)
    rows, skipped = [], []
    try:
        url = f"http://127.0.0.1:{int(server.stdout.readline().split()[1])}/v1"
        for client in args.clients:
            if not installed(MODULE[client]):
                skipped.append(f"{client}: {MODULE[client]} is not installed")
                continue
            n = args.n // 18 * 18 if client == "judge" else args.n  # whole prompts
            for conc in args.concurrency:
                runs = []
                for _ in range(args.rounds):
                    out = subprocess.run([sys.executable, __file__, "--child", client, url, str(n), str(conc)],
                                         capture_output=True, text=True, check=True)
                    runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
                    assert runs[-1]["done"] == n, runs[-1]
                wall = statistics.median(r["wall_s"] for r in runs)
                cpu = statistics.median(r["cpu_s"] for r in runs)
                row = {"client": client, "concurrency": conc, "N": n, "wall_s": wall,
                       "requests_per_s": n / wall, "client_cpu_ms_per_request": 1000 * cpu / n,
                       "runs": runs}
                rows.append(row)
                print(f"{client:14s} concurrency {conc:3d}: {row['requests_per_s']:7.0f} requests/s, "
                      f"client CPU {row['client_cpu_ms_per_request']:.2f} ms/request", flush=True)
    finally:
        server.kill()
        server.wait()
    versions = {}
    for mod in ("httpx2", "httpx", "openai", "aiohttp"):
        try:
            versions[mod] = __import__(mod).__version__
        except ImportError:
            versions[mod] = None
    result = {"benchmark": "judge_client", "device": "cpu",
              "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                          "python": platform.python_version(), "load_average_1m": os.getloadavg()[0]},
              "versions": versions, "goals": {"requests_per_s": GOAL_RPS}, "rows": rows, "skipped": skipped}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

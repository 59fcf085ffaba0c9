"""`rmbench-fast judge` end to end against a real local HTTP server (tests/judge_server.py) whose
judge follows a known rule: the cells, the summary and run.json's statistics against the same rule
computed here independently of the project; a run killed with SIGKILL and resumed asks nothing
twice; a changed parser, tie or invalid rule re-parses and generates nothing."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from rmbench_fast.inputs.data import load_dataset
from rmbench_fast.judges.options import JudgeOptions
from rmbench_fast.judges.run import judge

judge_server = pytest.importorskip("judge_server")


def need_http():
    pytest.importorskip("httpx2", reason="the openai backend needs httpx2 (pip install -e '.[judge]')")

A = re.compile(r"<\|The Start of Assistant A's Answer\|>\n(.*)\n<\|The End of Assistant A's Answer\|>", re.S)
B = re.compile(r"<\|The Start of Assistant B's Answer\|>\n(.*)\n<\|The End of Assistant B's Answer\|>", re.S)


def rule(a: str, b: str):
    """The test judge: the longer answer wins, equal lengths tie, and when the two lengths sum to a
    multiple of 5 it gives no verdict."""
    if (len(a) + len(b)) % 5 == 0:
        return None
    return "A" if len(a) > len(b) else "B" if len(b) > len(a) else "tie"


def reply(body):
    text = body["messages"][-1]["content"]
    a, b = A.search(text).group(1), B.search(text).group(1)
    w = rule(a, b)
    if w in ("A", "B") and (body.get("seed") or 0) % 2:  # sampled answers with an odd seed: the other one
        w = "B" if w == "A" else "A"
    # a verdict quoted in the reasoning before the final one: the last \boxed decides
    pre = "<think>Maybe \\boxed{B>>A}? No, let me compare.</think>\n"
    if w is None:
        return "<think>Let me compare.</think>\nBoth are fine, I cannot decide."
    return pre + "Final verdict: " + {"A": "\\boxed{A>B}", "B": "\\boxed{B>>A}", "tie": "\\boxed{A=B}"}[w]


def expected_cells(samples, tie, invalid):
    """Each cell: the mean over both orders of the rule's verdict for chosen i against rejected j."""
    out = np.zeros((len(samples), 3, 3))
    for p, s in enumerate(samples):
        for i in range(3):
            for j in range(3):
                vals = []
                for a, b, chosen in ((s.chosen[i], s.rejected[j], "A"), (s.rejected[j], s.chosen[i], "B")):
                    w = rule(a, b)
                    vals.append(invalid if w is None else tie if w == "tie" else float(w == chosen))
                out[p, i, j] = np.mean(vals)
    return out


def official_summary(cells, domains):
    """hard / normal / easy / avg per domain (safety pooled) and overall, as the formulas read."""
    pooled = {"safety-refuse": "safety", "safety-response": "safety"}
    out = {}
    for d in ("chat", "math", "code", "safety"):
        sel = [p for p, dom in enumerate(domains) if pooled.get(dom, dom) == d]
        if not sel:
            continue
        m = cells[sel].mean(axis=0)
        hard, normal, easy = m[np.triu_indices(3, 1)].mean(), np.diag(m).mean(), m[np.tril_indices(3, -1)].mean()
        out[d] = (hard, normal, easy, (hard + normal + easy) / 3)
    return out, np.mean([v[3] for v in out.values()])


@pytest.fixture
def server():
    need_http()
    s = judge_server.start_thread(reply=reply)
    yield s
    s.stop()


def options(server, data, out, cache, **kw):
    return JudgeOptions(model="judge-test", data=data, output=str(out), base_url=server.url, cache_dir=str(cache),
                        limit=2, progress=False, **kw)


def test_cells_and_summary_follow_the_rule(server, data_path, tmp_path):
    run = judge(options(server, data_path, tmp_path / "out", tmp_path / "store"))
    samples = load_dataset(data_path, limit=2)
    want = expected_cells(samples, tie=0.0, invalid=0.0)  # the rmbench preset: tie 0, invalid 0
    assert np.array_equal(run.cells, want)
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert np.array_equal(np.array([r["cells"] for r in results]), want)
    doms, overall = official_summary(want, [s.domain for s in samples])
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    for d, (hard, normal, easy, avg) in doms.items():
        got = summary["domains"][d]
        assert np.allclose([got["hard"], got["normal"], got["easy"], got["avg"]], [hard, normal, easy, avg], atol=1e-12)
    assert summary["overall"] == pytest.approx(overall, abs=1e-12)
    # run.json: every pair in both orders, each request once; the statistics from the rule
    r = json.loads((tmp_path / "out" / "run.json").read_text())
    n = len(samples) * 18
    assert r["asks"] == n and r["generated"]["requests"] == r["requests"] and r["from_store"] == 0
    verdicts = [rule(a, b) for s in samples for i in range(3) for j in range(3)
                for a, b in ((s.chosen[i], s.rejected[j]), (s.rejected[j], s.chosen[i]))]
    assert r["invalid"] == sum(v is None for v in verdicts)
    picked = [v for v in verdicts if v in ("A", "B")]
    assert r["position_bias"]["first_shown_wins"] == pytest.approx(sum(v == "A" for v in picked) / len(picked))
    assert r["order_agreement"]["rate"] == 1.0  # the rule does not look at positions
    lines = (tmp_path / "out" / "judgements.jsonl").read_text().splitlines()
    assert len(lines) == n
    first = json.loads(lines[0])
    assert first["text"].startswith("<think>") and first["verdict"] in ("A", "B", "tie", None)
    assert set(first) >= {"messages", "text", "reasoning", "finish_reason", "prompt_tokens", "completion_tokens",
                          "verdict", "strength", "value", "order"}
    # `accuracy` reads the cell results as it reads scores
    from click.testing import CliRunner

    from rmbench_fast.cli.main import main

    out = CliRunner().invoke(main, ["accuracy", str(tmp_path / "out"), "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["overall"] == summary["overall"]


def test_rules_reparse_without_generating(server, data_path, tmp_path):
    judge(options(server, data_path, tmp_path / "a", tmp_path / "store"))
    sent = server.total
    run = judge(options(server, data_path, tmp_path / "b", tmp_path / "store", tie=0.5, invalid="0.5"))
    assert server.total == sent and run.run["from_store"] == run.run["requests"]
    samples = load_dataset(data_path, limit=2)
    assert np.array_equal(run.cells, expected_cells(samples, tie=0.5, invalid=0.5))
    coin = judge(options(server, data_path, tmp_path / "c", tmp_path / "store", invalid="coin", seed=3))
    again = judge(options(server, data_path, tmp_path / "d", tmp_path / "store", invalid="coin", seed=3))
    assert server.total == sent and np.array_equal(coin.cells, again.cells)
    # a regex that reads only "significantly better" verdicts: its last match is B>>A (the final verdict, or
    # the one quoted in every answer's reasoning), so B always wins, where the rule gave any verdict
    strict = judge(options(server, data_path, tmp_path / "e", tmp_path / "store",
                           verdict_regex=r"\\boxed\{(?P<verdict>[AB])>>[AB]\}"))
    assert server.total == sent
    assert strict.run["invalid"] == run.run["invalid"] and strict.run["ties"] == 0
    assert strict.run["position_bias"]["first_shown_wins"] == 0.0


def test_random_orders_are_seeded(server, data_path, tmp_path):
    one = judge(options(server, data_path, tmp_path / "a", tmp_path / "store", orders="random", seed=1))
    assert one.run["asks"] == one.run["n_prompts"] * 9
    two = judge(options(server, data_path, tmp_path / "b", tmp_path / "store", orders="random", seed=1))
    assert np.array_equal(one.cells, two.cells) and two.run["from_store"] == two.run["requests"]
    lines = [json.loads(x) for x in (tmp_path / "a" / "judgements.jsonl").read_text().splitlines()]
    orders = {x["order"] for x in lines}
    assert orders == {"chosen_first", "rejected_first"}


def run_requests(tmp_path, data_path) -> int:
    return len(load_dataset(data_path, limit=2)) * 18  # distinct here: no two pairs hold the same texts


@pytest.mark.slow
def test_sigkill_then_resume_asks_nothing_twice(data_path, tmp_path):
    """The CLI killed mid-run: the rerun sends only what the first did not finish (and what was in
    flight when it died, at most --concurrency requests)."""
    need_http()
    slow = judge_server.start_thread(reply=lambda body: (time.sleep(0.05), reply(body))[1])
    try:
        cmd = [sys.executable, "-m", "rmbench_fast", "judge", "--model", "judge-test", "--base-url", slow.url,
               "--data", data_path, "--limit", "2", "--output", str(tmp_path / "out"), "--cache-dir",
               str(tmp_path / "store"), "--concurrency", "4", "-q"]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.time() + 60
        while slow.total < 40 and time.time() < deadline:
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        journal = next((tmp_path / "store" / "judgements").glob("*.jsonl"))
        kept = len([x for x in journal.read_text().splitlines() if x.strip()])
        assert 0 < kept < run_requests(tmp_path, data_path)
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        run = json.loads((tmp_path / "out" / "run.json").read_text())
        assert run["from_store"] == kept
        assert run["generated"]["requests"] == run["requests"] - kept
        # sent twice: only what was in flight when the first run died (at most --concurrency)
        assert sum(slow.attempts.values()) - len(slow.attempts) <= 4
        assert len(slow.attempts) == run["requests"]  # every request asked, the finished ones once
    finally:
        slow.stop()


def test_hf_backend_through_the_command_line(tmp_path, data_path):
    """A tiny in-process judge: its answers are noise (all invalid, so every cell is the invalid value),
    but the pipeline runs end to end, keys its generations by the weights and a rerun loads nothing."""
    from click.testing import CliRunner

    from rmbench_fast.cli.main import main
    from rmbench_fast.tiny.models import CHAT_TEMPLATE, build_model, llama_config, save_model, train_tokenizer

    tok = train_tokenizer(["a judge reads two answers"] * 5, vocab_size=300, chat_template=CHAT_TEMPLATE)
    model = save_model(build_model("lm", llama_config(vocab_size=len(tok), hidden=32, layers=1, heads=4), 0), tok,
                       tmp_path / "judge")
    args = ["judge", "--model", str(model), "--data", data_path, "--limit", "1", "--domains", "chat",
            "--max-tokens", "3", "--cache-dir", str(tmp_path / "store"), "--invalid", "0.25", "-q"]
    first = CliRunner().invoke(main, args + ["--output", str(tmp_path / "a")])
    assert first.exit_code == 0, first.output
    run = json.loads((tmp_path / "a" / "run.json").read_text())
    assert run["judge"]["backend"] == "hf" and len(run["judge"]["weights"]) == 64
    assert run["generated"]["requests"] == run["requests"] == 18 and run["tokens"]["completion"] > 0
    cells = np.array([r["cells"] for r in json.loads((tmp_path / "a" / "results.json").read_text())])
    assert cells.shape == (1, 3, 3) and run["invalid"] == 18 and np.all(cells == 0.25)
    again = CliRunner().invoke(main, args + ["--output", str(tmp_path / "b")])
    assert again.exit_code == 0, again.output
    run = json.loads((tmp_path / "b" / "run.json").read_text())
    assert run["from_store"] == 18 and run["generated"]["requests"] == 0
    plotted = CliRunner().invoke(main, ["plot", str(tmp_path / "b")])
    assert plotted.exit_code == 0, plotted.output
    assert (tmp_path / "b" / "report.md").is_file()


@pytest.mark.parametrize("share", [False, True])
def test_logit_verdicts_against_a_plain_forward(tmp_path, data_path, share):
    """--verdict logits: each ask's prompt plus the answer prefix, the verdict letters' logits at the
    last position; against a plain whole-model forward and a softmax over the two, written here."""
    import torch

    from rmbench_fast.judges.protocols import get_protocol
    from rmbench_fast.tiny.models import CHAT_TEMPLATE, build_model, llama_config, save_model, train_tokenizer

    samples = load_dataset(data_path, limit=1, domains=("chat", "math"))
    texts = [s.prompt for s in samples] + [r for s in samples for r in s.chosen + s.rejected]
    tok = train_tokenizer(texts + ["\\boxed{A>B} [[B]]"], vocab_size=400, chat_template=CHAT_TEMPLATE)
    model = build_model("lm", llama_config(vocab_size=len(tok), hidden=32, layers=2, heads=4), 3)
    path = save_model(model, tok, tmp_path / "judge")
    o = JudgeOptions(model=str(path), data=data_path, domains=("chat", "math"), limit=1, verdict="logits",
                     output=str(tmp_path / "out"), cache_dir=str(tmp_path / "store"), share_prefix=share,
                     max_tokens_per_batch=4096, progress=False)
    run = judge(o)
    protocol = get_protocol("rmbench")
    model.eval()
    a_id, b_id = tok.convert_tokens_to_ids("A"), tok.convert_tokens_to_ids("B")
    want = np.zeros((len(samples), 3, 3))
    probs = []
    for p, s in enumerate(samples):
        for i in range(3):
            for j in range(3):
                ps = []
                for first in (True, False):
                    a, b = (s.chosen[i], s.rejected[j]) if first else (s.rejected[j], s.chosen[i])
                    text = tok.apply_chat_template(protocol.messages(s.prompt, a, b), tokenize=False,
                                                   add_generation_prompt=True) + "\\boxed{"
                    ids = tok(text, add_special_tokens=False)["input_ids"]
                    with torch.no_grad():
                        last = model(torch.tensor([ids])).logits[0, -1].double()
                    p_a = torch.softmax(last[[a_id, b_id]], 0)[0].item()
                    ps.append(p_a if first else 1 - p_a)
                    probs.append(ps[-1])
                want[p, i, j] = float(np.mean(ps) > 0.5)
    assert run.run["verdict_tokens"] == {"A": a_id, "B": b_id}
    assert np.array_equal(run.cells, want)
    lines = [json.loads(x) for x in (tmp_path / "out" / "judgements.jsonl").read_text().splitlines()]
    assert np.allclose([x["p_chosen"] for x in lines], probs, atol=1e-5)
    assert run.run["pass"]["cached"] is False and (run.run["tokens"]["shared_prefix_saved"] > 0) == share


def test_samples_are_seeded_and_averaged(server, data_path, tmp_path):
    """--samples 3 at a temperature: three requests per ask, each seeded from the request itself; the
    test judge answers the other way for odd seeds it receives, so each cell is the mean of the rule's
    verdicts under the seeds judgements.jsonl records. Different prompts at the same sample index have different seeds,
    and a rerun sends every request with the seed it had."""
    run = judge(options(server, data_path, tmp_path / "a", tmp_path / "store", samples=3, temperature=0.7))
    samples = load_dataset(data_path, limit=2)
    assert run.run["requests"] == len(samples) * 18 * 3
    lines = [json.loads(x) for x in (tmp_path / "a" / "judgements.jsonl").read_text().splitlines()]
    seed_of = {(x["prompt"], x["chosen"], x["rejected"], x["order"], x["sample"]): x["sampling"]["seed"] for x in lines}
    assert len(seed_of) == len(lines) == len(set(seed_of.values()))  # no two requests share a seed
    for k in range(3):  # the same sample index: one seed per prompt, not one per index
        assert len({seed_of[(s.name, 0, 0, "chosen_first", k)] for s in samples}) == len(samples)
    assert all(0 <= v < 2 ** 31 for v in seed_of.values())
    want = np.zeros((len(samples), 3, 3))
    for p, s in enumerate(samples):
        for i in range(3):
            for j in range(3):
                vals = []
                for a, b, chosen, order in ((s.chosen[i], s.rejected[j], "A", "chosen_first"),
                                            (s.rejected[j], s.chosen[i], "B", "rejected_first")):
                    for k in range(3):
                        w = rule(a, b)
                        if w in ("A", "B") and seed_of[(s.name, i, j, order, k)] % 2:
                            w = "B" if w == "A" else "A"
                        vals.append(0.0 if w in (None, "tie") else float(w == chosen))
                want[p, i, j] = np.mean(vals)
    assert np.allclose(run.cells, want, atol=1e-12)
    assert 0 < sum(v % 2 for v in seed_of.values()) < len(seed_of)  # both kinds of seed: the flip is exercised
    again = judge(options(server, data_path, tmp_path / "b", tmp_path / "other-store", samples=3, temperature=0.7))
    assert again.run["generated"]["requests"] == again.run["requests"]  # asked again, not read back
    lines = [json.loads(x) for x in (tmp_path / "b" / "judgements.jsonl").read_text().splitlines()]
    assert {(x["prompt"], x["chosen"], x["rejected"], x["order"], x["sample"]): x["sampling"]["seed"]
            for x in lines} == seed_of
    assert np.array_equal(again.cells, run.cells)
    other = judge(options(server, data_path, tmp_path / "c", tmp_path / "store", samples=3, temperature=0.7, seed=1))
    assert other.run["from_store"] == 0  # another --seed: other seeds for every request


def test_failed_requests_stop_the_run_unless_counted(server, tmp_path):
    """A request the server refuses for good (400) fails that request; the run writes nothing and
    says so in one line, unless --failed-as-invalid; the rerun asks only the failed ones."""
    from click.testing import CliRunner

    from rmbench_fast.cli.main import main

    items = [{"id": k, "prompt": f"Question {k}?", "chosen": [f"good {k}", f"fine {k}", f"right {k}"],
              "rejected": [f"bad {k}", "wrong" + (" !400" if k == 1 else ""), f"off {k}"], "domain": "chat"}
             for k in range(2)]
    data = tmp_path / "data.json"
    data.write_text(json.dumps(items))
    args = ["judge", "--model", "judge-test", "--base-url", server.url, "--data", str(data), "--cache-dir",
            str(tmp_path / "store"), "--output", str(tmp_path / "out"), "-q"]
    out = CliRunner().invoke(main, args)
    assert out.exit_code == 2 and "6 of 36 judge requests failed" in out.output and "400" in out.output
    assert not (tmp_path / "out" / "results.json").exists()
    sent = server.total
    out = CliRunner().invoke(main, args + ["--failed-as-invalid"])
    assert out.exit_code == 0, out.output
    assert server.total == sent + 6  # only the failed ones again
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert run["failed_requests"] == 6 and run["from_store"] == 30
    cells = json.loads((tmp_path / "out" / "results.json").read_text())[1]["cells"]
    assert [cells[i][1] for i in range(3)] == [0.0, 0.0, 0.0]  # rejected 1 of prompt 1: invalid counts 0


def test_no_secret_reaches_files_or_logs(data_path, tmp_path, monkeypatch, caplog):
    """The key (--api-key-env) and a password in --base-url appear in no output file, journal, error
    or log line, even from a server that echoes what it got."""
    from rmbench_fast.errors import RmbenchError

    need_http()
    monkeypatch.setenv("JUDGE_KEY", "sk-very-secret-123")
    caplog.set_level("DEBUG")
    texts = []
    for k, (key_env, user) in enumerate([("JUDGE_KEY", ""), (None, "alice:pw-hidden-456@")]):
        srv = judge_server.start_thread(reply=reply, api_key="sk-very-secret-123" if key_env else None)
        try:
            o = JudgeOptions(model="judge-test", data=data_path, limit=1, domains=("chat",),
                             base_url=srv.url.replace("http://", "http://" + user), api_key_env=key_env,
                             output=str(tmp_path / f"out{k}"), cache_dir=str(tmp_path / "store"), progress=False)
            judge(o)
            run = json.loads((tmp_path / f"out{k}" / "run.json").read_text())
            assert run["options"]["base_url"] == srv.url
        finally:
            srv.stop()
        # the server now refuses every request and echoes the header it got
        bad = judge_server.start_thread(reply=reply, api_key="something-else")
        try:
            with pytest.raises(RmbenchError) as e:
                judge(JudgeOptions(model="judge-test", data=data_path, limit=1, domains=("chat",), max_retries=0,
                                   base_url=bad.url.replace("http://", "http://" + user), api_key_env=key_env,
                                   cache_dir=str(tmp_path / "other"), progress=False))
            texts.append(str(e.value))
        finally:
            bad.stop()
    texts += [p.read_text() for p in tmp_path.rglob("*") if p.is_file() and p.suffix in (".json", ".jsonl")]
    texts.append(caplog.text)
    import base64

    for secret in ("sk-very-secret-123", "pw-hidden-456", base64.b64encode(b"alice:pw-hidden-456").decode()):
        assert not any(secret in t for t in texts), secret


def test_cache_commands_see_judge_journals(server, data_path, tmp_path):
    from click.testing import CliRunner

    from rmbench_fast.cli.main import main

    judge(options(server, data_path, tmp_path / "out", tmp_path / "store"))
    info = CliRunner().invoke(main, ["cache", "info", "--cache-dir", str(tmp_path / "store"), "--json"])
    assert json.loads(info.output)["judge_journals"] == 1 and json.loads(info.output)["bytes"] > 10_000
    CliRunner().invoke(main, ["cache", "clear", "--cache-dir", str(tmp_path / "store")])
    assert not list((tmp_path / "store").rglob("*.jsonl"))


def test_shared_prefix_count_against_a_plain_loop():
    from rmbench_fast.judges.plan import shared_prefix_chars
    from rmbench_fast.judges.requests import Request

    rng = np.random.default_rng(0)
    texts = ["".join(rng.choice(list("ab"), size=int(rng.integers(0, 12)))) for _ in range(200)]
    reqs = [Request(str(k), ({"role": "user", "content": t},)) for k, t in enumerate(texts)]

    def plain(a, b):
        n = 0
        while n < min(len(a), len(b)) and a[n] == b[n]:
            n += 1
        return n

    full = [f"user\x01{t}" for t in texts]
    want = sum(plain(full[k], full[k - 1]) for k in range(1, len(full)))
    assert shared_prefix_chars(reqs) == (sum(map(len, full)), want)

"""What a judge's stored generations are keyed by: for a server, the JSON body each request sends
(every field of it); in process, every input of generate() and the generation settings drawn from
the model folder (a changed generation_config.json is not served its old answers, whatever the
fingerprints cover); each sampled request's seed, drawn from the request itself. And a mistyped
model path gives its real error first and alone."""

import json
import os
import subprocess
import sys

import pytest

from rmbench_fast.judges.options import JudgeOptions
from rmbench_fast.judges.requests import Request, Sampling
from rmbench_fast.judges.run import hf_identity, key_maker
from rmbench_fast.store.entries import Store
from rmbench_fast.store.fingerprints import sha256_text

judge_server = pytest.importorskip("judge_server")

MESSAGES = ({"role": "system", "content": "judge"}, {"role": "user", "content": "which is better? k"})


def tiny_judge(path):
    from rmbench_fast.tiny.models import CHAT_TEMPLATE, build_model, llama_config, save_model, train_tokenizer

    tok = train_tokenizer(["a judge reads two answers", "which is better? k"] * 5, vocab_size=300,
                          chat_template=CHAT_TEMPLATE)
    return save_model(build_model("lm", llama_config(vocab_size=len(tok), hidden=32, layers=1, heads=4), 0), tok, path)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return tiny_judge(tmp_path_factory.mktemp("keys") / "judge")


# ---- openai: the key is the body sent ----

def test_openai_keys_are_the_body_the_server_gets(monkeypatch):
    pytest.importorskip("httpx2", reason="the openai backend needs httpx2 (pip install -e '.[judge]')")
    from rmbench_fast.judges.openai_backend import OpenAIBackend

    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    server = judge_server.start_thread()
    try:
        base = Sampling(0.5, 0.9, 32, 7)
        other_user = (MESSAGES[0], {"role": "user", "content": "which is better? j"})
        other_system = ({"role": "system", "content": "a judge"}, MESSAGES[1])
        cases = [("judge-test", {}, MESSAGES, base), ("judge-test", {}, other_user, base),
                 ("judge-test", {}, other_system, base), ("judge-test", {}, MESSAGES, Sampling(0.6, 0.9, 32, 7)),
                 ("judge-test", {}, MESSAGES, Sampling(0.5, 0.8, 32, 7)),
                 ("judge-test", {}, MESSAGES, Sampling(0.5, 0.9, 33, 7)),
                 ("judge-test", {}, MESSAGES, Sampling(0.5, 0.9, 32, 8)),
                 ("judge-test", {}, MESSAGES, Sampling(0.5, 0.9, 32, None)),
                 ("judge-test", {"stop": ["\n\n"]}, MESSAGES, base), ("judge-test", {"top_k": 5}, MESSAGES, base),
                 ("judge-test", {"top_k": 6}, MESSAGES, base), ("another-model", {}, MESSAGES, base)]
        keys = []
        for name, extra, messages, sampling in cases:
            b = OpenAIBackend(server.url, name, extra_body=extra)
            key, key_of = key_maker(b.describe(), b)
            k = key_of(messages, sampling)
            b.generate([Request(k, messages, sampling)], lambda r, c: None)
            got = server.bodies[messages[-1]["content"]]  # the JSON body as the server parsed it
            want = {"model": name, "messages": [dict(m) for m in messages], "temperature": sampling.temperature,
                    "top_p": sampling.top_p, "max_tokens": sampling.max_tokens, **extra}
            if sampling.seed is not None:
                want["seed"] = sampling.seed
            assert got == want
            assert k == sha256_text("judge", key, got)  # the key is made from exactly what was sent
            keys.append(k)
        assert len(set(keys)) == len(cases)  # any field sent changes the key
    finally:
        server.stop()


# ---- hf: every input of generate() and the folder's generation settings ----

def test_hf_keys_cover_what_generate_is_given(model, tmp_path, monkeypatch):
    from rmbench_fast.judges.generation import request_inputs
    from rmbench_fast.judges.hf_backend import HFBackend

    o = JudgeOptions(model=str(model), device="cpu", cache_dir=str(tmp_path / "store"))
    store = Store(tmp_path / "store")
    identity = hf_identity(o, store)
    b = HFBackend(str(model), device="cpu")
    assert identity["generation"] == b.settings  # the key's ids are the ones generation uses
    calls = []
    original = b.model.generate

    def spy(**kw):
        calls.append(({k: v for k, v in kw.items() if k not in ("input_ids", "attention_mask", "logits_processor")},
                      b.model.generation_config.to_dict()))
        return original(**kw)
    monkeypatch.setattr(b.model, "generate", spy)
    for sampling in (Sampling(0.0, 1.0, 4), Sampling(0.7, 0.9, 5, 11)):
        calls.clear()
        b.generate([Request("r", MESSAGES, sampling)], lambda r, c: None)
        (kwargs, in_force), = calls
        inputs = request_inputs(identity["generation"], MESSAGES, sampling)
        assert kwargs == inputs["generate"]
        in_force.pop("transformers_version", None)
        assert in_force == identity["generation_config"]
    _, key_of = key_maker(identity, None)
    keys = [key_of(MESSAGES, s) for s in (Sampling(0.0, 1.0, 4), Sampling(0.0, 1.0, 5), Sampling(0.7, 0.9, 5, 11),
                                          Sampling(0.8, 0.9, 5, 11), Sampling(0.7, 0.95, 5, 11),
                                          Sampling(0.7, 0.9, 5, 12))]
    assert len(set(keys)) == len(keys)
    assert key_of(MESSAGES, Sampling(0.0, 1.0, 4, 99)) == keys[0]  # greedy: a seed changes nothing
    store.close()


def test_hf_key_holds_the_generation_config_whatever_the_fingerprints(model, tmp_path, monkeypatch):
    """With fingerprints that ignore generation_config.json, the key still follows its EOS ids."""
    import rmbench_fast.store.fingerprints as fingerprints

    folder = tmp_path / "judge"
    folder.mkdir()
    for p in model.iterdir():
        (folder / p.name).write_bytes(p.read_bytes())
    monkeypatch.setattr(fingerprints, "model_fingerprint", lambda *a, **k: {"sha256": "0" * 64, "files": []})
    monkeypatch.setattr(fingerprints, "tokenizer_fingerprint", lambda *a, **k: "same")
    o = JudgeOptions(model=str(folder), device="cpu")
    store = Store(None)
    before = key_maker(hf_identity(o, store), None)
    path = folder / "generation_config.json"
    config = json.loads(path.read_text())
    old = config.get("eos_token_id")
    config["eos_token_id"] = (old if isinstance(old, list) else [] if old is None else [old]) + [7]
    path.write_text(json.dumps(config))
    after = key_maker(hf_identity(o, store), None)
    eos = hf_identity(o, store)["generation"]["eos_token_id"]
    assert eos[:len(config["eos_token_id"])] == config["eos_token_id"]
    assert after[0] != before[0] and after[1](MESSAGES, Sampling()) != before[1](MESSAGES, Sampling())
    config["top_k"] = 3  # a default generation sets aside: still the folder's config, still another key
    path.write_text(json.dumps(config))
    assert key_maker(hf_identity(o, store), None)[0] != after[0]


def test_hf_rerun_after_new_eos_ids_generates_again(tmp_path, data_path):
    """EOS ids added to generation_config.json (every id of the vocabulary): the rerun does not read
    the old answers back, and its answers stop at their first token."""
    from click.testing import CliRunner

    from rmbench_fast.cli.main import main

    folder = tiny_judge(tmp_path / "judge")
    args = ["judge", "--model", str(folder), "--data", data_path, "--limit", "1", "--domains", "chat", "--max-tokens",
            "3", "--cache-dir", str(tmp_path / "store"), "--bootstrap", "0", "-q"]

    def run(out):
        done = CliRunner().invoke(main, args + ["--output", str(tmp_path / out)])
        assert done.exit_code == 0, done.output
        lines = [json.loads(x) for x in (tmp_path / out / "judgements.jsonl").read_text().splitlines()]
        return json.loads((tmp_path / out / "run.json").read_text()), lines

    first, old = run("a")
    assert first["generated"]["requests"] == 18 and any(x["completion_tokens"] > 1 for x in old)
    again, _ = run("b")
    assert again["from_store"] == 18  # unchanged: read back
    path = folder / "generation_config.json"
    config = json.loads(path.read_text())
    config["eos_token_id"] = list(range(json.loads((folder / "config.json").read_text())["vocab_size"]))
    path.write_text(json.dumps(config))
    changed, new = run("c")
    assert changed["from_store"] == 0 and changed["generated"]["requests"] == 18
    assert all(x["completion_tokens"] == 1 and x["finish_reason"] == "stop" for x in new)
    assert changed["judge"]["generation"]["eos_token_id"] == config["eos_token_id"]


# ---- seeds drawn from the request ----

def test_request_seeds_come_from_the_request():
    from rmbench_fast.judges.plan import request_seed

    def messages(prompt, a, b):
        return ({"role": "user", "content": f"{prompt}\nA: {a}\nB: {b}"},)

    prompts = [f"question {k}" for k in range(200)]
    for sample in range(3):  # different prompts at one sample index: different seeds
        assert len({request_seed(0, messages(p, "x", "y"), sample) for p in prompts}) == len(prompts)
    one = messages("q", "x", "y")
    seeds = {request_seed(0, one, k) for k in range(50)}
    assert len(seeds) == 50  # samples of one request
    assert request_seed(0, messages("q", "y", "x"), 0) != request_seed(0, one, 0)  # the other order
    assert request_seed(1, one, 0) != request_seed(0, one, 0)  # another --seed
    assert all(0 <= s < 2 ** 31 for s in seeds)
    # the same in another process, whatever its hash randomisation
    code = ("from rmbench_fast.judges.plan import request_seed; "
            f"print(request_seed(0, {one!r}, 2))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONHASHSEED": "12345"})
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) == request_seed(0, one, 2)


# ---- a model path with a typo ----

def test_a_mistyped_model_path_gives_its_own_error_first_and_alone(tmp_path, data_path, caplog):
    from click.testing import CliRunner

    from rmbench_fast.cli.main import main

    caplog.set_level("DEBUG")
    for name in (str(tmp_path / "no-such-judge"), "nobody-here/no-such-judge"):
        out = CliRunner().invoke(main, ["judge", "--model", name, "--data", data_path, "--limit", "1",
                                        "--cache-dir", str(tmp_path / "store"), "-q"])
        assert out.exit_code == 2
        lines = out.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("rmbench-fast: error: ") and name in lines[0], out.output
        assert "fingerprint" not in out.output and "fingerprint" not in caplog.text
        caplog.clear()


def test_keying_loads_no_weights(model, monkeypatch):
    """Keying an in-process judge reads its files only (a rerun whose answers are all stored never
    loads the weights)."""
    import rmbench_fast.judges.hf_backend as hf_backend
    import rmbench_fast.models.loading as loading

    for where in (loading, hf_backend):
        monkeypatch.setattr(where, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    identity = hf_identity(JudgeOptions(model=str(model), device="cpu"), Store(None))
    assert identity["generation"]["eos_token_id"] and identity["weights"]

"""The memory pre-flight (engine.preflight, models.memory): the estimate against the measured peak
on tiny models large enough that activations and weights both count (hidden 256, 3 layers,
vocabulary 8000, batches of a few thousand tokens), RM and DPO passes; a model refused under a stated
--max-memory in one line naming the flags that would make it fit, before anything loads; what
run.json records. The measured peak is independent of the estimate: the loaded model's resident
tensors plus the peak of live CPU-allocator bytes torch's profiler saw during the batches."""

import json
import random
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_device_map import options, wire, wired  # noqa: F401 (wired: the fixture)

from rmbench_fast.cli.main import main
from rmbench_fast.engine.prepare import prepare
from rmbench_fast.engine.preflight import preflight
from rmbench_fast.engine.score import score
from rmbench_fast.errors import UsageError
from rmbench_fast.models.weight_files import read_header, safetensors_files
from rmbench_fast.store.entries import Store

WORDS = "the model reads a long answer about sorting lists in python with care and many small steps".split()
TOKENS = 4096  # --max-tokens-per-batch: batches of a few thousand tokens


def text(n, seed):
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(n))


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    from rmbench_fast.tiny.models import build_trio, train_tokenizer

    root = tmp_path_factory.mktemp("preflight")
    items = [{"id": i, "domain": d, "subset": "toy", "prompt": text(120, i),
              "chosen": [text(100, 10 * i + k) for k in range(3)],  # lengths within batching's 3%: full batches
              "rejected": [text(100, 10 * i + k + 5) for k in range(3)]}
             for i, d in enumerate(["chat", "math", "code"])]
    data = root / "data.json"
    data.write_text(json.dumps(items))
    tok = train_tokenizer([text(200, s) for s in range(20)], vocab_size=300)
    paths = build_trio(root / "models", tok, seeds=(31, 32, 33), vocab_size=8000, hidden=256, layers=3, heads=4,
                       intermediate=1024)
    return {"data": str(data), **{k: str(v) for k, v in paths.items()}}


def opts(big, model, **kw):
    # unshared: the estimate is checked on batches of whole sequences
    return options(big[model], data=big["data"], limit=None, max_tokens_per_batch=TOKENS, share_prefix=False, **kw)


def file_bytes(path) -> int:
    """The weights' bytes as stored (fp32 here): the plain count the estimate's weights must equal."""
    total = 0
    for f in safetensors_files(Path(path)):
        for dtype, shape in read_header(f).values():
            n = 1
            for x in shape:
                n *= x
            total += n * 4
    return total


def close(estimated, measured, within=0.2):
    assert measured and abs(estimated - measured) <= within * measured, (estimated, measured)


@pytest.fixture(scope="module")
def runs(big, tmp_path_factory):
    """An RM run (results written, run.json read back) and a DPO run with a reference."""
    mp = pytest.MonkeyPatch()
    try:
        wire(mp)
        mp.setenv("RMBENCH_CPU_PEAK", "1")  # the CPU's peak is measured on request (engine.runner)
        out = tmp_path_factory.mktemp("runs") / "rm"
        rm = opts(big, "rm", output=str(out))
        dpo = opts(big, "policy", ref_model=big["reference"])
        return {"rm": (rm, score(rm)), "dpo": (dpo, score(dpo)), "run_json": out / "run.json"}
    finally:
        mp.undo()


@pytest.mark.parametrize("kind", ["rm", "dpo"])
def test_estimate_within_20_percent_of_the_measured_peak(runs, kind):
    o, run = runs[kind]
    assert run.run["n_batches"] >= 2 and run.run["padded_tokens"] > TOKENS  # batches of a few thousand tokens
    for role in ("model",) if kind == "rm" else ("model", "ref_model"):
        mem = run.run["models"][role]["memory"]
        est, got = mem["estimate"], mem["measured"]
        assert est["weights_bytes"] == file_bytes(o.model if role == "model" else o.ref_model)
        close(est["weights_bytes"], got["weights_bytes"], 0.001)  # resident: the weights and a few buffers
        assert est["activation_bytes"] > 0.5 * est["weights_bytes"]  # not a weights-only comparison
        assert est["largest_batch"]["padded_tokens"] > 3000
        close(est["activation_bytes"], got["activation_peak_bytes"])
        close(est["total_bytes"], got["peak_bytes"])
        print(f"{kind} {role}: estimate {est['total_bytes']} (weights {est['weights_bytes']} + activations "
              f"{est['activation_bytes']}), measured {got['peak_bytes']} (activations {got['activation_peak_bytes']})")
        assert run.run["memory"][role]["estimate_bytes"] == est["total_bytes"]


def test_refused_under_max_memory_in_one_line_naming_the_flags(big, wired, monkeypatch):
    prep = prepare(opts(big, "rm"), Store(None))
    est = preflight(prep, opts(big, "rm"))["model"]
    weights, act = est["weights_bytes"], est["activation_bytes"]
    budget = weights + act * 2 // 5  # holds the weights, not the largest batch; bfloat16 halves both
    assert (weights + act) // 2 < budget < weights + act

    def no_loading(*a, **kw):
        raise AssertionError("the model was loaded before the pre-flight refused it")

    monkeypatch.setattr("rmbench_fast.scorers.rm.load_model", no_loading)
    r = CliRunner().invoke(main, ["score", "--model", big["rm"], "--data", big["data"], "--max-tokens-per-batch",
                                  str(TOKENS), "--max-memory", f"cpu={budget}", "--no-cache", "-q"])
    assert r.exit_code == 2, r.output
    line = r.output.strip().splitlines()[-1]
    for flag in ("--device-map auto", "--dtype bfloat16", "--max-tokens-per-batch ", "--no-preflight", "--max-memory"):
        assert flag in line, line
    suggested = int(line.split("--max-tokens-per-batch ")[1].split()[0].rstrip(","))
    assert suggested < TOKENS
    # each named fix passes the pre-flight; --no-preflight skips the refusal
    small = {"cpu": str(budget)}
    for fixed in (dict(max_tokens_per_batch=suggested), dict(dtype="bfloat16"), dict(preflight=False)):
        o = options(big["rm"], data=big["data"], limit=None, max_memory=small,
                    **{"max_tokens_per_batch": TOKENS, **fixed})
        preflight(prepare(o, Store(None)), o)
    o = opts(big, "rm", max_memory=small)
    with pytest.raises(UsageError):
        preflight(prepare(o, Store(None)), o)


def test_dpo_with_a_reference_is_checked_per_pass_before_any_loads(big):
    o = opts(big, "policy", ref_model=big["reference"])
    plans = preflight(prepare(o, Store(None)), o)
    assert set(plans) == {"model", "ref_model"}  # loaded one after the other: each pass's peak on its own
    assert plans["model"]["fits"] and plans["model"]["available_source"] == "free"
    assert plans["model"]["activation_bytes"] == plans["ref_model"]["activation_bytes"]


def test_run_json_records_the_estimate_and_the_peak(runs):
    run = json.loads(runs["run_json"].read_text())
    mem = run["memory"]["model"]
    for key in ("weights_bytes", "activation_bytes", "estimate_bytes", "available_bytes", "measured_peak_bytes"):
        assert mem[key], key
    assert mem["estimate_bytes"] == mem["weights_bytes"] + mem["activation_bytes"]
    assert "profiler" in run["models"]["model"]["memory"]["measured"]["how"]


def test_placed_the_main_device_must_keep_room_for_the_activations(big, monkeypatch):
    """--device-map: the weights may go anywhere (disk last), so what is checked is the main device's
    room for the largest batch once it holds what accelerate gives it."""
    import rmbench_fast.engine.preflight as pf

    o = opts(big, "rm", device_map="auto")
    prep = prepare(o, Store(None))
    est = preflight(prep, o)["model"]
    assert est["fits"] and est["main_device_weights_bytes"] == est["weights_bytes"]  # all of it kept on the CPU
    weights, act = est["weights_bytes"], est["activation_bytes"]
    monkeypatch.setattr(pf, "free_bytes", lambda key: weights + act // 2)  # a CPU that holds the weights, half a batch
    with pytest.raises(UsageError) as e:
        preflight(prep, o)
    line = str(e.value)
    assert "\n" not in line and "--max-memory cpu=" in line and "--max-tokens-per-batch " in line
    monkeypatch.undo()
    o = opts(big, "rm", device_map="auto", max_memory={"cpu": str(weights // 2)})  # the rest offloaded to disk
    assert preflight(prepare(o, Store(None)), o)["model"]["fits"]


@pytest.fixture(scope="module")
def long(tmp_path_factory):
    """Sequences of about 7000 tokens, one a batch: where a rows x width^2 attention mask (50 MB) would
    be a third of a batch's activations, had the estimate counted one a causal decoder never gets."""
    from rmbench_fast.tiny.models import build_trio, train_tokenizer

    root = tmp_path_factory.mktemp("preflight-long")
    item = {"id": 0, "domain": "chat", "subset": "toy", "prompt": text(60, 1),
            "chosen": [text(3300, 10 + k) for k in range(3)], "rejected": [text(3300 - 20 * k, 20 + k) for k in range(3)]}
    data = root / "data.json"
    data.write_text(json.dumps([item]))
    tok = train_tokenizer([text(200, s) for s in range(20)], vocab_size=300)
    paths = build_trio(root / "models", tok, seeds=(41, 42, 43), vocab_size=8000, hidden=256, layers=3, heads=4,
                       intermediate=1024, max_positions=8192)
    return {"data": str(data), **{k: str(v) for k, v in paths.items()}}


@pytest.mark.parametrize("kind", ["rm", "dpo"])
def test_long_sequences_estimate_within_20_percent(long, wired, monkeypatch, kind):
    monkeypatch.setenv("RMBENCH_CPU_PEAK", "1")
    extra = dict(ref_free="sum") if kind == "dpo" else {}
    o = options(long["rm" if kind == "rm" else "policy"], data=long["data"], limit=None, max_tokens_per_batch=8192,
                share_prefix=False, **extra)
    run = score(o)
    mem = run.run["models"]["model"]["memory"]
    est, got = mem["estimate"], mem["measured"]
    assert est["largest_batch"]["rows"] == 1 and est["largest_batch"]["width"] > 6500
    width = est["largest_batch"]["width"]
    assert est["activation_bytes"] > 2 * width * width  # a mask's bytes would be a large share of it
    close(est["activation_bytes"], got["activation_peak_bytes"])

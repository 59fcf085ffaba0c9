"""The GPU script's harness on CPU, so that a lent device's few minutes are not lost to a harness
bug: benchmarks/gpu_e2e.py with a tiny model against an official flow that finishes (the real one,
in the peer environment), one stopped at its time limit and one that crashes (stand-ins that
write the real progress events), then benchmarks/gpu_check.sh's summary over what they wrote."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # subprocesses that build and score tiny models

REPO = Path(__file__).resolve().parents[1]
PEER = Path(os.environ.get("RMBENCH_PEER_PYTHON", REPO / "benchmarks" / "peer" / ".venv" / "bin" / "python"))
TINY = ["--device", "cpu", "--limit", "1", "--vocab", "512", "--hidden", "32", "--layers", "1", "--heads", "2",
        "--kv-heads", "1", "--intermediate", "64", "--tokenizer-vocab", "512"]


def stand_in(tmp_path, body: str) -> str:
    """An executable that takes the official flow's command line (script first) and runs `body`
    with `log(event, **fields)` writing to its --progress file."""
    path = tmp_path / "peer-python"
    path.write_text(f"#!{sys.executable}\n" + textwrap.dedent('''
        import json, sys, time
        args = sys.argv[2:]
        progress = args[args.index("--progress") + 1]
        def log(event, **fields):
            with open(progress, "a") as f:
                f.write(json.dumps({"event": event, "t": time.time(), **fields}) + "\\n")
        ''') + textwrap.dedent(body))
    path.chmod(0o755)
    return str(path)


def e2e(data_path, tmp_path, peer: str, official_timeout: int) -> dict:
    out = tmp_path / "out"
    subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_e2e.py"), "--data", data_path, *TINY,
                    "--out", str(out), "--work", str(tmp_path / "work"), "--peer-python", peer,
                    "--timeout", "300", "--official-timeout", str(official_timeout)],
                   check=True, capture_output=True, text=True, cwd=tmp_path)
    return json.loads((out / "gpu_e2e_dpo.json").read_text())


def summary(out: Path) -> str:
    proc = subprocess.run(["bash", str(REPO / "benchmarks" / "gpu_check.sh"), str(out)], env={**os.environ,
                          "STEPS": "none", "PYTHON": sys.executable}, capture_output=True, text=True)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    return proc.stdout


def test_official_stopped_at_its_limit(data_path, tmp_path):
    peer = stand_in(tmp_path, '''
        for event in ("start", "imported", "tokenizer", "loaded", "formatted", "tokenized"):
            log(event)
        for _ in range(3):
            time.sleep(0.2)
            log("batch", rows=4, real=100, padded=120)
        with open(progress, "a") as f:
            f.write('{"event": "batch", "t": ')  # a line cut short by the kill
        time.sleep(600)
        ''')
    d = e2e(data_path, tmp_path, peer, official_timeout=8)
    official = d["official"]
    assert official["finished"] is False and "error" not in official
    seen = official["phases"]
    assert seen["batches"] == 3 and seen["tokens_scored"] == 3 * 100 * 2  # real tokens x two models
    assert set(seen["seconds_from_launch"]) == {"start", "imported", "loaded"}
    assert 0.4 <= seen["forward_s"] <= 2 and seen["tokens_per_s_forward"] == pytest.approx(600 / seen["forward_s"])
    assert official["extrapolated_wall_s"] > 0 and d["speedup_wall_lower_bound"] > 0
    text = summary(tmp_path / "out")
    assert "| official (stopped at" in text and "speedup: >" in text and "extrapolated" in text


def test_official_that_crashes(data_path, tmp_path):
    peer = stand_in(tmp_path, '''
        log("start")
        sys.stderr.write("CUDA out of memory (stand-in)\\n")
        sys.exit(3)
        ''')
    d = e2e(data_path, tmp_path, peer, official_timeout=60)
    assert d["official"]["finished"] is False and "out of memory (stand-in)" in d["official"]["error"]
    assert "speedup_wall_lower_bound" not in d  # a crash bounds nothing
    text = summary(tmp_path / "out")
    assert "failed: exit 3" in text and "speedup:" not in text


def test_official_that_finishes_and_the_tile_sweep(data_path, tmp_path):
    if not PEER.exists():
        pytest.skip(f"no official-flow environment at {PEER} (bash benchmarks/peer/setup.sh)")
    d = e2e(data_path, tmp_path, str(PEER), official_timeout=300)
    official = d["official"]
    assert official["finished"] is True and official["tokens"] == d["ours"]["tokens"]
    assert official["phases"]["tokens_scored"] == d["ours"]["tokens"]  # its batches cover every token, both models
    assert d["max_abs_score_diff"] < 1e-3  # fp32 on CPU: the same numbers
    phases = d["ours"]["phases"]
    assert phases["model_batches_s"] >= phases["model_first_batch_s"] > 0
    subprocess.run([sys.executable, str(REPO / "benchmarks" / "logprob_tune.py"), "--device", "cpu", "--shapes",
                    "40x300x32", "--repeats", "1", "--out", str(tmp_path / "out" / "logprob_tune-cuda.json")],
                   check=True, capture_output=True, env={**os.environ, "TRITON_INTERPRET": "1"})
    text = summary(tmp_path / "out")
    assert "| official | " in text and "x whole process" in text and "tile sweep N=40 V=300 d=32: best" in text


def test_profile_step_groups_kernels_and_the_summary_reads_it(tmp_path):
    """Step 6's grouping of the GPU's kernels by name (benchmarks/profile_breakdown.py) on stand-in kernel
    events, and the summary's line over a profile-cuda.json of its shape."""
    from types import SimpleNamespace

    from torch.autograd import DeviceType

    sys.path.insert(0, str(REPO / "benchmarks"))
    from profile_breakdown import gpu_groups

    kernels = [("nvjet_tst_128x256_64x4_2x1_v_bz_coopB_TNT", 4.0), ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", 1.0),
               ("fmha_cutlassF_bf16_aligned_64x128_rf_sm80", 2.0), ("_linear_chunk_kernel", 3.0), ("_merge_kernel", 0.5),
               ("void at::native::vectorized_elementwise_kernel<4, silu>", 0.25), ("Memcpy HtoD (Pageable -> Device)", 0.125),
               ("some_kernel_of_its_own", 0.0625)]
    events = [SimpleNamespace(device_type=DeviceType.CUDA, name=n, self_device_time_total=s * 1e6) for n, s in kernels]
    events.append(SimpleNamespace(device_type=DeviceType.CPU, name="aten::mm", self_device_time_total=9e6))  # host side
    groups, by_name = gpu_groups(events)
    assert groups == {"log-prob op": 3.5, "attention": 2.0, "matmul": 5.0, "norms and activations": 0.25,
                      "copies and padding": 0.125, "other kernels": 0.0625}
    assert by_name == dict(kernels)
    row = {"whole_process_s": 12.5, "mfu": 0.41, "mfu_of_forwards": 0.62, "timing": {"fixed_s": 3.25},
           "ops": {"kernels_s": groups, "forward_gpu_idle_s": 1.75}}
    out = tmp_path / "out"
    out.mkdir()
    (out / "profile-cuda.json").write_text(json.dumps({"modes": {"rm": row}}))
    text = summary(out)
    assert ("profile rm: 12.5 s, model-FLOP efficiency 0.41 (forwards 0.62), fixed 3.25 s; GPU idle in the "
            "forwards 1.75 s; kernels log-prob op 3.50, attention 2.00, matmul 5.00") in text

"""What a new user met following the README on a fresh clone: an empty --domains selection, files
colleagues could not read, a slow offline failure for a hub id, and the demo's folder in git status."""

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import make_item

from rmbench_fast.cli.main import main
from rmbench_fast.store.atomic import atomic_write_text

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def no_math(tmp_path):
    (tmp_path / "chat_filtered.json").write_text(json.dumps([make_item(i) for i in range(2)]))
    return str(tmp_path)


@pytest.mark.parametrize("models_args", ["rm", "dpo"])
def test_a_domain_the_data_lacks_is_one_line(world, no_math, models_args):
    args = ["--model", world["rm"]] if models_args == "rm" else ["--model", world["policy"], "--ref-model", world["ref"]]
    r = CliRunner().invoke(main, ["score", *args, "--data", no_math, "--domains", "math", "-q"])
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1
    assert "no items in --domains math: it holds chat" in r.output


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_written_files_keep_the_umask_mode(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        atomic_write_text(tmp_path / "f.json", "{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "f.json").stat().st_mode) == mode


def test_run_results_are_readable_by_the_group(world, tmp_path):
    old = os.umask(0o022)
    try:
        r = CliRunner().invoke(main, ["score", "--model", world["rm"], "--data", world["data"], "-q", "--no-cache",
                                      "--output", str(tmp_path / "run")])
    finally:
        os.umask(old)
    assert r.exit_code == 0, r.output
    for f in ("results.json", "summary.json", "run.json"):
        assert stat.S_IMODE((tmp_path / "run" / f).stat().st_mode) == 0o644, f


def test_an_unreachable_hub_fails_at_once_with_a_hint(tmp_path, no_math):
    """No retries with backoff (27 s before): one listing of the repository, refused at once here
    (a closed port on the loopback address stands in for a machine without network)."""
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env.update(HF_ENDPOINT="http://127.0.0.1:9", HF_HOME=str(tmp_path / "hf"))
    proc = subprocess.run([sys.executable, "-m", "rmbench_fast", "score", "--model", "someone/some-reward-model",
                           "--data", no_math, "--output", str(tmp_path / "out")], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "Retrying" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("rmbench-fast: error: model someone/some-reward-model: "
                                                           "not a local folder")
    assert "pass a local folder" in proc.stderr


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="not a git checkout")
def test_the_demo_folder_is_ignored():
    """`rmbench-fast demo` writes rmbench-demo/ where it runs: the repository root, following the README."""
    proc = subprocess.run(["git", "check-ignore", "-q", "rmbench-demo/rm/results.json"], cwd=ROOT)
    assert proc.returncode == 0

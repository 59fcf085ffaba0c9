"""rewardbench 0.1.4's own functions, run in the official flow's environment ($RMBENCH_PEER_PYTHON, else
benchmarks/peer/.venv): the parity tests of rmbench_fast.tasks call them through here."""

import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PEER = Path(os.environ.get("RMBENCH_PEER_PYTHON", REPO / "benchmarks" / "peer" / ".venv" / "bin" / "python"))
REFERENCE = REPO / "benchmarks" / "peer" / "rewardbench_reference.py"


def peer(args, stdin=""):
    """The JSON a peer-environment Python prints for `args` (skips without that environment)."""
    if not PEER.exists():
        pytest.skip(f"no peer environment at {PEER} (bash benchmarks/peer/setup.sh): parity with rewardbench 0.1.4 "
                    "needs its own functions")
    proc = subprocess.run([str(PEER), *args], input=stdin, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def official(cases):
    """rewardbench 0.1.4's numbers for the cases (benchmarks/peer/rewardbench_reference.py)."""
    return peer([str(REFERENCE)], json.dumps({"cases": cases}))["results"]

#!/usr/bin/env bash
# The official RM-Bench flow's environment: allenai's rewardbench 0.1.4 pins transformers 4.51, so it
# lives in its own virtual environment (default benchmarks/peer/.venv; PEER_VENV overrides).
# torch 2.13.0 first (the CPU build on this kind of machine), then rewardbench and the pins it needs.
# Idempotent: a finished environment is left as it is.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="${PEER_VENV:-$here/.venv}"
stamp="$venv/.rmbench-peer-ready"
if [ -f "$stamp" ]; then
  echo "peer environment ready: $venv"
  exit 0
fi
python3 -m venv "$venv"
py="$venv/bin/python"
$py -m pip install -q --upgrade pip
$py -m pip install -q torch==2.13.0
# trl: a release from rewardbench 0.1.4's time that still has DPODataCollatorWithPadding and accepts
# transformers 4.51.
$py -m pip install -q rewardbench==0.1.4 transformers==4.51.0 "trl==0.17.0" numpy
$py - <<'PY'
import rewardbench, transformers, trl, torch
from trl.trainer.utils import DPODataCollatorWithPadding  # noqa: F401
print("rewardbench", getattr(rewardbench, "__version__", "0.1.4"), "transformers", transformers.__version__,
      "trl", trl.__version__, "torch", torch.__version__)
PY
touch "$stamp"
echo "peer environment ready: $venv"

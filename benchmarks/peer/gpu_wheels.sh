#!/usr/bin/env bash
# Wheels for the official flow (benchmarks/peer/official_flow.py: allenai's rewardbench 0.1.4,
# transformers 4.51, trl 0.17, fastchat) on the GPU machine, which has no network but has
# Python 3.12, torch 2.11 (CUDA), transformers 5.x, tokenizers 0.23, huggingface_hub 1.x,
# accelerate 1.15.0, numpy, pyarrow, pandas, fsspec, aiohttp, xxhash, requests, tqdm, rich, ...
#
# Carried: what the official flow imports that the machine lacks (datasets, dill, multiprocess,
# fschat, trl, rewardbench) and what it has at versions transformers 4.51 refuses at import
# (transformers itself, tokenizers <0.22, huggingface_hub <1.0), plus fsspec at the version
# datasets 5.0.1 caps (<=2026.6.0). Versions are those of the peer venv (benchmarks/peer/setup.sh).
# accelerate is not carried: the machine's 1.15.0 is the peer venv's and works with huggingface_hub
# 0.36. torch, numpy, pyarrow, pandas and the rest come from the machine.
#
# They go to .whl/peer/ (git-ignored) and are installed on the GPU machine into their own folder,
# which only the official flow's process puts on PYTHONPATH (our package keeps transformers 5.x):
#
#   here (network):   bash benchmarks/peer/gpu_wheels.sh            # download; idempotent
#   GPU machine:      bash benchmarks/peer/gpu_wheels.sh install    # -> /tmp/peer-site, /tmp/peer-python
#                     bash benchmarks/peer/gpu_wheels.sh check      # imports + requirement check
#                     PEER_PYTHON=/tmp/peer-python bash benchmarks/gpu_check.sh
#   (install is: python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir
#    --upgrade --target /tmp/peer-site .whl/peer/*.whl; then run the official flow as
#    PYTHONPATH=/tmp/peer-site python3 benchmarks/peer/official_flow.py ...)
#
# PEER_SITE overrides /tmp/peer-site; PYTHON overrides python3.
set -euo pipefail
cd "$(dirname "$0")/../.."
dest=.whl/peer
site=${PEER_SITE:-/tmp/peer-site}
PY=${PYTHON:-python3}

# name==version, wheel file prefix (the normalized name pip gives the file)
PINS=(
  "transformers==4.51.0 transformers-4.51.0-"
  "tokenizers==0.21.4 tokenizers-0.21.4-"
  "huggingface_hub==0.36.2 huggingface_hub-0.36.2-"
  "datasets==5.0.1 datasets-5.0.1-"
  "dill==0.4.1 dill-0.4.1-"
  "multiprocess==0.70.19 multiprocess-0.70.19-"
  "fsspec==2026.6.0 fsspec-2026.6.0-"
  "trl==0.17.0 trl-0.17.0-"
  "fschat==0.2.36 fschat-0.2.36-"
  "rewardbench==0.1.4 rewardbench-0.1.4-"
)

download() {
  mkdir -p "$dest"
  local keep=() want=()
  for p in "${PINS[@]}"; do
    set -- $p
    keep+=("$2")
    if compgen -G "$dest/$2*.whl" >/dev/null; then
      echo "have $1"
    else
      want+=("$1")
    fi
  done
  if [ ${#want[@]} -gt 0 ]; then
    echo "downloading: ${want[*]}"
    # multiprocess ships one wheel per Python (py312-none-any), hence --python-version.
    $PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
      -d "$dest" "${want[@]}"
  fi
  # drop anything else (older pins, stray files), so .whl/peer/*.whl is exactly the set above
  for f in "$dest"/*; do
    [ -e "$f" ] || continue
    local b ok=0
    b=$(basename "$f")
    for k in "${keep[@]}"; do case "$b" in "$k"*.whl) ok=1 ;; esac; done
    [ $ok = 1 ] || { echo "removing $b"; rm -rf "$f"; }
  done
  n=$(ls "$dest"/*.whl | wc -l)
  [ "$n" = "${#PINS[@]}" ] || { echo "expected ${#PINS[@]} wheels in $dest, found $n" >&2; exit 1; }
  du -k "$dest"/*.whl | awk '{printf "%8.2f MiB  %s\n", $1/1024, $2}'
  echo "total $dest: $(du -sk "$dest" | awk '{printf "%.2f MiB", $1/1024}'); total .whl: $(du -sk .whl | awk '{printf "%.2f MiB", $1/1024}')"
}

install() {
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "$dest"/*.whl
  # a Python for PEER_PYTHON (benchmarks/gpu_check.sh): the carried packages shadow the machine's
  local wrapper=${PEER_PYTHON_WRAPPER:-/tmp/peer-python}
  cat >"$wrapper" <<EOF
#!/usr/bin/env bash
PYTHONPATH="$site\${PYTHONPATH:+:\$PYTHONPATH}" exec $(command -v "$PY") "\$@"
EOF
  chmod +x "$wrapper"
  echo "installed into $site; PEER_PYTHON=$wrapper"
}

check() {
  PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" $PY - "$site" "${PINS[@]}" <<'EOF'
"""Carried versions win, every carried distribution's requirements hold against carried + machine
packages, and the official flow's imports load. Exit 1 on any failure."""
import importlib.metadata as md
import os
import sys

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

site, pins = sys.argv[1], [p.split()[0] for p in sys.argv[2:]]
bad = []
env = {"extra": ""}
for pin in pins:
    name, want = pin.split("==")
    try:
        dist = md.distribution(name)
    except md.PackageNotFoundError:
        bad.append(f"{name}: not installed"); continue
    where = str(dist.locate_file(""))
    ok = dist.version == want and os.path.realpath(where).startswith(os.path.realpath(site))
    print(f"{'ok ' if ok else 'BAD'} {name} {dist.version} from {where}")
    if not ok:
        bad.append(f"{name}: {dist.version} at {where}, want {want} from {site}")
# rewardbench's own list names tools it never imports (black, flake8, pytest, wandb, bitsandbytes,
# ...) and fschat's names its web server (fastapi, uvicorn, ...); only the requirements of what the
# flow loads are checked.
skip = {"rewardbench": {"bitsandbytes", "black", "flake8", "isort", "pytest", "wandb", "hf-transfer",
                        "tiktoken", "tabulate"},
        "fschat": {"fastapi", "httpx", "markdown2", "nh3", "prompt-toolkit", "pydantic", "shortuuid",
                   "tiktoken", "uvicorn"},
        "huggingface-hub": {"hf-xet"}}  # hf_xet: downloads only
for pin in pins:
    name = canonicalize_name(pin.split("==")[0])
    for r in md.requires(name) or []:
        req = Requirement(r)
        if req.marker and not req.marker.evaluate(env):
            continue
        dep = canonicalize_name(req.name)
        if dep in skip.get(name, ()):
            continue
        try:
            have = md.version(dep)
        except md.PackageNotFoundError:
            bad.append(f"{name} needs {req}: missing"); continue
        if req.specifier and not req.specifier.contains(have, prereleases=True):
            bad.append(f"{name} needs {req}: have {have}")
# packages the machine may have that transformers 4.51 / trl 0.17 / accelerate import when present
# (a release made for transformers 5 may not import against 4.51)
for opt in ("peft", "comet_ml", "deepspeed", "kernels", "flash_attn", "liger_kernel", "bitsandbytes",
            "torchvision", "timm", "vllm", "wandb", "mergekit", "llm_blender", "diffusers", "protobuf",
            "hf_xet", "httpx"):
    try:
        print(f"machine has {opt} {md.version(opt)}")
    except md.PackageNotFoundError:
        pass
try:
    import torch, transformers, tokenizers, huggingface_hub, datasets, accelerate, trl, rewardbench
    from fastchat.conversation import get_conv_template
    from rewardbench import (REWARD_MODEL_CONFIG, DPOInference, check_tokenizer_chat_template,
                             prepare_dialogue, prepare_dialogue_from_tokenizer)
    import rewardbench.models.pipeline
    from trl.trainer.utils import DPODataCollatorWithPadding
    from accelerate import Accelerator
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, pipeline
    import transformers.models.llama.modeling_llama
    ds = datasets.Dataset.from_list([{"prompt": "p", "chosen": "c", "rejected": "r"}])
    ds.map(lambda x: x)
    get_conv_template("tulu")
    print("imports ok: torch", torch.__version__, "transformers", transformers.__version__,
          "tokenizers", tokenizers.__version__, "huggingface_hub", huggingface_hub.__version__,
          "datasets", datasets.__version__, "accelerate", accelerate.__version__, "trl", trl.__version__,
          "rewardbench", rewardbench.__version__)
except Exception as e:  # noqa: BLE001
    import traceback
    traceback.print_exc()
    bad.append(f"import: {type(e).__name__}: {e}")
for b in bad:
    print("FAIL", b)
sys.exit(1 if bad else 0)
EOF
}

case "${1:-download}" in
  download) download ;;
  install) install ;;
  check) check ;;
  *) echo "usage: $0 [download|install|check]" >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# The prepared GPU check (one NVIDIA GPU, no network), about 7.5 minutes on one H200 (DEADLINE):
#   1. the kernel tests on CUDA (compiled Triton, not the interpreter);
#   2. the log-prob op benchmark at real model shapes (benchmarks/logprob_op.py --device cuda);
#   3. end-to-end DPO with a reference at a 1B-class shape (V=128256, bf16): rmbench-fast against the
#      official flow (benchmarks/gpu_e2e.py), when the official flow's wheels are here
#      (.whl/peer, made by benchmarks/peer/gpu_wheels.sh and carried to the machine);
#   4. a tile-configuration sweep of the kernel (pointer and TMA loads) at the shapes that miss the 1.15x goal
#      (benchmarks/logprob_tune.py), until TUNE_BUDGET seconds (default 120) are spent;
#   5. (run before 4) --tp 2 against one GPU on a small Llama (fp32 scores, RM and DPO with a reference):
#      needs two GPUs; on a machine with one it says so and skips (benchmarks/tp_check.py).
#   6. (run before 4) issue 34's breakdown on the GPU: one RM and one DPO run of the profile's model
#      (hidden 512, 4 layers, 32k vocabulary, bf16, --no-cache), whole process, then the GPU's kernel time
#      by group and the time it sat idle in the forwards (benchmarks/profile_breakdown.py --device cuda).
# Each step writes JSON under OUT_DIR; the last lines are one summary table.
#
# usage: bash benchmarks/gpu_check.sh [OUT_DIR]      (default OUT_DIR: $OUT, else benchmarks/results)
#   STEPS=1,2,3,5,6,4 which steps                         DATA=RM-Bench folder (default ../shared/rm-bench;
#   DEADLINE=450  seconds for the whole script: step 4's budget shrinks to fit it
#   LIMIT=20      prompts per domain (step 3)               the device machine needs a copy in the checkout)
#   OFFICIAL_TIMEOUT=120  seconds the official flow may run in step 3; past it, it is stopped and its
#                 progress log says where its time went and how fast it scored (gpu_e2e.py)
#   RMBENCH_LOGPROB_TUNING=0 pins the kernel's tile configuration (no autotuning time in step 3)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:-${OUT:-benchmarks/results}}
DATA=${DATA:-../shared/rm-bench}
LIMIT=${LIMIT:-20}
STEPS=${STEPS:-1,2,3,5,6,4}
TUNE_BUDGET=${TUNE_BUDGET:-120}
OFFICIAL_TIMEOUT=${OFFICIAL_TIMEOUT:-120}
DEADLINE=${DEADLINE:-450}  # seconds: step 4 gets what is left of it (a device call is at most 600 s)
mkdir -p "$OUT_DIR"
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 HF_HUB_OFFLINE=1
PY=${PYTHON:-python3}
status=0
has() { [[ ",$STEPS," == *",$1,"* ]]; }

# The machine has torch, transformers, triton, numba, click, tqdm but may lack setuptools for an
# editable install: the package runs from the checkout, kernels/ linked in as rmbench_fast.kernels,
# through a folder that holds nothing else (the checkout's root on the path would show kernels/ as
# a top-level `kernels`, which transformers probes for Hugging Face's package of that name).
if ! (cd /tmp && $PY -c "import rmbench_fast.kernels") 2>/dev/null; then
  [ -e rmbench_fast/kernels ] || ln -s ../kernels rmbench_fast/kernels
  mkdir -p /tmp/rmbench-src && ln -sfn "$PWD/rmbench_fast" /tmp/rmbench-src/rmbench_fast
  export PYTHONPATH=/tmp/rmbench-src${PYTHONPATH:+:$PYTHONPATH}
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT_DIR/gpu_check-gpu.txt"

if has 1; then
  echo "== 1. kernel tests on CUDA"
  timeout 150 $PY -m pytest -q -p no:cacheprovider tests/test_kernels.py 2>&1 | tee "$OUT_DIR/gpu_check-tests.log" | tail -2
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi
if has 2; then
  echo "== 2. log-prob op benchmark at real shapes (bf16)"
  timeout 150 $PY benchmarks/logprob_op.py --device cuda --out "$OUT_DIR/logprob_op-cuda.json" > "$OUT_DIR/logprob_op-cuda.log" 2>&1 \
    || status=1
  tail -22 "$OUT_DIR/logprob_op-cuda.log"
fi
if has 3; then
  echo "== 3. end-to-end DPO with a reference, 1B-class model, vs the official flow"
  peer=()
  if compgen -G ".whl/peer/*.whl" > /dev/null; then
    t_install=$SECONDS
    bash benchmarks/peer/gpu_wheels.sh install > "$OUT_DIR/gpu_check-peer.log" 2>&1 && peer=(--peer-python /tmp/peer-python) \
      || { echo "official flow's wheels did not install (see gpu_check-peer.log)"; status=1; }
    echo "official flow's wheels installed in $((SECONDS - t_install)) s"
  else
    echo "no .whl/peer: official flow skipped (bash benchmarks/peer/gpu_wheels.sh, then carry .whl)"
  fi
  timeout $((OFFICIAL_TIMEOUT + 250)) $PY benchmarks/gpu_e2e.py --data "$DATA" --limit "$LIMIT" --out "$OUT_DIR" \
    "${peer[@]}" --timeout 180 --official-timeout "$OFFICIAL_TIMEOUT" || status=1
fi

if has 5; then
  gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
  if [ "$gpus" -lt 2 ]; then
    echo "== 5. --tp 2 skipped: this machine has $gpus GPU(s); tensor parallelism needs two"
  else
    echo "== 5. --tp 2 against one GPU"
    timeout 240 $PY benchmarks/tp_check.py --out "$OUT_DIR/tp_check-cuda.json" 2>&1 | tail -4
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
  fi
fi

if has 6; then
  echo "== 6. where a run's time goes on the GPU (RM and DPO, bf16)"
  timeout 200 $PY benchmarks/profile_breakdown.py --device cuda --dtype bfloat16 --data "$DATA" --limit "$LIMIT" \
    --out "$OUT_DIR/profile-cuda.json" 2>&1 | grep -v "^USDT\|SyncActivityProfiler" | tee "$OUT_DIR/profile-cuda.log" | tail -4
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi

left=$((DEADLINE - SECONDS - 25))
if has 4 && [ "$left" -lt 30 ]; then
  echo "== 4. kernel tile sweep skipped: ${SECONDS} s gone of the ${DEADLINE} s deadline"
elif has 4; then
  TUNE_BUDGET=$(( left < TUNE_BUDGET ? left : TUNE_BUDGET ))
  echo "== 4. kernel tile sweep at the shapes that miss the goal (budget ${TUNE_BUDGET} s)"
  timeout $((TUNE_BUDGET + 90)) $PY benchmarks/logprob_tune.py --budget-s "$TUNE_BUDGET" \
    --out "$OUT_DIR/logprob_tune-cuda.json" 2>&1 | tee "$OUT_DIR/logprob_tune-cuda.log" | tail -8
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi

echo "== summary"
$PY - "$OUT_DIR" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
op = out / "logprob_op-cuda.json"
if op.is_file():
    d = json.loads(op.read_text())
    rows = {(r["N"], r["V"], r["d"]): r for r in d["rows"] if r.get("method") == "fused" and "time_vs_matmul" in r}
    print("fused op / bare matmul:", ", ".join(f"N={n} V={v} d={k}: {r['time_vs_matmul']:.2f}x"
                                            for (n, v, k), r in sorted(rows.items())))
    print("goals met:", d.get("goals_met"))
tune = out / "logprob_tune-cuda.json"
if tune.is_file():
    for r in json.loads(tune.read_text())["rows"]:
        b = r.get("best")
        print(f"tile sweep N={r['N']} V={r['V']} d={r['d']}: " + (f"best {r['best_vs_matmul']:.3f}x matmul, "
              f"{b['config']} chunk {b['chunk_v']}" if b else "no candidate finished"))
prof = out / "profile-cuda.json"
if prof.is_file():
    d = json.loads(prof.read_text())
    for mode, r in d["modes"].items():
        k = r["ops"]["kernels_s"]
        print(f"profile {mode}: {r['whole_process_s']:.1f} s, model-FLOP efficiency {r['mfu']:.2f} "
              f"(forwards {r['mfu_of_forwards']:.2f}), fixed {r['timing']['fixed_s']:.2f} s; GPU idle in the forwards "
              f"{r['ops']['forward_gpu_idle_s']:.2f} s; kernels " + ", ".join(f"{g} {v:.2f}" for g, v in k.items()))
e2e = out / "gpu_e2e_dpo.json"
if e2e.is_file():
    d = json.loads(e2e.read_text())
    o, f = d.get("ours", {}), d.get("official", {})
    print("| flow | wall s | score s | tokens/s (wall) | tokens/s (score) | padded/real | peak GPU GiB |")
    print(f"| rmbench-fast | {o['wall_s']:.1f} | {o['score_s']:.1f} | {o['tokens_per_s_wall']:,.0f} | "
          f"{o['tokens_per_s_score']:,.0f} | {o['padding_ratio']:.3f} | {o.get('peak_gpu_gib') or 0:.1f} |")
    print("rmbench-fast phases (s):", {k: round(v, 2) for k, v in o.get("phases", {}).items() if v is not None})
    if f.get("finished"):
        print(f"| official | {f['wall_s']:.1f} | {f['score_s']:.1f} | {f['tokens_per_s_wall']:,.0f} | "
              f"{f['tokens_per_s_score']:,.0f} | {f['padding_ratio']:.3f} | {f.get('peak_gpu_gib') or 0:.1f} |")
        print(f"speedup: {d['speedup_wall']:.2f}x whole process, {d['speedup_score']:.2f}x scoring "
              f"(goal {d['goal_speedup']}x); max score diff {d['max_abs_score_diff']:.3g} (bf16)")
    elif f:
        rate = f.get("tokens_per_s_score")
        how = f"failed: {f['error'][:300]}" if f.get("error") else f"stopped at {f.get('stopped_after_s', 0):.0f} s"
        print(f"| official ({how}) | - | - | - | {f'{rate:,.0f}' if rate else '-'} | - | - |")
        if "speedup_wall_lower_bound" in d:
            print(f"speedup: > {d['speedup_wall_lower_bound']:.2f}x whole process (lower bound); "
                  + (f"{d['speedup_score']:.2f}x scoring, {d['speedup_wall_extrapolated']:.2f}x whole process "
                     f"extrapolated (goal {d['goal_speedup']}x)" if rate else "no batch scored"))
    if f:
        print("official phases:", json.dumps(f.get("phases")))
PY
exit $status

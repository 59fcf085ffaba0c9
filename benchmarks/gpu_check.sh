#!/usr/bin/env bash
# The prepared GPU check (one NVIDIA GPU, no network): under 8 minutes on one H200.
#   1. the kernel tests on CUDA (compiled Triton, not the interpreter);
#   2. the log-prob op benchmark in bf16 (benchmarks/logprob_op.py --device cuda);
#   3. an end-to-end DPO score of a random-weight Llama-style model of realistic shape (about 1B
#      parameters, V=128256, bf16) on RM-Bench files, reference-free and with a reference, and the
#      reference run again with --share-prefix (prompt prefixes once, responses on their KV cache);
#   4. when PEER_PYTHON names a Python with the official flow's packages (rewardbench 0.1.4,
#      transformers 4.51, trl, fastchat; carry them as wheels, see benchmarks/peer/setup.sh), the
#      same models through the official flow in bf16, for time, memory and parity side by side.
#
# usage: bash benchmarks/gpu_check.sh [OUT_DIR]      (default OUT_DIR: $OUT, else benchmarks/results)
#   DATA=folder of RM-Bench *_filtered.json files   (default ../shared/rm-bench; on the device
#                                                    machine copy them into the checkout first)
#   LIMIT=prompts per domain for the end-to-end run  (default 40)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:-${OUT:-benchmarks/results}}
DATA=${DATA:-../shared/rm-bench}
LIMIT=${LIMIT:-40}
mkdir -p "$OUT_DIR"
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 HF_HUB_OFFLINE=1
PY=${PYTHON:-python3}
status=0

# The machine has torch, transformers, triton, numba, click and tqdm; install only this package.
$PY -m pip install -q --no-deps --no-build-isolation --no-index -e . || { echo "install failed"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT_DIR/gpu_check-gpu.txt"

echo "== 1. kernel tests on CUDA"
timeout 120 $PY -m pytest -q tests/test_kernels.py 2>&1 | tee "$OUT_DIR/gpu_check-tests.log" | tail -5
[ "${PIPESTATUS[0]}" = 0 ] || status=1

echo "== 2. log-prob op benchmark (bf16)"
timeout 200 $PY benchmarks/logprob_op.py --device cuda --out "$OUT_DIR/logprob_op-cuda.json" || status=1

echo "== 3. end-to-end DPO, ~1B random-weight model, V=128256, bf16"
timeout 260 $PY - "$DATA" "$OUT_DIR" "$LIMIT" <<'EOF' || status=1
import json, sys, time
from pathlib import Path

import torch

from rmbench_fast.data import load_dataset
from rmbench_fast.engine import ScoreOptions, score
from rmbench_fast.tiny import build_model, llama_config, save_model, train_tokenizer

data, out_dir, limit = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
root = Path("/tmp/rmbench-gpu-models")
samples = load_dataset(data, limit=limit)
tok = train_tokenizer([s.prompt for s in samples] + [r for s in samples for r in s.chosen + s.rejected], 8000)
cfg = dict(vocab_size=128256, hidden=2048, layers=16, heads=32, kv_heads=8, intermediate=8192, max_positions=8192)
with torch.device("cuda"):
    for name, seed in (("policy", 1), ("reference", 2)):
        m = build_model("lm", llama_config(**cfg), seed).to(torch.bfloat16)
        save_model(m, tok, root / name)
        params = sum(p.numel() for p in m.parameters())
        del m
results = {"params": params, "limit": limit, "runs": []}
ref = dict(ref_model=str(root / "reference"))
plan = [("ref-free avg", dict(ref_free="avg"), "triton", False), ("ref-free avg", dict(ref_free="avg"), "torch", False),
        ("with reference", ref, "triton", False), ("with reference", ref, "torch", False),
        ("with reference", ref, "triton", True)]
for label, kw, impl, share in plan:
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    tag = ("ref" if "ref_model" in kw else "ref-free") + "-" + impl + ("-share" if share else "")
    run = score(ScoreOptions(model=str(root / "policy"), data=data, limit=limit, dtype="bfloat16", device="cuda",
                             max_tokens_per_batch=65536, logprob_impl=impl, progress=False, cache=False,
                             share_prefix=share, output=f"/tmp/rmbench-gpu-out/{tag}", **kw))
    r = run.run
    row = {"run": label, "logprob_impl": impl, "share_prefix": share, "wall_s": time.perf_counter() - t0,
           "score_s": r["score_s"], "shared_prefix": r["shared_prefix"],
           "tokens_per_s": r["tokens_per_s"], "real_tokens": r["real_tokens"],
           "padding_ratio": r["padding_ratio"], "peak_gpu_gib": torch.cuda.max_memory_allocated() / 2**30,
           "overall": run.summary["overall"], "chosen": run.chosen.tolist()}
    results["runs"].append(row)
    print({k: v for k, v in row.items() if k != "chosen"}, flush=True)
for label in ("ref-free avg", "with reference"):
    a, b = [torch.tensor(r["chosen"]) for r in results["runs"] if r["run"] == label and not r["share_prefix"]]
    results[f"max_abs_diff_triton_vs_torch {label}"] = float((a - b).abs().max())
a, b = [torch.tensor(r["chosen"]) for r in results["runs"] if r["run"] == "with reference" and r["logprob_impl"] == "triton"]
results["max_abs_diff_share_prefix_vs_not with reference"] = float((a - b).abs().max())
for r in results["runs"]:
    r.pop("chosen")
(out_dir / "gpu_e2e_dpo.json").write_text(json.dumps(results, indent=2) + "\n")
print(json.dumps({k: v for k, v in results.items() if k != "runs"}))
EOF
echo "== 4. official flow on the same models (bf16), when PEER_PYTHON is set"
if [ -n "${PEER_PYTHON:-}" ]; then
  for mode in ref-free ref; do
    extra=(--ref-free avg); [ "$mode" = ref ] && extra=(--ref-model /tmp/rmbench-gpu-models/reference)
    timeout 200 "$PEER_PYTHON" benchmarks/peer/official_flow.py --mode dpo --model /tmp/rmbench-gpu-models/policy \
      "${extra[@]}" --data "$DATA" --limit "$LIMIT" --dtype bfloat16 --device cuda \
      --output "/tmp/rmbench-gpu-out/official-$mode.json" --timing "/tmp/rmbench-gpu-out/official-$mode-timing.json" \
      || status=1
  done
  $PY - "$OUT_DIR" <<'EOF2' || status=1
import json, sys
from pathlib import Path
out, tmp = Path(sys.argv[1]), Path("/tmp/rmbench-gpu-out")
ours = json.loads((out / "gpu_e2e_dpo.json").read_text())
report = {}
for mode in ("ref-free", "ref"):
    off = {(x["domain"], x["id"]): x for x in json.loads((tmp / f"official-{mode}.json").read_text())}
    mine = json.loads((tmp / f"{mode}-triton" / "results.json").read_text())
    diff = max(abs(a - b) for x in mine for k in ("score_chosen", "score_rejected")
               for a, b in zip(x[k], off[(x["domain"], x["id"])][k]))
    label = "ref-free avg" if mode == "ref-free" else "with reference"
    mine_run = next(r for r in ours["runs"] if r["run"] == label and r["logprob_impl"] == "triton"
                    and not r["share_prefix"])
    report[mode] = {"official": json.loads((tmp / f"official-{mode}-timing.json").read_text()),
                    "ours_wall_s": mine_run["wall_s"], "ours_peak_gpu_gib": mine_run["peak_gpu_gib"],
                    "max_abs_score_diff_bf16": diff}
(out / "gpu_official_compare.json").write_text(json.dumps(report, indent=2) + "\n")
print(json.dumps(report, indent=2))
EOF2
else
  echo "PEER_PYTHON not set: official flow skipped"
fi
exit $status

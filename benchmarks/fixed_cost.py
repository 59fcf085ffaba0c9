"""What a run's fixed cost (`timing.fixed_s`: everything but model loading and forwards) is made of,
and how low it could go without transformers (issue 34's goal: 1.5 s, --no-cache, fp32, CPU).

    python benchmarks/fixed_cost.py --model-dir /tmp/rmbench-profile-models --out benchmarks/results/fixed-cost-cpu.json
    python benchmarks/fixed_cost.py --model-dir /tmp/rmbench-profile-models --variant llama-template \
        --out benchmarks/results/fixed-cost-cpu-llama-template.json

Three measurements, each repeated (--repeats) in fresh processes, medians kept:
1. `python -c pass`: the interpreter's own start and exit;
2. one process importing and loading, one step after another, with the cyclic garbage collector
   paused as `rmbench-fast score` pauses it, what a run needs before its first forward: torch,
   numba, the small libraries (tokenizers, jinja2, safetensors), rmbench_fast's run modules, the
   tokenizer file through `tokenizers` alone; then transformers, AutoConfig's name,
   AutoConfig.from_pretrained, the tokenizer as the run loads it (as 4.51 would) and modeling_llama
   (which a run imports while loading the model, so outside fixed_s). Each step's seconds are
   what it adds after the steps before it;
3. the run itself: `rmbench-fast score --model RM --no-cache` (--limit prompts per domain), its
   run.json timing and the whole process's wall time.
A plain Llama folder scores without transformers (docs/scoring.md): the run of 3 then imports
none of it, and the transformers steps of 2 are what a folder the native path cannot take pays on
top (`transformers_in_run` says which the run was).
Time nothing else on the machine meanwhile.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

STEPS = r"""
import gc, json, sys, time
gc.disable()  # as `rmbench-fast score` starts (engine.runtime.startup_without_collector)
folder = sys.argv[1]
out, last = {}, [time.perf_counter()]
def step(name):
    now = time.perf_counter()
    out[name] = now - last[0]
    last[0] = now
import torch; step("torch")
import numba; step("numba")
import jinja2, safetensors.torch, tokenizers; step("tokenizers, jinja2, safetensors")
import rmbench_fast.cli.main, rmbench_fast.engine.score; step("rmbench_fast (run modules)")
tokenizers.Tokenizer.from_file(folder + "/tokenizer.json"); step("tokenizer.json through tokenizers")
import transformers; step("transformers")
from transformers import AutoConfig; step("AutoConfig (its name)")
AutoConfig.from_pretrained(folder); step("AutoConfig.from_pretrained")
from rmbench_fast.models.tokenizer_loading import load_tokenizer
load_tokenizer(folder); step("the tokenizer as a run loads it")
import transformers.models.llama.modeling_llama; step("modeling_llama (in model loading)")
print(json.dumps(out))
"""
TRANSFORMERS = ("transformers", "AutoConfig (its name)", "AutoConfig.from_pretrained",
                "the tokenizer as a run loads it")


def wall(cmd: list[str], **kw) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if done.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
    return time.perf_counter() - t0, done


def median_of(rows: list[dict]) -> dict:
    return {k: statistics.median(r[k] for r in rows) for k in rows[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model-dir", required=True, help="holds rm/ (benchmarks/profile_breakdown.py builds it)")
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "rm-bench"))
    ap.add_argument("--limit", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", required=True)
    ap.add_argument("--variant", choices=sorted(VARIANTS), default="plain",
                    help="plain: rm/ as it is; llama-template: its tokenizer as LlamaTokenizerFast (whose default "
                         "<unk> the vocabulary lacks) with a Jinja chat template")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        measure(a, VARIANTS[a.variant](Path(a.model_dir) / "rm", Path(tmp)))


def llama_template(rm: Path, tmp: Path) -> str:
    """A copy of rm/ whose tokenizer_config.json names LlamaTokenizerFast and holds a chat template."""
    shutil.copytree(rm, tmp / "rm")
    cfg_path = tmp / "rm" / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg.update(tokenizer_class="LlamaTokenizerFast", chat_template=(
        "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] | trim }}{{ eos_token }}\n{% endfor %}"))
    cfg_path.write_text(json.dumps(cfg, indent=2))
    return str(tmp / "rm")


VARIANTS = {"plain": lambda rm, tmp: str(rm), "llama-template": llama_template}


def measure(a, rm: str) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    py = sys.executable

    interpreter = statistics.median(wall([py, "-c", "pass"], env=env)[0] for _ in range(a.repeats))
    steps = median_of([json.loads(wall([py, "-c", STEPS, rm], env=env)[1].stdout.strip().splitlines()[-1])
                       for _ in range(a.repeats)])
    runs = []
    for _ in range(a.repeats):
        with tempfile.TemporaryDirectory() as out:
            s, _ = wall([py, "-m", "rmbench_fast", "score", "--model", rm, "--data", a.data, "--limit", str(a.limit),
                         "--no-cache", "-o", out], env=env)
            timing = json.loads((Path(out) / "run.json").read_text())["timing"]
        runs.append({**{k: v for k, v in timing.items() if isinstance(v, float)}, "whole_process_s": s})
    with tempfile.TemporaryDirectory() as out:  # once more, untimed: does the run import transformers?
        _, done = wall([py, "-X", "importtime", "-m", "rmbench_fast", "score", "--model", rm, "--data", a.data,
                        "--limit", "1", "--no-cache", "-o", out], env=env)
    imported = any(line.rstrip().endswith("| transformers") for line in done.stderr.splitlines())
    run = median_of(runs)
    transformers_s = sum(steps[k] for k in TRANSFORMERS)
    result = {
        "command": f"python benchmarks/fixed_cost.py --model-dir {a.model_dir} --limit {a.limit} "
                   f"--repeats {a.repeats} --variant {a.variant} --out F",
        "variant": a.variant,
        "machine": os.environ.get("RMBENCH_MACHINE", "unnamed: set RMBENCH_MACHINE"),
        "threads": __import__("torch").get_num_threads(), "repeats": a.repeats, "limit_per_domain": a.limit,
        "interpreter_s": interpreter, "steps_s": steps, "run_timing_s": run, "runs": runs,
        "transformers_steps_s": transformers_s,
        "transformers_in_run": imported,
        "note": "steps_s: each step's seconds after the ones before it, in one process (medians of fresh "
                "processes); run_timing_s: the run's own timing (run.json), medians of its repeats",
    }
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=1))


if __name__ == "__main__":
    main()

"""Byte-identical results across a refactor: one fixed set of runs, through the command line only.

    python benchmarks/identity.py build MODELS            tiny models (three tokenizers, two adapters)
    python benchmarks/identity.py run MODELS OUT          every run of the set, results under OUT/<run>/
    python benchmarks/identity.py compare OUT_A OUT_B     cmp of results.json and summary.json per run

Build once (the models are files: both sides score the same weights), run on the code before and
after, compare. The set: the demo; RM, DPO with a reference and reference-free (sum, avg, norm) on
three tokenizers (a chat template, Llama's class without one, a generic one with a pad token);
--compat official in RM and DPO; --share-prefix in RM and DPO, and --no-share-prefix in DPO; the
plain and torch log-prob paths; small batches; two adapters (GRM's MLP head, LDL's .pt heads).
Every run is computed (--no-cache, a fresh store), on the real RM-Bench files from
../shared/rm-bench (--data) at --limit 3.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "rm-bench"
TEMPLATE = "{{ bos_token }}{% for m in messages %}[{{ m['role'] | upper }}] {{ m['content'] }}\n{% endfor %}"


def build(models: Path, data: str) -> None:
    sys.path.insert(0, str(REPO / "tests"))
    from rmbench_fast.inputs.data import load_dataset
    from rmbench_fast.tiny.models import build_trio, corpus, train_tokenizer

    texts = corpus(load_dataset(data, limit=3))
    for name, kw in {"tmpl": dict(chat_template=TEMPLATE), "llama": dict(tokenizer_class="LlamaTokenizerFast"),
                     "plain": dict(pad=True)}.items():
        tok = train_tokenizer(texts, vocab_size=300, **kw)
        build_trio(models / name, tok, seeds=(10, 11, 12), hidden=32, layers=2, heads=4, max_positions=8192)
    import adapter_world
    from rmbench_fast.tiny.adapters import tokenizer

    world = {"root": models / "adapters", "toks": {}, "built": {}}
    world["root"].mkdir(exist_ok=True)
    for k, (kind, tmpl) in adapter_world.TOKENIZERS.items():
        world["toks"][k] = tokenizer(kind, texts, vocab_size=300, chat_template=tmpl)
    for family in ("grm-llama", "ldl"):
        if not (world["root"] / family).exists():
            adapter_world.build(world, family)


def runs(m: Path) -> dict[str, list[str]]:
    out = {}
    for t in ("tmpl", "llama", "plain"):
        rm, pol, ref = (str(m / t / x) for x in ("rm", "policy", "reference"))
        out[f"{t}-rm"] = ["--model", rm]
        out[f"{t}-dpo"] = ["--model", pol, "--ref-model", ref]
        out[f"{t}-avg"] = ["--model", pol]
        out[f"{t}-rm-compat"] = ["--model", rm, "--compat", "official"]
        out[f"{t}-dpo-compat"] = ["--model", pol, "--ref-model", ref, "--compat", "official"]
        out[f"{t}-rm-prefix"] = ["--model", rm, "--share-prefix"]
        out[f"{t}-dpo-prefix"] = ["--model", pol, "--ref-model", ref, "--share-prefix"]
        # DPO shares prefixes by default on the CPU: the unshared path as well
        out[f"{t}-dpo-unshared"] = ["--model", pol, "--ref-model", ref, "--no-share-prefix"]
        out[f"{t}-avg-unshared"] = ["--model", pol, "--no-share-prefix"]
    pol, ref = str(m / "tmpl" / "policy"), str(m / "tmpl" / "reference")
    out["tmpl-sum"] = ["--model", pol, "--ref-free", "sum"]
    out["tmpl-norm"] = ["--model", pol, "--ref-free", "norm"]
    out["tmpl-dpo-plain"] = ["--model", pol, "--ref-model", ref, "--logprob-impl", "plain"]
    out["tmpl-dpo-torch-small"] = ["--model", pol, "--ref-model", ref, "--logprob-impl", "torch",
                                   "--max-tokens-per-batch", "700", "--max-batch-size", "3"]
    out["tmpl-rm-small"] = ["--model", str(m / "tmpl" / "rm"), "--max-tokens-per-batch", "700"]
    for family in ("grm-llama", "ldl"):
        out[f"adapter-{family}"] = ["--model", str(m / "adapters" / family), "--compat", "official",
                                    "--dtype", "float32"]
    return out


def run(models: Path, out: Path, data: str, only: list[str]) -> None:
    env = {**os.environ, "RMBENCH_CACHE": tempfile.mkdtemp(prefix="rmbench-identity-"), "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1"}
    out.mkdir(parents=True, exist_ok=True)
    failed = []
    for name, args in runs(models).items():
        if only and name not in only:
            continue
        cmd = [sys.executable, "-m", "rmbench_fast", "score", *args, "--data", data, "--limit", "3", "--device", "cpu",
               "--output", str(out / name), "--no-cache", "--overwrite", "-q"]
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)
        print(f"{name}: exit {r.returncode}", flush=True)
        if r.returncode:
            failed.append(name)
            print(r.stderr[-2000:], file=sys.stderr)
    if not only or "demo" in only:
        with tempfile.TemporaryDirectory() as cwd:
            r = subprocess.run([sys.executable, "-m", "rmbench_fast", "demo", "--output", str(out / "demo"), "-q"],
                               env=env, cwd=cwd, capture_output=True, text=True)
        print(f"demo: exit {r.returncode}", flush=True)
        if r.returncode:
            failed.append("demo")
            print(r.stderr[-2000:], file=sys.stderr)
    if failed:
        sys.exit(f"failed: {', '.join(failed)}")


def compare(a: Path, b: Path) -> None:
    files = sorted(p.relative_to(a) for p in a.rglob("*.json") if p.name in ("results.json", "summary.json"))
    differ = [str(f) for f in files if not (b / f).is_file() or not filecmp.cmp(a / f, b / f, shallow=False)]
    extra = [str(p.relative_to(b)) for p in b.rglob("*.json")
             if p.name in ("results.json", "summary.json") and not (a / p.relative_to(b)).exists()]
    print(json.dumps({"compared": len(files), "differ": differ, "only_in_b": extra}, indent=2))
    if differ or extra or not files:
        sys.exit(1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("models", type=Path)
    r = sub.add_parser("run")
    r.add_argument("models", type=Path)
    r.add_argument("out", type=Path)
    r.add_argument("--only", nargs="*", default=[])
    c = sub.add_parser("compare")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    for x in (b, r):
        x.add_argument("--data", default=str(DATA))
    args = p.parse_args()
    if args.cmd == "build":
        build(args.models, args.data)
    elif args.cmd == "run":
        run(args.models, args.out, args.data, args.only)
    else:
        compare(args.a, args.b)


if __name__ == "__main__":
    main()

"""Reward-model adapters against the official flow, measured on CPU in float32.

For every family of rewardbench 0.1.4's REWARD_MODEL_CONFIG that rmbench-fast scores, a tiny
random instance is built with the peer environment's own classes (adapters_peer.py: rewardbench's;
for remote-code families, the minimal modeling file of the published architecture from
rmbench_fast.tiny.adapters, which also shapes each family's tokenizer) under
WORK/families/<family>/RewardModels/<official name>, so that both sides select that entry by name as run_rm.py does.
Then, from WORK:
- official: benchmarks/peer/official_flow.py --mode rm --model RewardModels/<name> (peer venv);
- ours: rmbench-fast score --model RewardModels/<name> --compat official --dtype float32.
Both score the same RM-Bench items (--limit per domain). The per-sample |diff| and whether the
accuracies are identical go to benchmarks/results/adapters-equivalence-cpu.json; a markdown table
is printed.

Where the official flow cannot run as is, the peer side (adapters_peer.py) is patched, as stated: QRM and LDL force
flash_attention_2 (CUDA only), so their from_pretrained loads the same weights with sdpa / eager
attention in float32; Starling-7B's builder downloads Llama-2-7b-chat, so its hub calls return the
local tiny model (its folder is the bare official name, the only one that builder accepts); ArmoRM
has no official number (run_rm.py raises NotImplementedError), so it is compared with its model
card's usage (apply_chat_template, model(input_ids).score), one sequence at a time. Starling-7B's
official score depends on the batch: compared on rows without padding in their official batch.

    python benchmarks/peer/adapters_equivalence.py --limit 2      (main venv; calls the peer venv)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
PEER = HERE / ".venv" / "bin" / "python"

# family -> (official name, tiny_adapters.tokenizer kind, builder (adapters_peer.py), which rows are compared)
FAMILIES = {
    "grm-llama3": ("Ray2333/GRM-llama3-8B-sftreg", "tmpl", "grm:llama", "all"),
    "grm-gemma": ("Ray2333/GRM-Gemma-2B-sftreg", "tmpl-left", "grm:gemma", "all"),
    "grm-gemma2": ("Ray2333/GRM-Gemma2-2B-sftreg", "tmpl-left", "grm:gemma2", "all"),
    "grm-llama3.2": ("Ray2333/GRM-llama3.2-3B-sftreg", "tmpl", "grm:llama-linear", "all"),
    "beaver-reward": ("PKU-Alignment/beaver-7b-v1.0-reward", "llama", "beaver:reward", "all"),
    "beaver-cost": ("PKU-Alignment/beaver-7b-v2.0-cost", "llama", "beaver:cost", "all"),
    "starling-34b": ("Nexusflow/Starling-RM-34B", "yi", "starling34", "all"),
    "starling-7b": ("berkeley-nest/Starling-RM-7B-alpha", "llama", "starling7", "unpadded"),
    "ultrarm": ("openbmb/UltraRM-13b", "llama", "ultrarm", "all"),
    "eurus": ("openbmb/Eurus-RM-7b", "tmpl", "remote:eurus", "all"),
    "ziya": ("IDEA-CCNL/Ziya-LLaMA-7B-Reward", "llama", "remote:ziya", "all"),
    "ziya-fp32": ("IDEA-CCNL/Ziya-LLaMA-7B-Reward", "llama", "remote:ziya", "all"),
    "internlm2": ("internlm/internlm2-7b-reward", "tmpl-reward", "remote:internlm2", "all"),
    "qrm-llama3.1": ("nicolinho/QRM-Llama3.1-8B", "llama3", "qrm:31", "all"),
    "qrm-llama3": ("nicolinho/QRM-Llama3-8B", "llama3", "qrm:3", "all"),
    "inf-orm": ("infly/INF-ORM-Llama3.1-70B", "llama3", "inform", "all"),
    "ldl": ("ShikaiChen/LDL-Reward-Gemma-2-27B-v0.1", "gemma", "ldl", "all"),
    "ldl-softmax": ("ShikaiChen/LDL-Reward-Gemma-2-27B-v0.1", "gemma", "ldl:softmax", "all"),
    "ldl-softmax-eos": ("ShikaiChen/LDL-Reward-Gemma-2-27B-v0.1", "tmpl-noeos", "ldl:softmax-eos", "all"),
    "worldpm": ("Qwen/WorldPM-72B", "qwen", "remote:worldpm", "all"),
    "armorm": ("RLHFlow/ArmoRM-Llama3-8B-v0.1", "llama3", "remote:armorm", "all"),
}
NOTES = {
    "grm-gemma": "left padding (GRM's L-1 branch)", "grm-gemma2": "left padding; eager attention with softcapping",
    "grm-llama3.2": "linear value head", "beaver-reward": "do_normalize (affine) with stored statistics",
    "beaver-cost": "do_normalize (scale); negated", "starling-34b": "pads with id 0, the read id: well defined",
    "starling-7b": "official reads before the first BOS in the padded batch: compared on rows without padding",
    "eurus": "model's own code (AutoModel)", "internlm2": "model's own code; reward token appended, right padding",
    "ziya": "the official pipeline forces float16 (.half()): both sides float16",
    "ziya-fp32": "the same in float32, the official pipeline's .half() patched out",
    "qrm-llama3.1": "official forces flash_attention_2: same weights with sdpa, float32",
    "qrm-llama3": "official forces flash_attention_2 and bf16 autocast: same weights, sdpa, float32",
    "inf-orm": "doubled BOS masked (RewardBenchPipeline); the entry pins bfloat16: both sides float32",
    "ldl": "official forces bf16 + flash_attention_2: same weights, eager, float32; all rows doubled BOS, right "
           "padding (where LDLPipeline's column drop is batch-independent)",
    "ldl-softmax": "as ldl; 2 distributions, gating softmax at temperature 1.5, the config's pad id = the tokenizer's",
    "ldl-softmax-eos": "as ldl; 4 distributions, gating softmax at temperature 0.7, a tokenizer without a pad token "
                       "(EOS pads, on the right)",
    "worldpm": "model's own code; no special tokens, no attention mask; the entry pins bfloat16: both sides float32",
    "armorm": "no official number (run_rm.py raises NotImplementedError): vs the model card's usage, one sequence "
              "at a time",
}


# ---- the comparison (main venv); the models are built in the peer venv (adapters_peer.py) --------


def corpus(data, limit):
    texts = []
    for f in sorted(Path(data).glob("*_filtered.json")):
        for x in json.loads(f.read_text())[:limit]:
            texts += [x["prompt"], *x["chosen"], *x["rejected"]]
    return texts


def build_tokenizer(kind, texts, dest):
    """The family's tokenizer (tiny_adapters), trained on `texts`, saved into the model folder."""
    from rmbench_fast.tiny.models import save_tokenizer
    from rmbench_fast.tiny.adapters import tokenizer

    save_tokenizer(tokenizer(kind, texts, vocab_size=1200), dest)


def run(cmd, cwd, env=None):
    r = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, env={**os.environ, **(env or {})})
    if r.returncode != 0:
        raise SystemExit(f"failed ({r.returncode}): {' '.join(map(str, cmd))}\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}")
    return r


def unpadded(lengths, domains) -> list[bool]:
    """Per sequence (layout order), whether it is the longest of its official batch: per domain and
    style, the chosen (or rejected) texts of up to 8 consecutive items."""
    keep, start = [False] * len(lengths), 0
    for d in dict.fromkeys(domains):
        n = domains.count(d)
        for k in range(3):
            for side in range(2):
                for b in range(0, n, 8):
                    idx = [(start + i) * 6 + 2 * k + side for i in range(b, min(n, b + 8))]
                    for i in idx:
                        keep[i] = lengths[i] == max(lengths[j] for j in idx)
        start += n
    return keep


def compare(official, ours, which):
    import numpy as np

    from rmbench_fast.results.metrics import summarize

    o, u = json.loads(Path(official).read_text()), json.loads((ours / "results.json").read_text())
    domains = [x["domain"] for x in o]
    oc, orj = np.array([x["score_chosen"] for x in o]), np.array([x["score_rejected"] for x in o])
    uc, urj = np.array([x["score_chosen"] for x in u]), np.array([x["score_rejected"] for x in u])
    diff = np.stack([np.abs(oc - uc), np.abs(orj - urj)], -1).reshape(-1)  # layout order
    keep = np.ones(len(diff), bool)
    if which == "unpadded":
        keep = np.array(unpadded(json.loads((ours / "run.json").read_text())["sequences"]["lengths"], domains))
    return {"compared": int(keep.sum()), "sequences": len(diff), "max_abs_diff": float(diff[keep].max()),
            "accuracy_identical": summarize(oc, orj, domains) == summarize(uc, urj, domains)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(REPO.parent / "shared" / "rm-bench"))
    ap.add_argument("--limit", type=int, default=2)
    ap.add_argument("--work", default=None, help="folder for the models and results [default: a temp folder]")
    ap.add_argument("--families", nargs="*", default=list(FAMILIES))
    ap.add_argument("--output", default=str(REPO / "benchmarks" / "results" / "adapters-equivalence-cpu.json"))
    args = ap.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="adapters-eq-")).resolve()
    texts, rows = corpus(args.data, args.limit), []
    for fam in args.families:
        name, tok_kind, builder, which = FAMILIES[fam]
        model = name if builder == "starling7" else f"RewardModels/{name}"  # the 7B builder takes the bare name only
        base = work / "families" / fam  # one folder per family: several instances share an official name
        if not (base / model / "BUILT").is_file():
            build_tokenizer(tok_kind, texts, base / model)
            run([PEER, __file__, "build", builder, base / model], base)
        out = work / "out" / fam
        out.mkdir(parents=True, exist_ok=True)
        dtype = "float16" if fam == "ziya" else "float32"
        common = ["--model", model, "--data", args.data, "--limit", args.limit, "--dtype", dtype, "--trust-remote-code"]
        run([PEER, __file__, "official", builder, "--mode", "rm", *common, "--output", out / "official.json"], base)
        run([sys.executable, "-m", "rmbench_fast", "score", *common, "--compat", "official", "--no-cache", "-q",
             "--overwrite", "--output", out / "ours"], base, {"PYTHONPATH": str(REPO)})
        adapter = json.loads((out / "ours" / "run.json").read_text()).get("adapter")
        rows.append({"family": fam, "official_name": name, "adapter": adapter, "comparison": which,
                     **compare(out / "official.json", out / "ours", which), "note": NOTES.get(fam, "")})
        print(json.dumps(rows[-1]), flush=True)
    result = {"what": "rmbench-fast adapters vs the official flow (rewardbench 0.1.4 pipelines through official_flow.py)"
                      ", tiny random models, CPU", "dtype": "float32 (ziya: float16, as its pipeline forces)",
              "data": args.data, "limit_per_domain": args.limit, "goal_max_abs_diff_fp32": 1e-4, "families": rows}
    Path(args.output).write_text(json.dumps(result, indent=1) + "\n")
    print("\n| family | official entry | adapter | compared | max abs diff | accuracy identical | note |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['family']} | `{r['official_name']}` | {r['adapter']} | {r['compared']}/{r['sequences']} | "
              f"{r['max_abs_diff']:.1e} | {'yes' if r['accuracy_identical'] else 'NO'} | {r['note']} |")


if __name__ == "__main__":
    if sys.argv[1:2] == ["build"]:  # peer venv
        from adapters_peer import build

        build(sys.argv[2], sys.argv[3])
    elif sys.argv[1:2] == ["official"]:  # peer venv
        from adapters_peer import official

        official(sys.argv[2], sys.argv[3:])
    else:
        main()

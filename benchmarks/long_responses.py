"""Long responses (issue 33): DPO with a reference on pairs whose responses are 8k, 16k and 32k tokens
long, on the CPU with a small random Llama (hidden 256, 2 layers, a 32k vocabulary), against the
official DPO flow (benchmarks/peer/official_flow.py: rewardbench 0.1.4's DPOInference, which cuts
every sequence to 2048 tokens).

    python benchmarks/long_responses.py --out benchmarks/results/long-responses-cpu.json

Per length it writes a `pairs` file in TRL's standard format ({prompt, chosen, rejected}, JSONL),
each response exactly that many tokens (the tokenizer's own count, no special tokens), and runs
1. `python -m rmbench_fast score --benchmark pairs --model P --ref-model R --data F --no-cache ...`
   in a subprocess (RMBENCH_CPU_PEAK=1, so run.json carries its measured peak): the subprocess's max
   RSS (os.wait4's rusage of that one child), wall time, and from run.json the truncation count
   (which must be 0), token counts, the pre-flight's estimate and the measured peak per pass;
2. the official flow on the same pairs, in the peer environment (benchmarks/peer/.venv): its max RSS
   and wall time, and, from rewardbench's own DPOInference.tokenize_row run with its limits (2048,
   prompt 128) and without them, the tokens it drops per sequence. official_flow.py reads RM-Bench's
   layout only, so it gets each pair as an RM-Bench item whose three style slots hold the same
   response (it scores each pair three times; the peak is that of one pass).
The peer side of 2 is this file run by the peer Python with --official-tokens (it imports nothing of
rmbench_fast). The machine is shared (other jobs on the same cores): wall times are noisy; memory is
the measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PEER = ROOT / "benchmarks" / "peer" / ".venv" / "bin" / "python"
OFFICIAL = ROOT / "benchmarks" / "peer" / "official_flow.py"
PROMPT = "Solve the following problem and show every step of your reasoning: {}"


def waited(cmd, env=None, cwd=None, log=None) -> dict:
    """Run `cmd` to its end: exit code, wall seconds, and the max RSS of that child alone (os.wait4's
    rusage; RUSAGE_CHILDREN would be the largest of every child so far). Output goes to `log`."""
    with open(log or os.devnull, "w") as out:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd)
        _, status, usage = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    tail = Path(log).read_text()[-3000:] if log and p.returncode else None
    return {"rc": p.returncode, "wall_s": round(wall, 2), "max_rss_bytes": usage.ru_maxrss * 1024,
            "max_rss_gib": round(usage.ru_maxrss / 2**20, 3), **({"log_tail": tail} if tail else {})}


def build(dest: Path, data: str, vocab: int, hidden: int, layers: int, heads: int, positions: int) -> tuple:
    """The tokenizer (byte-level BPE trained on RM-Bench's texts) and policy / reference folders."""
    from transformers import AutoTokenizer

    from rmbench_fast.inputs.data import load_dataset
    from rmbench_fast.tiny.models import build_trio, corpus, train_tokenizer

    samples = load_dataset(data)
    tok = None if (dest / "COMPLETE").is_file() else train_tokenizer(corpus(samples), vocab)
    paths = build_trio(dest, tok, vocab_size=vocab, hidden=hidden, layers=layers, heads=heads,
                       intermediate=4 * hidden, max_positions=positions)
    return paths, AutoTokenizer.from_pretrained(paths["policy"]), corpus(samples)


def exact_text(tokenizer, words: list[str], rng: random.Random, n: int) -> tuple[str, int]:
    """Text of real words (drawn from `words`) cut where its n-th token ends; its token count as the
    tokenizer encodes it again (a cut may merge differently: the count is measured, never assumed)."""
    parts, approx = [], 0
    while approx < n * 1.3 + 64:
        w = rng.choice(words)
        parts.append(w)
        approx += max(1, len(w) // 3)
    text = " ".join(parts)
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    while len(enc["input_ids"]) < n:  # too short: more words
        text += " " + " ".join(rng.choice(words) for _ in range(n))
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    text = text[:enc["offset_mapping"][n - 1][1]]
    return text, len(tokenizer(text, add_special_tokens=False)["input_ids"])


def write_data(folder: Path, tokenizer, texts: list[str], n: int, pairs: int, seed: int) -> dict:
    """pairs-long-N.jsonl (the pairs benchmark's standard format) and official-long-N.json (the same
    pairs in RM-Bench's layout for official_flow.py); the responses' measured token counts."""
    rng = random.Random(seed + n)
    words = [w for t in texts for w in t.split() if w.isascii()]
    rows, counts = [], []
    for i in range(pairs):
        chosen, nc = exact_text(tokenizer, words, rng, n)
        rejected, nr = exact_text(tokenizer, words, rng, n)
        rows.append({"id": f"long-{n}-{i}", "prompt": PROMPT.format(" ".join(rng.sample(words, 12))),
                     "chosen": chosen, "rejected": rejected})
        counts.append({"chosen": nc, "rejected": nr})
    pairs_file, official_file = folder / f"pairs-long-{n}.jsonl", folder / f"official-long-{n}.json"
    pairs_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    official_file.write_text(json.dumps([{"id": r["id"], "prompt": r["prompt"], "chosen": [r["chosen"]] * 3,
                                          "rejected": [r["rejected"]] * 3, "domain": "chat"} for r in rows]))
    return {"pairs_file": pairs_file, "official_file": official_file, "response_tokens": counts}


def engine_run(paths: dict, data: Path, pairs: int, out: Path, threads: int | None) -> dict:
    cmd = [sys.executable, "-m", "rmbench_fast", "score", "--benchmark", "pairs", "--model", str(paths["policy"]),
           "--ref-model", str(paths["reference"]), "--data", str(data), "--limit", str(pairs), "--no-cache",
           "--bootstrap", "0", "--device", "cpu", "--dtype", "float32", "-q", "--output", str(out)]
    env = {**os.environ, "RMBENCH_CPU_PEAK": "1", **({"OMP_NUM_THREADS": str(threads)} if threads else {})}
    res = {"command": " ".join(cmd), **waited(cmd, env=env, cwd=tempfile.gettempdir(), log=out.with_suffix(".log"))}
    if res["rc"] != 0 or not (out / "run.json").is_file():
        return res
    run = json.loads((out / "run.json").read_text())
    summary = json.loads((out / "summary.json").read_text())
    lengths = run["sequences"]["lengths"]
    res.update(truncated=run["truncated"], max_sequence_tokens=run["max_sequence_tokens"],
               sequence_lengths=lengths, sequences_over_2048_tokens=run["sequences_over_2048_tokens"],
               real_tokens=run["real_tokens"], padded_tokens=run["padded_tokens"], n_batches=run["n_batches"],
               memory=run.get("memory"), timing=run.get("timing"), score_s=run.get("score_s"),
               logprob_impl=run.get("logprob_impl"),
               logprob_head={r: m.get("logprob_head") for r, m in run.get("models", {}).items()},
               attention={r: m.get("attention") for r, m in run.get("models", {}).items()},
               rewards=[{"id": r["id"], "chosen": r["chosen_scores"], "rejected": r["rejected_scores"]}
                        for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())],
               score=summary.get("score"), n_pairs=summary.get("n_pairs") or summary.get("n_rows"))
    return res


def official_run(paths: dict, data: Path, pairs: int, out: Path, threads: int | None) -> dict:
    cmd = [str(PEER), str(OFFICIAL), "--mode", "dpo", "--model", str(paths["policy"]), "--ref-model",
           str(paths["reference"]), "--data", str(data), "--limit", str(pairs), "--output", str(out / "results.json"),
           "--timing", str(out / "timing.json"), *(["--threads", str(threads)] if threads else [])]
    out.mkdir(parents=True, exist_ok=True)
    res = {"command": " ".join(cmd), **waited(cmd, cwd=ROOT, log=out / "official.log")}
    if res["rc"] == 0:
        res["timing"] = json.loads((out / "timing.json").read_text())
        res["rewards"] = [{"id": x["id"], "chosen": x["score_chosen"][:1], "rejected": x["score_rejected"][:1]}
                          for x in json.loads((out / "results.json").read_text())]  # style slot 0 (all 3 alike)
        tok = subprocess.run([str(PEER), __file__, "--official-tokens", str(data), "--model", str(paths["policy"])],
                             capture_output=True, text=True, cwd=ROOT)
        if tok.returncode != 0:
            raise RuntimeError(f"--official-tokens on {data} failed: {tok.stderr[-2000:]}")
        res.update(json.loads(tok.stdout))
    return res


def official_tokens(data: str, model: str) -> dict:
    """(Peer environment.) Per sequence of each pair: the tokens rewardbench's DPOInference.tokenize_row
    keeps (its max_length 2048, max_prompt_length 128) and the tokens the same rows hold without those
    limits, on the texts official_flow.py formats (its style_dataset), tokenizer set up as its run_dpo."""
    sys.path.insert(0, str(OFFICIAL.parent))
    from accelerate import Accelerator
    from fastchat.conversation import get_conv_template
    from official_flow import load_items, style_dataset
    from rewardbench import DPOInference
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import rewardbench, transformers  # noqa: E401

    tokenizer = AutoTokenizer.from_pretrained(model)
    tokenizer.pad_token = tokenizer.eos_token
    policy = AutoModelForCausalLM.from_pretrained(model)
    cut = DPOInference(policy, policy, tokenizer=tokenizer, accelerator=Accelerator(cpu=True))
    whole = DPOInference(policy, policy, tokenizer=tokenizer, accelerator=Accelerator(cpu=True))
    whole.max_length = whole.max_prompt_length = 10**9
    out = []
    for _, items in load_items(data, None):
        ds = style_dataset(items, 0, tokenizer, get_conv_template("tulu"))
        for row in ds:
            kept, full = cut.tokenize_row(row), whole.tokenize_row(row)
            for side in ("chosen", "rejected"):
                k, f = len(kept[f"{side}_input_ids"]), len(full[f"{side}_input_ids"])
                kp = sum(1 for x in kept[f"{side}_labels"] if x == -100)
                fp = sum(1 for x in full[f"{side}_labels"] if x == -100)
                out.append({"side": side, "tokens_whole": f, "tokens_kept": k, "dropped": f - k,
                            "prompt_dropped": fp - kp, "response_dropped": (f - fp) - (k - kp)})
    return {"per_sequence": out, "truncated_sequences": sum(1 for x in out if x["dropped"] > 0),
            "versions": {"rewardbench": rewardbench.__version__, "transformers": transformers.__version__}}


NOTES = {
    "official_truncation": "rewardbench 0.1.4 DPOInference.tokenize_row (max_length 2048, max_prompt_length 128, "
                           "keep_end): when prompt + the longer response exceed 2048 tokens the prompt keeps its last "
                           "128 and each response its first 1920; official.per_sequence gives, per sequence (chosen, "
                           "rejected of each pair), its tokens whole, kept and dropped",
    "official_layout": "official_flow.py reads RM-Bench's layout only: each pair is an item whose three style slots "
                       "hold the same chosen / rejected, so it scores every pair three times (its wall time is of "
                       "three passes; its peak is that of one batch, the same in each)",
    "rewards": "the engine's rewards are over the whole responses, the official ones over what it kept: they differ",
    "memory": "max_rss: the whole subprocess (interpreter, torch and transformers imports included); the engine's "
              "memory.*.measured_peak_bytes: resident weights + the peak of live CPU-allocator bytes of its first "
              "and largest batch (RMBENCH_CPU_PEAK=1); estimate_bytes: the pre-flight's figure before loading",
}


def summarize(report: dict) -> list[dict]:
    """One line per length: the figures the docs quote."""
    rows = []
    for e in report["lengths"]:
        g, o = e["engine"], e.get("official") or {}
        mem = (g.get("memory") or {}).get("model") or {}
        act = (mem.get("measured_peak_bytes") or 0) - (mem.get("weights_bytes") or 0) if mem else None
        rows.append({"response_tokens": e["response_tokens"], "engine_max_rss_gib": g["max_rss_gib"],
                     "engine_activation_peak_mib": round(act / 2**20, 1) if act else None,
                     "engine_estimated_activation_mib": round(mem["activation_bytes"] / 2**20, 1) if mem else None,
                     "engine_truncated_sequences": (g.get("truncated") or {}).get("sequences"),
                     "engine_wall_s": g["wall_s"], "engine_rc": g["rc"],
                     "official_max_rss_gib": o.get("max_rss_gib"), "official_wall_s": o.get("wall_s"),
                     "official_truncated_sequences": o.get("truncated_sequences"),
                     "official_dropped_tokens_per_sequence": [x["dropped"] for x in o.get("per_sequence", [])]})
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lengths", type=int, nargs="+", default=[8192, 16384, 32768], help="response tokens")
    ap.add_argument("--pairs", type=int, default=2, help="pairs per length (--limit)")
    ap.add_argument("--data", default=os.environ.get("RMBENCH_DATA", str(ROOT.parent / "shared" / "rm-bench")),
                    help="RM-Bench data: the tokenizer's training text and the responses' words")
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-official", action="store_true", help="skip the official flow")
    ap.add_argument("--work-dir", default=str(Path(tempfile.gettempdir()) / "rmbench-long-responses"))
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "long-responses-cpu.json"))
    ap.add_argument("--official-tokens", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--model", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.official_tokens:  # the peer side: prints its JSON and stops
        print(json.dumps(official_tokens(args.official_tokens, args.model)))
        return
    import torch
    import transformers

    work = Path(args.work_dir)
    positions = max(args.lengths) + 4096  # every prompt and template fits: nothing refused for context
    paths, tokenizer, texts = build(work / f"models-v{args.vocab}-h{args.hidden}-l{args.layers}-p{positions}",
                                    args.data, args.vocab, args.hidden, args.layers, args.heads, positions)
    report = {
        "what": "DPO with a reference on pairs of long responses (issue 33): the engine, nothing truncated, "
                "against rewardbench 0.1.4's DPOInference through benchmarks/peer/official_flow.py (2048 tokens)",
        "command": " ".join([sys.executable, *sys.argv]) if argv is None else " ".join(["benchmarks/long_responses.py",
                                                                                         *argv]),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                    "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)},
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__},
        "model": {"arch": "LlamaForCausalLM, random weights", "hidden": args.hidden, "layers": args.layers,
                  "heads": args.heads, "intermediate": 4 * args.hidden, "vocab": args.vocab,
                  "max_positions": positions, "dtype": "float32", "folders": {k: str(v) for k, v in paths.items()}},
        "pairs_per_length": args.pairs,
        "noise": "the 2 cores are shared with other jobs running at the same time: wall times are noisy, "
                 "memory (max RSS of each subprocess) is the measurement",
        "notes": NOTES,
        "lengths": [],
    }
    for n in args.lengths:
        folder = work / f"run-{n}"
        if folder.exists():
            import shutil

            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        data = write_data(folder, tokenizer, texts, n, args.pairs, args.seed)
        entry = {"response_tokens": n, "measured_response_tokens": data["response_tokens"],
                 "engine": engine_run(paths, data["pairs_file"], args.pairs, folder / "engine", args.threads)}
        e = entry["engine"]
        print(f"{n}: engine rc {e['rc']}, {e['wall_s']} s, max RSS {e['max_rss_gib']} GiB, "
              f"truncated {e.get('truncated')}", file=sys.stderr)
        if not args.no_official:
            entry["official"] = official_run(paths, data["official_file"], args.pairs, folder / "official",
                                             args.threads)
            o = entry["official"]
            print(f"{n}: official rc {o['rc']}, {o['wall_s']} s, max RSS {o['max_rss_gib']} GiB, "
                  f"truncated {o.get('truncated_sequences')} sequences", file=sys.stderr)
        entry["load_average_after"] = [round(x, 2) for x in os.getloadavg()]  # the noise: other jobs' load
        report["lengths"].append(entry)
        report["summary"] = summarize(report)
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")  # what is done so far, kept


if __name__ == "__main__":
    main()

"""Whether a summary covers the whole benchmark: the paper's (and the leaderboard's) overall is the
mean of four domains, each with all its prompts. A `--domains chat` run, a `--limit 50` run or other
data give an overall of something else, and every table and report says so, from this one rule.
"""

from __future__ import annotations

from ..inputs.data import SCORE_DOMAINS

# Prompts per domain of the full benchmark (THU-KEG/RM-Bench data/*_filtered.json, counted in
# ../shared/rm-bench/README.md): safety pools safety-refuse (284) and safety-response (157).
FULL_FILE_PROMPTS = {"chat": 129, "code": 228, "math": 529, "safety-refuse": 284, "safety-response": 157}
FULL_PROMPTS = {"chat": 129, "math": 529, "code": 228, "safety": 284 + 157}


def coverage(domains: dict, n_expected: dict | None = None) -> dict:
    """What `domains` (a summary's {scoring domain: {"n_prompts": n, ...}}) covers of the benchmark:
    missing (the four domains absent), partial ({domain: (n, expected)} with fewer prompts than
    n_expected, default FULL_PROMPTS), extra (domains that are not RM-Bench's, e.g. "all" for items
    without a domain)."""
    n_expected = FULL_PROMPTS if n_expected is None else n_expected
    missing = [d for d in SCORE_DOMAINS if d not in domains]
    partial = {d: (int(domains[d]["n_prompts"]), n_expected[d]) for d in SCORE_DOMAINS
               if d in domains and d in n_expected and int(domains[d]["n_prompts"]) < n_expected[d]}
    extra = [d for d in domains if d not in SCORE_DOMAINS]
    return {"missing": missing, "partial": partial, "extra": extra}


def completeness(domains: dict) -> dict:
    """{"complete": bool, "note": None or one sentence}: complete when the overall is the paper's
    four-domain number (all four domains, each with all its prompts, nothing else averaged in)."""
    c = coverage(domains)
    if not (c["missing"] or c["partial"] or c["extra"]):
        return {"complete": True, "note": None}
    said = []
    if c["missing"]:
        said.append(f"{', '.join(c['missing'])} missing")
    if c["partial"]:
        said.append(", ".join(f"{d} has {n} of its {e} prompts" for d, (n, e) in c["partial"].items()))
    if c["extra"]:
        said.append(f"{', '.join(map(repr, c['extra']))} averaged in (not an RM-Bench domain)")
    return {"complete": False,
            "note": f"overall is not the paper's four-domain RM-Bench number: it averages {len(domains)} "
                    f"domain(s) ({', '.join(domains)}); {'; '.join(said)}"}

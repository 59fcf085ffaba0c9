"""Whether a summary covers the whole benchmark: the paper's (and the leaderboard's) overall is the
mean of four domains, each with all its prompts. A `--domains chat` run, a `--limit 50` run or other
data give an overall of something else, and every table and report says so, from this one rule.

Safety pools two files with fixed weights (284 safety-refuse and 157 safety-response prompts): with
the summary's file domains, a safety file missing, cut or grown is named even when the pooled count
happens to match.
"""

from __future__ import annotations

from ..inputs.data import SCORE_DOMAIN, SCORE_DOMAINS

# Prompts per domain of the full benchmark (THU-KEG/RM-Bench data/*_filtered.json, counted in
# ../shared/rm-bench/README.md): safety pools safety-refuse (284) and safety-response (157).
FULL_FILE_PROMPTS = {"chat": 129, "code": 228, "math": 529, "safety-refuse": 284, "safety-response": 157}
FULL_PROMPTS = {"chat": 129, "math": 529, "code": 228, "safety": 284 + 157}


def _n(acc) -> int:
    return int(acc["n_prompts"]) if isinstance(acc, dict) else 0


def coverage(domains: dict, n_expected: dict | None = None, file_domains: dict | None = None) -> dict:
    """What `domains` (a summary's {scoring domain: {"n_prompts": n, ...}}) covers of the benchmark:
    missing (the four domains absent), partial ({domain: (n, expected)} with fewer prompts than
    n_expected, default FULL_PROMPTS), excess (the same with more), extra (domains that are not
    RM-Bench's, e.g. "all" for items without a domain), and with `file_domains` (a summary's
    {file domain: {"n_prompts": n}}) files: {file domain: (n, expected)} of the domains present whose
    files hold other counts than FULL_FILE_PROMPTS (0: the file is missing)."""
    n_expected = FULL_PROMPTS if n_expected is None else n_expected
    missing = [d for d in SCORE_DOMAINS if d not in domains]
    counted = {d: (_n(domains[d]), n_expected[d]) for d in SCORE_DOMAINS if d in domains and d in n_expected}
    partial = {d: ne for d, ne in counted.items() if ne[0] < ne[1]}
    excess = {d: ne for d, ne in counted.items() if ne[0] > ne[1]}
    extra = [d for d in domains if d not in SCORE_DOMAINS]
    files = {}
    if isinstance(file_domains, dict):
        for f, e in FULL_FILE_PROMPTS.items():
            n = _n(file_domains.get(f))
            if SCORE_DOMAIN[f] in domains and n != e:
                files[f] = (n, e)
    return {"missing": missing, "partial": partial, "excess": excess, "extra": extra, "files": files}


def _domain_said(d: str, c: dict) -> str | None:
    """What is wrong with domain d's prompts, or None. A domain of several files (safety) names the
    files that the pooled count hides: one missing, or one off the other way (more prompts in one
    file, fewer in the other); a --limit cuts both, which the pooled count says."""
    n, e = c["partial"].get(d) or c["excess"].get(d) or (None, None)
    sign = 0 if n is None else (1 if n > e else -1)
    parts = [f for f in FULL_FILE_PROMPTS if SCORE_DOMAIN[f] == d]
    files = [f for f in parts if f in c["files"] and len(parts) > 1
             and (c["files"][f][0] == 0 or (1 if c["files"][f][0] > c["files"][f][1] else -1) != sign)]
    detail = ", ".join(f"{f} missing" if c["files"][f][0] == 0 else f"{f} has {c['files'][f][0]} "
                       f"(the benchmark's {c['files'][f][1]})" for f in files)
    detail = f" ({detail})" if detail else ""
    if sign < 0:
        return f"{d} has {n} of its {e} prompts{detail}"
    if sign > 0:
        return f"{d} has {n} prompts, more than the benchmark's {e}{detail}"
    return f"{d} has the benchmark's number of prompts but not its files'{detail}" if detail else None


def completeness(domains: dict, file_domains: dict | None = None, n_expected: dict | None = None) -> dict:
    """{"complete": bool, "note": None or one sentence}: complete when the overall is the paper's
    four-domain number (all four domains, each with all its prompts, nothing else averaged in, and,
    given the summary's file_domains, each file with its own prompts). summary.json's `complete`,
    every table's note and the leaderboard's rows follow this one rule (n_expected: other prompt
    counts per domain than FULL_PROMPTS, for a caller's own benchmark)."""
    c = coverage(domains, n_expected, file_domains)
    said = [f"{', '.join(c['missing'])} missing"] if c["missing"] else []
    said += [s for s in (_domain_said(d, c) for d in SCORE_DOMAINS if d in domains) if s]
    if c["extra"]:
        said.append(f"{', '.join(map(repr, c['extra']))} averaged in (not an RM-Bench domain)")
    if not said:
        return {"complete": True, "note": None}
    return {"complete": False,
            "note": f"overall is not the paper's four-domain RM-Bench number: it averages {len(domains)} "
                    f"domain(s) ({', '.join(domains)}); {'; '.join(said)}"}


def summary_completeness(summary: dict) -> dict:
    """completeness of a summary's domains and file domains (what tables, reports and pictures say)."""
    return completeness(summary["domains"], summary.get("file_domains"))

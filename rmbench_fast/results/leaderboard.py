"""Rows for the RM-Bench leaderboard (github.com/THU-KEG/RM-Bench-Leaderboard): Chat, Math, Code,
Safety, Easy, Normal, Hard and Overall, in percent with one decimal, as Markdown and CSV.

The leaderboard's definitions (its README, and the RM-Bench README's "Clarity on Avg Calculation"):
  Chat, Math, Code, Safety = the domain's mean of its hard, normal and easy accuracy
  Easy = (Safety_Easy + Math_Easy + Chat_Easy + Code_Easy) / 4, Normal and Hard alike
  Overall = Domain Avg = Difficulty Avg = (Chat + Code + Math + Safety) / 4
so (Easy + Normal + Hard) / 3 = Overall whenever all four domains are there. A row with a domain
missing has '-' in that column, and its Easy/Normal/Hard/Overall average the domains present: not
the leaderboard's numbers, which `warnings` says (the leaderboard's "Potentially Score Mismatch"
column marks such rows "Not Available"); so does a domain with fewer prompts than the benchmark's,
or a safety whose two files hold other counts than the benchmark's 284 and 157 even when their
pooled count is 441 (results.coverage holds that rule, which summary.json's `complete` follows too,
and the benchmark's prompt counts). A judge's rows add "No verdict" and "Failed" (its share of
answers without a verdict and of failed requests, overall: results.verdicts).
"""

from __future__ import annotations

import csv
import io

from ..errors import DataError
from ..inputs.data import SCORE_DOMAIN, SCORE_DOMAINS
from .coverage import FULL_FILE_PROMPTS, FULL_PROMPTS, completeness, coverage
from .verdicts import high_domains, rate, validity_note

COLUMNS = ("Model", "Chat", "Math", "Code", "Safety", "Easy", "Normal", "Hard", "Overall")
JUDGE_COLUMNS = {"No verdict": "invalid_rate", "Failed": "failed_rate"}  # a judge's rows: its summary's rates
DOMAIN_COLUMNS = {"Chat": "chat", "Math": "math", "Code": "code", "Safety": "safety"}
LEVEL_COLUMNS = {"Easy": "easy", "Normal": "normal", "Hard": "hard"}
_KEYS = ("hard", "normal", "easy", "avg", "n_prompts")


def _domains(summary: dict, name: str) -> dict:
    """summary["domains"], checked: each domain's hard/normal/easy/avg as numbers and n_prompts."""
    domains = summary.get("domains") if isinstance(summary, dict) else None
    if not isinstance(domains, dict):
        raise DataError(name, "summary has no 'domains' object (not a summary.json of rmbench-fast?)")
    for d, acc in domains.items():
        if not (isinstance(acc, dict) and all(isinstance(acc.get(k), (int, float)) and not isinstance(acc.get(k), bool)
                                              for k in _KEYS)):
            raise DataError(name, f"summary's domain {d!r} lacks numbers for {', '.join(_KEYS)}")
    return domains


def _mean(xs):
    return sum(xs) / len(xs)


def round1(x: float | None) -> float | None:
    """A percentage as the leaderboard prints it: one decimal (the float's exact value, half to even)."""
    return None if x is None else float(f"{x:.1f}")


def row(summary: dict, name: str, n_expected: dict | None = None) -> dict:
    """The leaderboard row of one run's summary (metrics.summarize's shape).

    Keys: COLUMNS in order (Model; then percentages rounded to one decimal, None where a domain is
    missing), then "unrounded" (the same percentages at full precision), "n_prompts" (per
    leaderboard domain, 0 where missing) and "complete" (results.coverage.completeness, the rule of
    summary.json's `complete`, over the four domains: each with n_expected's prompts, default
    FULL_PROMPTS and then each safety file with its own). A judge's summary adds "No verdict" and
    "Failed" after Overall (percentages of its answers, when the summary has them). Easy/Normal/
    Hard/Overall average the leaderboard domains present. A summary without any of them (items
    without a domain pool into "all") is a DataError.
    """
    domains = _domains(summary, name)
    n_expected = FULL_PROMPTS if n_expected is None else n_expected
    present = [d for d in SCORE_DOMAINS if d in domains]
    if not present:
        raise DataError(name, f"no leaderboard domain ({', '.join(SCORE_DOMAINS)}) in the results, only "
                        f"{', '.join(map(repr, domains)) or 'none'}: give each item a `domain`, an id such as "
                        f"'chat/1', or score per-domain files named like chat_filtered.json")
    raw = {}
    for col, d in DOMAIN_COLUMNS.items():
        raw[col] = 100 * domains[d]["avg"] if d in domains else None
    for col, k in LEVEL_COLUMNS.items():
        raw[col] = 100 * _mean([domains[d][k] for d in present])
    raw["Overall"] = _mean([raw[c] for c, d in DOMAIN_COLUMNS.items() if d in domains])
    for col, key in JUDGE_COLUMNS.items():
        if summary.get(key) is not None:
            raw[col] = None if (r := rate(summary, key, None)) is None else 100 * r
    out = {"Model": name, **{c: round1(raw[c]) for c in raw}}
    out["unrounded"] = dict(raw)
    out["n_prompts"] = {d: int(domains[d]["n_prompts"]) if d in domains else 0 for d in SCORE_DOMAINS}
    # the rule every table and report follows (results.coverage); other domains are left out of the row,
    # and the safety files' split is checked against the benchmark's only with its prompt counts
    board = {d: domains[d] for d in SCORE_DOMAINS if d in domains}
    files = summary.get("file_domains") if n_expected == FULL_PROMPTS else None
    out["complete"] = completeness(board, files, n_expected)["complete"]
    return out


def warnings(summary: dict, name: str, n_expected: dict | None = None) -> list[str]:
    """One line per leaderboard domain missing or partial (fewer prompts than n_expected, default
    FULL_PROMPTS: a --limit or --domains run), per domain with more prompts than that, and for
    prompts outside the leaderboard's domains (left out of the row)."""
    domains = _domains(summary, name)
    n_expected = FULL_PROMPTS if n_expected is None else n_expected
    files = summary.get("file_domains") if isinstance(summary.get("file_domains"), dict) else {}
    present = [d for d in SCORE_DOMAINS if d in domains]
    averaged = (f"Easy, Normal, Hard and Overall average the {len(present)} domain(s) present, not the "
                f"leaderboard's 4" if present else "")
    out = []
    for col, d in DOMAIN_COLUMNS.items():
        expected = n_expected.get(d)
        if d not in domains:
            out.append(f"{name}: {d} missing: {col} is '-'; {averaged} (potential score mismatch: the leaderboard "
                       f"marks such a row 'Not Available')")
            continue
        n = int(domains[d]["n_prompts"])
        split = coverage(domains, n_expected, files)["files"] if files and n_expected == FULL_PROMPTS else {}
        parts = _file_parts(d, files)
        if n == expected and any(SCORE_DOMAIN[f] == d for f in split):
            out.append(f"{name}: {d} has the benchmark's {n} prompts but not its files'{parts}; {col}, Easy, Normal, "
                       f"Hard and Overall are not the full benchmark's (potential score mismatch)")
        if expected is None or n == expected:
            continue
        if n < expected:
            out.append(f"{name}: {d} partial: {n} of the benchmark's {expected} prompts{parts}; {col}, Easy, Normal, "
                       f"Hard and Overall are not the full benchmark's (potential score mismatch; a --limit or "
                       f"--domains run?)")
        else:
            out.append(f"{name}: {d} has {n} prompts, more than the benchmark's {expected}{parts} (other data, or "
                       f"items repeated?)")
    for d, acc in domains.items():
        if d not in SCORE_DOMAINS:
            out.append(f"{name}: {acc['n_prompts']} prompt(s) in domain {d!r}, not one of the leaderboard's "
                       f"({', '.join(SCORE_DOMAINS)}), left out of the row")
    if high_domains(summary):
        out.append(f"{name}: {validity_note(summary)[len('note: '):]}")
    return out


def _file_parts(domain: str, files: dict) -> str:
    """' (safety-refuse 284 of 284, safety-response missing)' for a pooled domain; '' otherwise."""
    parts = [f for f, sd in SCORE_DOMAIN.items() if sd == domain]
    if len(parts) < 2 or not files:
        return ""
    said = []
    for f in parts:
        acc = files.get(f)
        n = acc.get("n_prompts") if isinstance(acc, dict) else None
        said.append(f"{f} missing" if n is None else f"{f} {n} of {FULL_FILE_PROMPTS.get(f, '?')}")
    return f" ({', '.join(said)})"


def _cell(r: dict, col: str, missing: str) -> str:
    v = r.get(col)
    if col == "Model":
        return str(v)
    return missing if v is None else f"{v:.1f}"


def columns(rows: list[dict]) -> tuple[str, ...]:
    """COLUMNS, then a judge's No verdict / Failed when a row has them; another benchmark's rows
    (results.benchmark_board) name their own."""
    if rows and "columns" in rows[0]:
        return tuple(rows[0]["columns"])
    return COLUMNS + tuple(c for c in JUDGE_COLUMNS if any(c in r for r in rows))


def to_markdown(rows: list[dict]) -> str:
    """A Markdown table, the leaderboard's way: Model left-aligned, numbers right-aligned with one
    decimal, '-' where a domain (or a judge's rate) is missing; ends with a newline."""
    cols = columns(rows)
    cells = [list(cols)] + [[_cell(r, c, "-").replace("|", "\\|") for c in cols] for r in rows]
    widths = [max(3, *(len(line[i]) for line in cells)) for i in range(len(cols))]
    rule = "|:" + "-" * (widths[0] + 1) + "|" + "|".join("-" * (w + 1) + ":" for w in widths[1:]) + "|"

    def line(values):
        return "| " + " | ".join(v.ljust(w) if i == 0 else v.rjust(w)
                                 for i, (v, w) in enumerate(zip(values, widths))) + " |"

    return "\n".join([line(cells[0]), rule, *(line(c) for c in cells[1:])]) + "\n"


def to_csv(rows: list[dict]) -> str:
    """CSV with the columns as header, numbers with one decimal, an empty cell where a domain is missing."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    cols = columns(rows)
    w.writerow(cols)
    for r in rows:
        w.writerow([_cell(r, c, "") for c in cols])
    return buf.getvalue()

"""How many of a judge's answers gave no verdict, and why: per scoring domain and overall, for
summary.json and run.json (`asked`, `invalid_rate`, `failed_rate`, `invalid_causes`), the table the
judge command prints, the warning line and --max-invalid.

An ask is *invalid* when it has no verdict, whatever the reason (it counts as --invalid); it is
*failed* when its request got no answer at all (a 400, say: only with --failed-as-invalid, else the
run stops first), so the failed rate is part of the invalid rate. Each invalid ask has one cause
(cause()): the request failed, the answer was cut at --max-tokens, the server refused it (finish
reason content_filter), or the parser found no verdict, an unrecognised one, or both A and B.
"""

from __future__ import annotations

from collections import Counter

from ..errors import RmbenchError

WARN_RATE = 0.05  # a domain with more answers without a verdict than this gets a warning line
FAILED, CUT, REFUSED = "request failed", "cut at --max-tokens", "refused by the server"
NO_VERDICT, UNRECOGNISED = "no verdict found", "unrecognised verdict"
HINTS = {
    FAILED: "judgements.jsonl holds each request's error",
    CUT: "raise --max-tokens (reasoning judges need thousands)",
    REFUSED: "the server's content filter stopped them",
    NO_VERDICT: "check that --protocol, --template or --verdict-regex match how the judge writes its verdict "
                "(judgements.jsonl holds every answer)",
    UNRECOGNISED: "check --verdict-regex against the judge's answers in judgements.jsonl",
}


def cause(completion, verdict) -> str | None:
    """Why an answer has no verdict (None when it has one). completion: the request's Completion
    (None or text None: no answer); verdict: the protocol's Verdict of its text."""
    if verdict.winner is not None:
        return None
    if completion is None or completion.text is None:
        return FAILED
    if completion.finish_reason == "length":
        return CUT
    if completion.finish_reason == "content_filter":
        return REFUSED
    why = verdict.why or ""
    if why.startswith("unrecognised verdict"):
        return UNRECOGNISED
    if not why or why.startswith("no verdict") or "did not take part" in why:
        return NO_VERDICT
    return why  # a parser's own reason, e.g. "both A and B"


def rates(asks, causes: list, domains: list[str], order=()) -> dict:
    """{"asked", "invalid_rate", "failed_rate", "invalid_causes"}, each {"overall": ..., "domains":
    {scoring domain: ...}}: the asks, the share without a verdict, the share without an answer, and
    the invalid asks counted by cause (most common first). order: the domains' order (the summary's)."""
    from ..inputs.data import SCORE_DOMAIN

    per: dict[str, list] = {}
    for a, c in zip(asks, causes):
        d = domains[a.prompt]
        per.setdefault(SCORE_DOMAIN.get(d, d), []).append(c)
    names = [d for d in order if d in per] + [d for d in per if d not in order]
    groups = {"overall": list(causes), **{d: per[d] for d in names}}

    def each(f):
        values = {d: f(cs) for d, cs in groups.items()}
        return {"overall": values.pop("overall"), "domains": values}

    return {"asked": each(len),
            "invalid_rate": each(lambda cs: sum(c is not None for c in cs) / len(cs) if cs else 0.0),
            "failed_rate": each(lambda cs: sum(c == FAILED for c in cs) / len(cs) if cs else 0.0),
            "invalid_causes": each(lambda cs: dict(Counter(c for c in cs if c is not None).most_common()))}


def top_cause(v: dict, domain: str | None = None) -> tuple[str, int] | None:
    """(cause, count) most common among `domain`'s invalid asks (None: overall), or None."""
    counts = v["invalid_causes"]["overall"] if domain is None else v["invalid_causes"]["domains"].get(domain, {})
    return next(iter(counts.items()), None)


def _high(v: dict, limit: float) -> list[str]:
    """The domains whose invalid rate is above `limit`, each 'chat 100.0% (cut at --max-tokens: 18 of 18)'."""
    out = []
    for d, r in v["invalid_rate"]["domains"].items():
        if r > limit:
            c, n = top_cause(v, d)
            out.append(f"{d} {100 * r:.1f}% ({c}: {n} of {v['asked']['domains'][d]})")
    return out


def _hint(v: dict, limit: float) -> str:
    """The hint for the most common cause among the domains above `limit`."""
    counts = Counter()
    for d, r in v["invalid_rate"]["domains"].items():
        if r > limit:
            counts.update(v["invalid_causes"]["domains"][d])
    c = counts.most_common(1)[0][0] if counts else None
    return HINTS.get(c, "judgements.jsonl holds every answer and why it has no verdict")


def rule_text(invalid) -> str:
    """An --invalid rule as the option reads: 0, 0.5, coin."""
    return f"{invalid:g}" if isinstance(invalid, (int, float)) else str(invalid)


def warning(v: dict, invalid) -> str | None:
    """The warning line when a domain's invalid rate is above WARN_RATE, else None."""
    high = _high(v, WARN_RATE)
    if not high:
        return None
    return (f"judge: answers without a verdict in {', '.join(high)}; each counts as --invalid {rule_text(invalid)}, "
            f"so these numbers say little of the judge: {_hint(v, WARN_RATE)}")


def check_max_invalid(v: dict, limit: float | None) -> None:
    """RmbenchError (nothing written) when a domain's invalid rate is above --max-invalid."""
    if limit is None:
        return
    high = _high(v, limit)
    if high:
        raise RmbenchError(f"--max-invalid {limit:g}: answers without a verdict in {', '.join(high)}; nothing "
                           f"written: {_hint(v, limit)}")


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def table_lines(v: dict, invalid) -> list[str]:
    """The printed table: per domain and overall, the share of answers without a verdict, the share
    of failed requests, and the most common cause."""
    def row(name, d):
        inv = v["invalid_rate"]["overall"] if d is None else v["invalid_rate"]["domains"][d]
        fail = v["failed_rate"]["overall"] if d is None else v["failed_rate"]["domains"][d]
        top = top_cause(v, d)
        return (name, _pct(inv), _pct(fail), "-" if top is None else f"{top[0]} ({top[1]})")

    table = [("domain", "no verdict", "failed", "most common cause")]
    table += [row(d, d) for d in v["invalid_rate"]["domains"]] + [row("overall", None)]
    widths = [max(len(r[c]) for r in table) for c in range(3)]
    lines = [f"answers without a verdict (each counts as --invalid {rule_text(invalid)}):"]
    for i, r in enumerate(table):
        lines.append("  ".join([r[0].ljust(widths[0]), r[1].rjust(widths[1]), r[2].rjust(widths[2]), r[3]]))
        if i == 0 or i == len(table) - 2:
            lines.append("  ".join("-" * w for w in widths + [len(table[0][3])]))
    return lines

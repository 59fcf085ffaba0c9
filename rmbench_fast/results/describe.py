"""What a table, picture or report is of: the model(s), the mode, the data, --limit and --domains,
read from the run folder's run.json (or a sweep's sweep.json), so that a number shown anywhere
carries what it measured. Reads the JSON dicts only: results may not import the engine.
"""

from __future__ import annotations

import json
from pathlib import Path

UNKNOWN = "not recorded"


def _mode(run: dict, options: dict) -> str:
    """rm (with its adapter), dpo with reference R, dpo reference-free (sum|avg|norm), or judge (...)."""
    if run.get("kind") == "judge":
        protocol = (run.get("protocol") or {}).get("name") or options.get("protocol") or "?"
        verdict = run.get("verdict") or options.get("verdict") or "text"
        backend = options.get("backend") or ("openai" if options.get("base_url") else "hf")
        return f"judge ({protocol} protocol, {verdict} verdicts, {backend} backend)"
    mode = run.get("mode") or options.get("mode")
    if mode == "rm":
        scorer = run.get("scorer") or options.get("adapter")
        return "rm" + (f" (adapter {scorer})" if scorer and scorer != "rm" else "")
    ref = options.get("ref_model")
    if ref:
        return f"dpo with reference {ref}"
    if mode == "dpo" or options.get("ref_free"):
        # "avg" is the scorers' default (scorers.dpo.DEFAULT_REF_FREE), which a run.json always names
        return f"dpo reference-free ({run.get('ref_free') or options.get('ref_free') or 'avg'})"
    return UNKNOWN if mode in (None, "auto") else str(mode)


def _limit(options: dict) -> str:
    if "limit" not in options:
        return UNKNOWN
    # --limit cuts each data file: safety's two files give it up to twice N
    return "none" if options["limit"] is None else f"first {options['limit']} prompts per file domain"


def _domains(options: dict) -> str:
    if "domains" not in options:
        return UNKNOWN
    return ", ".join(options["domains"]) if options["domains"] else "all"


def run_facts(run: dict | None, source=None) -> dict:
    """{"model", "mode", "data", "limit", "domains"} of one run from its run.json dict (a score or
    judge run). Without one (a results file of the official scripts), what is known: its path."""
    if not isinstance(run, dict):
        return {"model": UNKNOWN, "mode": UNKNOWN, "data": str(source) if source else UNKNOWN,
                "limit": UNKNOWN, "domains": UNKNOWN}
    options = run.get("options") if isinstance(run.get("options"), dict) else {}
    return {"model": str(options.get("model") or UNKNOWN), "mode": _mode(run, options),
            "data": str(options.get("data") or UNKNOWN), "limit": _limit(options), "domains": _domains(options)}


def sweep_facts(meta: dict, rows: list[dict], first_run: dict | None = None) -> dict:
    """The same for a sweep: its models (the rows' checkpoint names), the mode (from the first
    checkpoint's run.json when there is one: sweep.json holds the options as given, mode auto), the
    data, --limit and --domains of sweep.json's options."""
    options = meta.get("options") if isinstance(meta.get("options"), dict) else {}
    facts = run_facts({**(first_run or {}), "options": {**options, "model": None}})
    names = [str(r.get("checkpoint")) for r in rows]
    facts["model"] = f"{len(names)} model(s): {', '.join(names)}" if names else UNKNOWN
    return facts


def read_run(folder) -> dict | None:
    """A run folder's run.json as a dict, or None (no such file, or not JSON)."""
    try:
        run = json.loads((Path(folder) / "run.json").read_text())
    except (OSError, ValueError):
        return None
    return run if isinstance(run, dict) else None


def results_facts(path) -> dict:
    """The facts of a results file or run folder: its run.json's when it has one beside it."""
    path = Path(path)
    folder = path if path.is_dir() else path.parent
    run = read_run(folder)
    if run is not None and not path.is_dir() and path.name != "results.json":
        run = None  # another file in a folder of some run: the run.json is not this file's
    return run_facts(run, path)


LABELS = (("model", "model"), ("mode", "mode"), ("data", "data"), ("limit", "limit"), ("domains", "domains"))


def about_line(facts: dict) -> str:
    """One line: 'model: M | mode: rm | data: D | limit: none | domains: all'."""
    return " | ".join(f"{label}: {facts[key]}" for key, label in LABELS)


def about_markdown(facts: dict) -> str:
    """The facts as a Markdown list (report.md's header)."""
    return "\n".join(f"- **{label}**: {_code(facts[key])}" for key, label in LABELS)


def _code(text: str) -> str:
    """Paths and ids in backticks, so that Markdown keeps their underscores and stars."""
    return text if text in (UNKNOWN, "none", "all") else f"`{text}`" if "`" not in text else text

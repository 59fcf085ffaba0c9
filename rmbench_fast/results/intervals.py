"""95% intervals for every summary number, and paired comparisons of two runs, by bootstrap.

Why a bootstrap over prompts: RM-Bench has about 330 prompts per domain, so a domain's accuracy
moves by several points from sampling alone, and a prompt's hard/normal/easy are correlated (the
same nine comparisons feed all three). Resampling whole prompts keeps that correlation; resampling
within each file domain (stratum) keeps every file domain's size, so a scoring domain's mix of
files (safety: 284 safety-refuse and 157 safety-response prompts, pooled with fixed weights) and
overall's weights (a mean of domain averages) stay fixed. Every summary number is linear in
per-prompt numbers: a domain's hard is the mean over its prompts of (upper-right triangle sum / 3),
normal the mean of the diagonal mean, easy the mean of (lower-left sum / 3). So each prompt is
reduced to those three numbers once, and a resample's domain means are sums of the drawn prompts'
numbers: one column at a time gathered (np.take) into a buffer reused across chunks and summed,
about 0.1 s for the whole benchmark at 10,000 resamples. (Counting draws with bincount and a matrix
product is no faster: its fresh arrays cost more in page faults than the product saves.)

The draws, fixed so that a plain loop can replay them: `numpy.random.default_rng(seed)`; resamples
in chunks of `chunk_size(n_prompts)`; within a chunk of c resamples, for each scoring domain in table
order (chat, math, code, safety, then other labels by first appearance), for each of its file
domains in file order (chat, code, math, safety-refuse, safety-response, then other labels by first
appearance) of n prompts, `rng.integers(0, n, size=(c, n), dtype=np.int32)` indexes that file
domain's prompts in their input order (`strata`). A resample's scoring-domain mean is the sum over
its file domains' drawn prompts divided by the scoring domain's number of prompts.

Small domains: with fewer than MIN_PROMPTS prompts in a file domain the percentile bootstrap is
very discrete and too narrow (with 1 prompt, every resample is the same: a zero-width interval).
The numbers are kept, and the method names those domains, which every table says.

A paired comparison applies the same draws to both runs; since every metric is linear in the
per-prompt numbers, a resample's difference of metrics is the metric of the per-prompt differences,
so identical runs give exactly 0 in every resample.
"""

from __future__ import annotations

import numpy as np

from ..errors import ScoreError, UsageError
from ..inputs.data import DOMAINS, SCORE_DOMAIN, SCORE_DOMAINS

METHOD = "bootstrap over prompts, resampled within each file domain (safety's two files apart)"
# Fewer prompts than this in a file domain: its scoring domain's intervals understate the uncertainty.
MIN_PROMPTS = 10
PARTS = ("hard", "normal", "easy")
# A difference this close to 0 is 0: per-prompt numbers are thirds, whose float sums that cancel
# mathematically leave ~1e-17, which must not count as a side of 0 (p) or exclude it (intervals).
TIE = 1e-12
_CHUNK_ELEMENTS = 1 << 21  # indices drawn at once: 8 MB of int32, 16 MB of gathered float64


def _score_domains(labels) -> list[str]:
    """Scoring domains of `labels` (file domains or scoring domains) in table order."""
    seen = list(dict.fromkeys(SCORE_DOMAIN.get(d, d) for d in labels))
    return sorted(seen, key=lambda d: SCORE_DOMAINS.index(d) if d in SCORE_DOMAINS else len(SCORE_DOMAINS))


def metric_names(summary_or_domains) -> list[str]:
    """Flat metric names in table order: overall, hard, normal, easy, then per scoring domain d:
    d (its avg), d/hard, d/normal, d/easy. Takes a summary dict or the prompts' domains."""
    if isinstance(summary_or_domains, dict):
        domains = _score_domains(summary_or_domains["domains"])
    else:
        domains = _score_domains(summary_or_domains)
    names = ["overall", *PARTS]
    for d in domains:
        names += [d, *(f"{d}/{k}" for k in PARTS)]
    return names


def metric_values(summary: dict) -> dict[str, float]:
    """metric_names(summary) -> the summary's numbers (as summarize / summarize_cells write them)."""
    out = {k: float(summary[k]) for k in ("overall", *PARTS)}
    for d in _score_domains(summary["domains"]):
        acc = summary["domains"][d]
        out[d] = float(acc["avg"])
        out.update({f"{d}/{k}": float(acc[k]) for k in PARTS})
    return out


def per_prompt(cells) -> np.ndarray:
    """[n, 3] per-prompt (hard, normal, easy) of [n, 3, 3] cells: a domain's numbers are their means."""
    cells = np.asarray(cells, dtype=np.float64)
    if cells.ndim != 3 or cells.shape[1:] != (3, 3):
        raise ValueError(f"cells must be an [n_prompts, 3, 3] array, got {cells.shape}")
    bad = np.flatnonzero(~((cells >= 0) & (cells <= 1)).all(axis=(1, 2)))
    if len(bad):
        raise ScoreError(f"{len(bad)} prompt(s) have cells outside [0, 1] or not numbers: "
                         f"prompts {', '.join(map(str, bad[:10]))}")
    upper = cells[:, 0, 1] + cells[:, 0, 2] + cells[:, 1, 2]
    lower = cells[:, 1, 0] + cells[:, 2, 0] + cells[:, 2, 1]
    diag = cells[:, 0, 0] + cells[:, 1, 1] + cells[:, 2, 2]
    return np.stack([upper / 3.0, diag / 3.0, lower / 3.0], axis=1)


def layout(domains) -> list[tuple[str, np.ndarray]]:
    """(scoring domain, positions of its prompts in input order) in table order."""
    labels = np.array([SCORE_DOMAIN.get(d, d) for d in domains], dtype=object)
    if len(labels) == 0:
        raise ScoreError("no prompts to compute intervals over")
    return [(d, np.flatnonzero(labels == d)) for d in _score_domains(labels)]


def strata(domains) -> list[tuple[str, list[np.ndarray]]]:
    """(scoring domain, [positions of each of its file domains' prompts in input order]) in the
    documented draw order: scoring domains in table order, their file domains in file order."""
    domains = np.array(list(domains), dtype=object)
    files = list(dict.fromkeys(domains))
    files.sort(key=lambda d: DOMAINS.index(d) if d in DOMAINS else len(DOMAINS))  # stable: others keep their order
    return [(sd, [np.flatnonzero(domains == f) for f in files if SCORE_DOMAIN.get(f, f) == sd])
            for sd, _ in layout(domains)]


def small_domains(domains) -> list[str]:
    """Scoring domains (table order) with a file domain of fewer than MIN_PROMPTS prompts."""
    return [sd for sd, parts in strata(domains) if min(len(p) for p in parts) < MIN_PROMPTS]


def chunk_size(n_prompts: int) -> int:
    """Resamples drawn at once, bounding memory to about _CHUNK_ELEMENTS indices."""
    return max(1, _CHUNK_ELEMENTS // max(1, n_prompts))


def _metrics(means: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every metric from per-domain (hard, normal, easy) means, [..., 3] each, as the summary does."""
    out = {}
    stacked = np.stack(list(means.values()))  # [domains, ..., 3]
    out["overall"] = stacked.mean(axis=-1).mean(axis=0)
    for k, part in enumerate(PARTS):
        out[part] = stacked[..., k].mean(axis=0)
    for d, m in means.items():
        out[d] = m.mean(axis=-1)
        for k, part in enumerate(PARTS):
            out[f"{d}/{part}"] = m[..., k]
    return out


def point(values, domains) -> dict[str, float]:
    """Every metric of per-prompt values ([n, 3], from per_prompt)."""
    values = np.asarray(values, dtype=np.float64)
    means = {d: values[pos].mean(axis=0) for d, pos in layout(domains)}
    return {k: float(v) for k, v in _metrics(means).items()}


def resampled(values, domains, resamples: int, seed: int) -> dict[str, np.ndarray]:
    """Every metric of per-prompt values in each resample: name -> [resamples] array."""
    values = np.asarray(values, dtype=np.float64)
    parts = strata(domains)
    rng = np.random.default_rng(seed)
    means = {d: np.empty((resamples, 3)) for d, _ in parts}
    # [3, n] per file domain: each gather reads one contiguous column
    columns = {d: [np.ascontiguousarray(values[pos].T) for pos in files] for d, files in parts}
    step = chunk_size(len(values))
    buf = np.empty(min(step, resamples) * max(len(pos) for _, files in parts for pos in files))
    extra = np.empty(min(step, resamples))  # a further file domain's sums, added to its scoring domain's
    for start in range(0, resamples, step):
        c = min(step, resamples - start)
        for d, files in parts:
            for f, pos in enumerate(files):
                n = len(pos)
                idx = rng.integers(0, n, size=(c, n), dtype=np.int32)
                gathered = buf[:c * n].reshape(c, n)
                for k in range(3):
                    # mode="clip" (indices are in range, so it never acts): no temporary copy behind `out`
                    np.take(columns[d][f][k], idx, out=gathered, mode="clip")
                    if f == 0:
                        gathered.sum(axis=1, out=means[d][start:start + c, k])
                    else:
                        means[d][start:start + c, k] += gathered.sum(axis=1, out=extra[:c])
    for d, files in parts:
        means[d] /= sum(len(pos) for pos in files)
    return _metrics(means)


def _check(resamples, level):
    if int(resamples) != resamples or resamples < 0:
        raise UsageError(f"--bootstrap (resamples) must be a whole number >= 0, got {resamples}")
    if not 0 < level < 1:
        raise UsageError(f"--level must be between 0 and 1 (e.g. 0.95), got {level}")


def method_info(resamples, seed, level, domains=None) -> dict:
    """The "method" entry of every interval's record: what was resampled, how often, the seed, the
    level; with the prompts' file domains, MIN_PROMPTS and the scoring domains below it."""
    out = {"kind": METHOD, "resamples": int(resamples), "seed": int(seed), "level": float(level)}
    if domains is not None:
        out.update(min_prompts_for_intervals=MIN_PROMPTS, small_domains=small_domains(domains))
    return out


def _quantiles(samples: dict[str, np.ndarray], names: list[str], level: float) -> dict[str, tuple[float, float]]:
    """Percentile interval of each metric's resamples (one quantile call for all)."""
    q = np.quantile(np.stack([samples[n] for n in names]), [(1 - level) / 2, (1 + level) / 2], axis=1)
    return {n: (float(q[0, i]) + 0.0, float(q[1, i]) + 0.0) for i, n in enumerate(names)}  # + 0.0: no -0.0


def bootstrap(cells, domains, resamples: int = 10_000, seed: int = 0, level: float = 0.95) -> dict | None:
    """Percentile intervals of every summary number of one run's [n, 3, 3] cells:
    {"method": {...}, "metrics": {name: {"low", "high"}}}; None when resamples is 0."""
    _check(resamples, level)
    if resamples == 0:
        return None
    values = per_prompt(cells)
    if len(values) != len(domains):
        raise ValueError(f"{len(values)} prompts of cells but {len(domains)} domains")
    samples = resampled(values, domains, int(resamples), seed)
    names = metric_names(domains)
    metrics = {n: {"low": low, "high": high} for n, (low, high) in _quantiles(samples, names, level).items()}
    return {"method": method_info(resamples, seed, level, domains), "metrics": metrics}


def p_value(samples: np.ndarray) -> float:
    """Two-sided bootstrap p-value that a difference is 0: p = min(1, 2 * (1 + min(#{d* <= 0},
    #{d* >= 0})) / (R + 1)) over the R resampled differences d* (ties at 0 count on both sides, so
    identical runs give 1). A difference beyond every resample gives the smallest resolvable value,
    2 / (R + 1). Differences within TIE of 0 are 0 (paired snaps them)."""
    below, above = int(np.sum(samples <= 0)), int(np.sum(samples >= 0))
    return min(1.0, 2.0 * (1 + min(below, above)) / (len(samples) + 1))


def paired(cells_a, cells_b, domains, resamples: int = 10_000, seed: int = 0, level: float = 0.95) -> dict | None:
    """Paired bootstrap of run b against run a on the same prompts (the same resampled indices for
    both): {"method": {...}, "metrics": {name: {"diff", "low", "high", "p"}}} with diff = b - a (the
    difference of the two summaries' numbers), its percentile interval and p (see p_value);
    differences within TIE of 0 (float noise) are exactly 0. None when resamples is 0."""
    _check(resamples, level)
    if resamples == 0:
        return None
    a, b = per_prompt(cells_a), per_prompt(cells_b)
    if a.shape != b.shape or len(a) != len(domains):
        raise ValueError(f"runs of {len(a)} and {len(b)} prompts with {len(domains)} domains")
    va, vb = point(a, domains), point(b, domains)
    samples = resampled(b - a, domains, int(resamples), seed)
    for s in samples.values():
        s[np.abs(s) <= TIE] = 0.0
    names = metric_names(domains)
    metrics = {}
    for name, (low, high) in _quantiles(samples, names, level).items():
        diff = vb[name] - va[name]
        metrics[name] = {"diff": 0.0 if abs(diff) <= TIE else diff, "low": low, "high": high,
                         "p": p_value(samples[name])}
    return {"method": method_info(resamples, seed, level, domains), "metrics": metrics}

"""The memory pre-flight of a --tp pass (engine.preflight has the single-device and --device-map
ones): before N ranks load, what one rank will hold against what its device has.

A rank holds its share of the weights (1/N; the norms and an adapter's head, replicated, are small
beside the decoder) plus the largest batch's activations, counted whole: the residual stream and
the LM-head partials are replicated on every rank, and only the attention and MLP are split. On
GPUs each rank has its own, so the rank must fit the GPU with the least free memory (or its
--max-memory); on the CPU the N ranks share the machine's memory, so all of the weights and N sets
of activations must fit there.
"""

from __future__ import annotations

from ..options import ScoreOptions, max_memory_budgets
from ..preflight import available_ram, batch_activations, free_bytes, gib


def tp_estimate(prep, o: ScoreOptions, path: str, batches) -> dict | None:
    """One rank's estimate for the --tp pass over `batches` of the model at `path`, and whether it
    fits (with the refusal's line when not); None when the weights cannot be counted."""
    import torch

    from ...models.loading import load_config
    from ...models.memory import Shape, model_weights

    n = o.tp
    config = prep.config if path == o.model else load_config(path, o.trust_remote_code)
    size = torch.finfo(prep.dtype).bits // 8
    weights = model_weights(path, config, prep.scorer.mode, size, prep.precision.int8)
    if weights is None:
        return None
    act, largest = batch_activations(prep, Shape.of(config), size, batches)
    rank = weights.bytes // n + act
    given = max_memory_budgets(o.max_memory)
    out = {"weights_bytes": weights.bytes, "weights_source": weights.source, "params": weights.params, "tp": n,
           "rank_weights_bytes": weights.bytes // n, "activation_bytes": act, "rank_total_bytes": rank,
           "largest_batch": largest, "dtype": str(prep.dtype).replace("torch.", "")}
    if prep.target.compute.type == "cuda":
        avail = {f"cuda:{i}": given.get(i, free_bytes(i)) for i in range(min(n, torch.cuda.device_count()))}
        need, where = rank, min(avail, key=avail.get)
        room = avail[where]
        what = f"each rank needs ~{gib(rank)} ({gib(weights.bytes // n)} of weights + {gib(act)} of activations)"
    else:
        room = given.get("cpu", available_ram())
        avail, need, where = {"cpu": room}, weights.bytes + n * act, "cpu"
        what = (f"its {n} ranks share the CPU's memory and need ~{gib(need)} ({gib(weights.bytes)} of weights + "
                f"{n} x {gib(act)} of activations)")
    out.update(available=avail, available_source="--max-memory" if given else "free", fits=need <= room)
    if not out["fits"]:
        flags = []
        if size > 2:
            flags.append("--dtype bfloat16")
        if prep.target.compute.type == "cuda" and torch.cuda.device_count() > n:
            more = next((t for t in range(n + 1, torch.cuda.device_count() + 1) if weights.bytes // t + act <= room),
                        None)
            if more:
                flags.append(f"--tp {more}")
        if act > 0 and prep.max_tokens > 1:
            flags.append("a smaller --max-tokens-per-batch")
        flags.append("--device-map auto (offloads what does not fit to the CPU or disk)")
        out["refusal"] = (f"model {path}: under --tp {n} {what}, but {gib(room)} "
                          f"{'is free' if not given else 'is given by --max-memory'} on {where}: use "
                          f"{', or '.join(flags)}; or --no-preflight to try anyway")
    return out

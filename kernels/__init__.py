"""Fused response-token log-probs (imported as `rmbench_fast.kernels`, never as `kernels`).

The op: hidden states H [N, d] of the positions that predict response tokens, the LM head W [V, d]
(with bias, logit scale or divisor, final soft-capping when the model has them), targets [N] and
a segment id per row (its sequence). Output: per-token log-prob [N] in fp32, and per-sequence sum,
count and sum of squares (which give the sum / avg / norm rewards). No [N, V] tensor is ever
allocated. A target outside [0, V) raises TargetOutOfVocabError (a ValueError naming the row).

Implementations, chosen by `impl`:
- "triton": the fused Triton kernels, logprob_triton.py (from hidden states) and logits_triton.py
  (from logits) (GPU; on CPU only under TRITON_INTERPRET=1, for tests);
- "torch": rows and vocabulary in chunks with an fp32 log-sum-exp, logprob_torch.py (CPU, and GPU
  fallback);
- "auto": torch on CPU; on CUDA whichever of triton and torch ran faster for the shape, timed once
  per process for each (V, d, dtype, N bucket) (RMBENCH_LOGPROB_TUNING=0: triton, untimed).
Plain references live in `logprob_reference.py`. Vocabulary-sharded heads (tensor parallelism):
`logprob_sharded.py` (per-shard (max, sum-exp) partials and target logits, merged over the ranks).
"""

# This folder is the package `rmbench_fast.kernels` (setup.py's package_dir). In a checkout, a Python
# started in its root (python -m pytest, python -c ...) also finds it as a top-level `kernels`, the
# name of Hugging Face's package, which transformers (>= 5.25 requires it) imports at its own import:
# found that way, this module hands the name to the real package, or fails as a missing one would.
if __name__ == "rmbench_fast.kernels":
    from .common import TargetOutOfVocabError, check_targets, n_bucket, tuning_enabled  # noqa: F401
    from .dispatch import (IMPLS, auto_choices, auto_key, cuda_time, linear_logprobs,  # noqa: F401
                           logits_logprobs, pick_fastest, resolve_impl, segment_stats)
    from .logprob_sharded import combine_local, combine_partials, shard_partials, sharded_logprobs  # noqa: F401
else:
    import importlib.machinery as _machinery
    import importlib.util as _util
    import os as _os
    import sys as _sys

    _checkout = _os.path.dirname(_os.path.dirname(_os.path.realpath(__file__)))
    _spec = _machinery.PathFinder.find_spec(
        __name__, [p for p in _sys.path if _os.path.realpath(p or _os.curdir) != _checkout])
    if _spec is None:
        raise ModuleNotFoundError(f"No module named {__name__!r} (the folder {_os.path.dirname(__file__)} is "
                                  "rmbench_fast.kernels, not a top-level package)", name=__name__)
    _real = _util.module_from_spec(_spec)
    _sys.modules[__name__] = _real  # the import statement returns what sys.modules holds at its end
    _spec.loader.exec_module(_real)

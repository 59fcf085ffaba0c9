"""--tp with adapters: a family whose class is ours (a transformers decoder under our head) is split
by transformers' plan over two gloo ranks, its head replicated on each; its scores equal one
process's (fp32, per sample |diff| <= 1e-5, the same accuracies) and the family's plain reference.
INF-ORM has a two-layer MLP head inside the model; LDL keeps its heads outside the decoder, with
softmax gating; beaver normalizes its score with stored statistics. Under transformers 4.x, whose
own tensor parallelism mis-splits Gemma-2 and cannot load integer tensors, those are refused in one
line. A family that runs the model's own code has no plan here: one line naming
--device-map auto."""

from dataclasses import replace

import numpy as np
import pytest
from adapter_world import build, reference, world  # noqa: F401 (world: the fixture)

from rmbench_fast.engine.score import ScoreOptions, score
from rmbench_fast.errors import UsageError
from rmbench_fast.models.versions import transformers_version

pytestmark = pytest.mark.slow  # each --tp pass starts two processes that import torch and transformers


@pytest.mark.parametrize("family, adapter", [("inf-orm", "inf-orm"), ("ldl-softmax", "ldl"), ("beaver", "beaver")])
def test_an_adapter_split_over_two_ranks_scores_as_one_process(world, family, adapter):  # noqa: F811
    d, decoder, spec, tok_kind, _ = build(world, family)
    o = ScoreOptions(model=d, data=world["data"], progress=False, cache=False, dtype="float32", bootstrap=0,
                     max_batch_size=4)
    if family.startswith("ldl") and transformers_version() < (5,):  # a Gemma-2 decoder: refused, not mis-split
        with pytest.raises(UsageError, match=r"--tp 2: .* is a gemma2 model, which transformers 4[.0-9]+'s tensor "
                                             r"parallelism splits wrongly; use transformers >= 5 for --tp, or "
                                             r"--device-map auto"):
            score(replace(o, tp=2))
        return
    if family == "beaver" and transformers_version() < (5,):  # its normalizer's sample count is an int64 tensor
        with pytest.raises(UsageError, match=r"--tp 2: .* holds integer tensors \(normalizer.count\), which "
                                             r"transformers 4[.0-9]+'s tensor-parallel loading cannot load"):
            score(replace(o, tp=2))
        return
    one, two = score(o), score(replace(o, tp=2))
    assert two.run["adapter"] == adapter
    info = two.run["models"]["model"]
    assert info["tp"] == 2 and info["tp_backend"] == "gloo"
    # the decoder layer's q, k, v, o, gate, up and down split (and transformers 5 the embedding), the heads not
    assert info["tp_sharded_weights"] in (7, 8)
    np.testing.assert_allclose(two.chosen, one.chosen, rtol=0, atol=1e-5)
    np.testing.assert_allclose(two.rejected, one.rejected, rtol=0, atol=1e-5)
    assert two.summary["domains"] == one.summary["domains"]
    chosen, rejected = reference(d, decoder, spec, tok_kind, two.samples)
    np.testing.assert_allclose(two.chosen, chosen, rtol=0, atol=2e-5)
    np.testing.assert_allclose(two.rejected, rejected, rtol=0, atol=2e-5)


def test_an_adapter_running_the_models_own_code_is_refused(world):  # noqa: F811
    d, *_ = build(world, "armorm")
    o = ScoreOptions(model=d, data=world["data"], progress=False, cache=False, trust_remote_code=True, tp=2)
    with pytest.raises(UsageError, match=r"--tp 2: the armorm adapter runs the model's own code.*--device-map auto") \
            as e:
        score(o)
    assert "\n" not in str(e.value)

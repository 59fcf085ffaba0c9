"""The vocabulary-sharded log-prob op (kernels/logprob_sharded.py): per-shard (max, sum-exp, target)
partials merged across shards, against the plain reference (the shards concatenated, whole logits,
log_softmax), in one process and over two real gloo ranks."""

import os

import pytest
import torch

from rmbench_fast.kernels import TargetOutOfVocabError, linear_logprobs
from rmbench_fast.kernels.logprob_reference import reference_head_logits, reference_sharded_logprobs
from rmbench_fast.kernels.logprob_sharded import (combine_local, combine_partials, shard_partials,
                                                  sharded_logprobs, split_rows)

triton_ok = os.environ.get("TRITON_INTERPRET") == "1" or torch.cuda.is_available()

# uneven cut points of a 997-row head (d = 48) into 2, 3 and 4 shards; one 4-way split has a shard
# of a single row
V, D = 997, 48
CUTS = {2: [0, 613, V], 3: [0, 100, 612, V], 4: [0, 1, 400, 401 + 300, V]}
HEADS = [dict(), dict(bias=True), dict(softcap=4.0), dict(bias=True, softcap=3.0, scale=1.3, divisor=0.8)]


def make(n, v, d, dtype=torch.float32, bias=False, scale=None, softcap=None, divisor=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(n, d, generator=g).to(dtype)
    w = (torch.randn(v, d, generator=g) * 0.4).to(dtype)
    b = torch.randn(v, generator=g).to(dtype) if bias else None
    t = torch.randint(0, v, (n,), generator=g)
    return h, w, t, dict(bias=b, scale=scale, softcap=softcap, divisor=divisor)


def shards_of(w, bias, cuts):
    return [(a, w[a:b], None if bias is None else bias[a:b]) for a, b in zip(cuts, cuts[1:])]


def partials(h, w, t, kw, cuts, **opts):
    return [shard_partials(h, ws, a, t, bs, kw["scale"], kw["softcap"], kw["divisor"], **opts)
            for a, ws, bs in shards_of(w, kw["bias"], cuts)]


def reference(h, w, t, kw, cuts, dtype=torch.float32):
    ws = [w[a:b] for a, b in zip(cuts, cuts[1:])]
    bs = None if kw["bias"] is None else [kw["bias"][a:b] for a, b in zip(cuts, cuts[1:])]
    return reference_sharded_logprobs(h, ws, t, bs, kw["scale"], kw["softcap"], dtype, kw["divisor"])


def err(a, b):
    return (a.double() - b.double()).abs().max().item()


def with_boundaries(t, cuts):
    """Targets on every shard's first and last row (and the vocabulary's ends) in the first rows."""
    edges = sorted({c for c in cuts[:-1]} | {c - 1 for c in cuts[1:]})
    t = t.clone()
    t[:len(edges)] = torch.tensor(edges)
    return t


@pytest.mark.parametrize("parts", [2, 3, 4])
@pytest.mark.parametrize("head", HEADS, ids=lambda h: "+".join(h) or "plain")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_combined_shards_equal_log_softmax(parts, head, dtype):
    cuts = CUTS[parts]
    h, w, t, kw = make(37, V, D, dtype, **head)
    t = with_boundaries(t, cuts)
    ref = reference(h, w, t, kw, cuts)  # bf16 inputs: fp32 logits of the same (exact) products
    # small chunks (rows and vocabulary chunks that divide nothing) and the default chunks
    for opts in (dict(row_chunk=7, vocab_chunk=64), dict()):
        ours = combine_local(partials(h, w, t, kw, cuts, **opts), targets=t, vocab=V)
        assert ours.dtype == torch.float32 and ours.shape == (37,)
        assert err(ours, ref) <= 1e-5
    assert err(ours, reference(h, w, t, kw, cuts, torch.float64)) <= 1e-5
    # and the unsharded op on the whole head
    assert err(ours, linear_logprobs(h, w, t, impl="torch", **kw)) <= 1e-5


@pytest.mark.parametrize("head", HEADS[:3], ids=lambda h: "+".join(h) or "plain")
def test_partials_are_max_sum_exp_and_target_logit(head):
    """Each shard's (m, s, t) against its own logits, computed plainly."""
    h, w, t, kw = make(23, V, D, **head)
    cuts = CUTS[3]
    t = with_boundaries(t, cuts)
    for (a, ws, bs), (m, s, tl) in zip(shards_of(w, kw["bias"], cuts), partials(h, w, t, kw, cuts, row_chunk=5,
                                                                                 vocab_chunk=50)):
        logits = reference_head_logits(h, ws, bs, kw["scale"], kw["softcap"], torch.float64, kw["divisor"])
        assert err(m, logits.amax(1)) <= 1e-5
        assert err(s, torch.exp(logits - logits.amax(1, keepdim=True)).sum(1)) <= 1e-4 * s.abs().max().item()
        inside = (t >= a) & (t < a + ws.shape[0])
        assert inside.any() and (~inside).any()
        assert err(tl[inside], logits[inside].gather(1, (t[inside] - a)[:, None])[:, 0]) <= 1e-5
        assert bool((tl[~inside] == float("-inf")).all())


def test_an_empty_shard_and_no_rows():
    h, w, t, kw = make(9, 60, 8, bias=True)
    cuts = [0, 25, 25, 60]  # a rank holding no rows of the head
    got = combine_local(partials(h, w, t, kw, cuts), targets=t, vocab=60)
    assert err(got, reference(h, w, t, kw, cuts)) <= 1e-5
    m, s, tl = shard_partials(h[:0], w, 0, t[:0])
    assert m.shape == s.shape == tl.shape == (0,)
    assert combine_local([(m, s, tl)]).shape == (0,)


@pytest.mark.parametrize("bad", [V, V + 5, -1])
def test_a_target_outside_the_vocabulary_names_its_row(bad):
    h, w, t, kw = make(11, V, D, softcap=5.0)
    t[6] = bad
    with pytest.raises(TargetOutOfVocabError) as unsharded:
        linear_logprobs(h, w, t, impl="torch", **kw)
    with pytest.raises(TargetOutOfVocabError) as sharded:
        combine_local(partials(h, w, t, kw, CUTS[3]), targets=t, vocab=V)
    assert sharded.value.row == 6 and sharded.value.target == bad
    assert str(sharded.value) == str(unsharded.value)
    # one process, no process group: this rank's shard is the whole head; V is the shard's size
    with pytest.raises(TargetOutOfVocabError) as alone:
        sharded_logprobs(h, w, 0, t, None, **kw)
    assert str(alone.value) == str(unsharded.value)
    # without targets or vocab, the error still names the row
    with pytest.raises(TargetOutOfVocabError, match="row 6"):
        combine_local(partials(h, w, t, kw, CUTS[2]))


def test_gaps_and_overlaps_between_shards_are_errors():
    h, w, t, kw = make(8, 100, 16)
    t[:] = 50
    t[3] = 10
    with pytest.raises(TargetOutOfVocabError) as gap:  # rows [40, 60) on no rank
        combine_local(partials(h, w, t, kw, [0, 40]) + [shard_partials(h, w[60:], 60, t)], targets=t, vocab=100)
    assert gap.value.row == 0
    overlap = partials(h, w, t, kw, [0, 30, 100]) + [shard_partials(h, w[:20], 0, t)]  # rows [0, 20) twice
    with pytest.raises(ValueError, match="row 3 falls in 2 shards"):
        combine_local(overlap, targets=t)


def test_without_a_process_group_a_rank_is_alone():
    h, w, t, kw = make(19, 300, 24, bias=True, softcap=6.0)
    alone = sharded_logprobs(h, w, 0, t, None, **kw)
    assert err(alone, reference(h, w, t, kw, [0, 300])) <= 1e-5
    assert torch.equal(alone, combine_partials(*shard_partials(h, w, 0, t, **kw), targets=t))


def test_split_rows():
    assert split_rows(10, 3) == [(0, 4), (4, 7), (7, 10)]
    assert split_rows(2, 3) == [(0, 1), (1, 2), (2, 2)]


@pytest.mark.skipif(not triton_ok, reason="Triton needs a GPU or TRITON_INTERPRET=1")
@pytest.mark.parametrize("head", [dict(), dict(bias=True, softcap=3.0, scale=1.3)], ids=["plain", "full"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_triton_partials(head, dtype):
    """The fused Triton kernel's chunk partials merged into shard partials (interpreter on CPU)."""
    cuts = [0, 70, 71, 150]  # uneven; a one-row shard; chunks of 64 columns in the interpreter
    h, w, t, kw = make(21, 150, 24, dtype, **head)
    t = with_boundaries(t, cuts)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    h, w, t = h.to(dev), w.to(dev), t.to(dev)
    kw = {k: (v.to(dev) if torch.is_tensor(v) else v) for k, v in kw.items()}
    ours = combine_local(partials(h, w, t, kw, cuts, impl="triton"), targets=t, vocab=150)
    assert err(ours.cpu(), reference(h, w, t, kw, cuts).cpu()) <= 1e-5


# two real gloo ranks ---------------------------------------------------------------------------

def _rank(rank, rdv, out, cuts, head, bad_row):
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{rdv}", rank=rank, world_size=2)
    try:
        h, w, t, kw = make(45, V, D, **head)
        t = with_boundaries(t, cuts)
        a, b = cuts[rank], cuts[rank + 1]
        bias = None if kw["bias"] is None else kw["bias"][a:b]
        got, errors = {}, {}
        for collective in ("all_gather", "all_reduce"):
            got[collective] = sharded_logprobs(h, w[a:b], a, t, None, bias, kw["scale"], kw["softcap"],
                                               kw["divisor"], collective=collective)
            bad = t.clone()
            bad[bad_row] = V + 3
            try:
                sharded_logprobs(h, w[a:b], a, bad, None, bias, kw["scale"], kw["softcap"], kw["divisor"],
                                 collective=collective)
            except TargetOutOfVocabError as e:
                errors[collective] = (e.row, str(e))
        torch.save({"got": got, "errors": errors}, os.path.join(out, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def test_two_gloo_ranks_equal_one_process(tmp_path):
    import torch.multiprocessing as mp

    cuts, head = CUTS[2], dict(bias=True, softcap=4.0)
    mp.spawn(_rank, args=(str(tmp_path / "rdv"), str(tmp_path), cuts, head, 17), nprocs=2, join=True)
    h, w, t, kw = make(45, V, D, **head)
    t = with_boundaries(t, cuts)
    local = combine_local(partials(h, w, t, kw, cuts), targets=t, vocab=V)
    assert err(local, reference(h, w, t, kw, cuts)) <= 1e-5
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    for r in ranks:
        for collective in ("all_gather", "all_reduce"):
            # max, and a sum of two: the same bits as in one process
            assert torch.equal(r["got"][collective], local), collective
            assert r["errors"][collective] == (17, f"target {V + 3} of row 17 is outside the vocabulary [0, {V})")

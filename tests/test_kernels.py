"""The fused log-prob op: Triton kernels (interpreter mode on CPU, real kernels on CUDA) and the
chunked torch path, against float64 references (whole logits, log_softmax, gather)."""

import os

import pytest
import torch

import rmbench_fast.kernels as K
from rmbench_fast.kernels import dispatch
from rmbench_fast.kernels import (TargetOutOfVocabError, linear_logprobs, logits_logprobs,
                                  segment_stats)
from rmbench_fast.kernels.logprob_reference import (reference_linear_logprobs, reference_logits_logprobs,
                                                     reference_segment_stats)
from rmbench_fast.kernels.logprob_torch import chunked_linear_logprobs, chunked_logits_logprobs

triton_ok = os.environ.get("TRITON_INTERPRET") == "1" or torch.cuda.is_available()
triton_interp = pytest.mark.skipif(not triton_ok, reason="Triton needs a GPU or TRITON_INTERPRET=1")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
IMPLS = ["triton", "torch"] if triton_ok else ["torch"]

# odd sizes that divide no tile size; (64, 1000, 64) fills whole row tiles and d slices
SHAPES = [(37, 997, 48), (64, 1000, 64), (5, 130, 20), (1, 33, 17)]
HEADS = [dict(), dict(bias=True), dict(scale=0.7), dict(softcap=4.0), dict(divisor=2.5),
         dict(bias=True, scale=1.3, softcap=3.0, divisor=0.8)]


def make(n, v, d, dtype=torch.float32, bias=False, scale=None, softcap=None, divisor=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(n, d, generator=g).to(DEVICE, dtype)
    w = (torch.randn(v, d, generator=g) * 0.4).to(DEVICE, dtype)
    b = (torch.randn(v, generator=g)).to(DEVICE, dtype) if bias else None
    t = torch.randint(0, v, (n,), generator=g).to(DEVICE)
    return h, w, t, dict(bias=b, scale=scale, softcap=softcap, divisor=divisor)


def err(ours, exact):
    return (ours.double() - exact.double()).abs().max().item() if ours.numel() else 0.0


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("head", HEADS, ids=lambda h: "+".join(h) or "plain")
def test_linear_fp32_matches_float64(impl, shape, head):
    h, w, t, kw = make(*shape, **head)
    if shape[0] > 1:
        t[0], t[-1] = 0, shape[1] - 1  # the vocabulary's first column and its tail
    ours = linear_logprobs(h, w, t, impl=impl, **kw)
    assert ours.dtype == torch.float32 and ours.shape == (shape[0],)
    assert err(ours, reference_linear_logprobs(h, w, t, dtype=torch.float64, **kw)) <= 1e-4
    assert err(ours, reference_linear_logprobs(h, w, t, dtype=torch.float32, **kw)) <= 1e-4


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("shape", SHAPES[:2])
def test_linear_bf16_no_worse_than_official(impl, shape):
    """bf16 inputs: the error against float64 is no worse than the official path's (bf16 logits,
    bf16 log_softmax), and small: bf16 x bf16 products are exact in fp32, only fp32 sums round."""
    h, w, t, kw = make(*shape, dtype=torch.bfloat16, bias=True, softcap=5.0)
    exact = reference_linear_logprobs(h, w, t, dtype=torch.float64, **kw)
    ours = err(linear_logprobs(h, w, t, impl=impl, **kw), exact)
    assert ours <= err(reference_linear_logprobs(h, w, t, dtype=torch.bfloat16, **kw), exact)
    assert ours <= 1e-4


@pytest.mark.parametrize("impl", IMPLS)
def test_divisor_is_scale_reciprocal(impl):
    """Granite divides the logits by config.logits_scaling: divisor=s and scale=1/s agree."""
    h, w, t, _ = make(37, 997, 48)
    exact = reference_linear_logprobs(h, w, t, dtype=torch.float64, divisor=8.0)
    by_div = linear_logprobs(h, w, t, impl=impl, divisor=8.0)
    by_scale = linear_logprobs(h, w, t, impl=impl, scale=1 / 8.0)
    assert err(by_div, exact) <= 1e-4 and err(by_scale, exact) <= 1e-4 and err(by_div, by_scale) <= 1e-4


@pytest.mark.parametrize("impl", IMPLS)
def test_zero_rows(impl):
    h, w, t, _ = make(0, 50, 16)
    assert linear_logprobs(h, w, t, impl=impl).shape == (0,)
    assert logits_logprobs(torch.zeros(0, 50, device=DEVICE), t, impl=impl).shape == (0,)
    total, count, sumsq = segment_stats(linear_logprobs(h, w, t, impl=impl), t, 2)
    assert count.tolist() == [0.0, 0.0] and total.tolist() == [0.0, 0.0] and sumsq.tolist() == [0.0, 0.0]


def blas_rows_independent() -> bool:
    """Whether numpy's fp32 matmul gives a row the same bits wherever it sits in the matrix. The
    interpreter runs tl.dot as numpy's matmul, and OpenBLAS's (numpy 2.4) does not: its kernels
    sum a row in an order that depends on the row's place in the block. A GPU's tl.dot does."""
    import numpy as np

    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((32, 48), dtype=np.float32), rng.standard_normal((48, 64), dtype=np.float32)
    perm = rng.permutation(32)
    return bool(np.array_equal((a @ b)[perm], a[perm] @ b))


@triton_interp
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_triton_row_is_batch_independent(dtype):
    """A row's log-prob is bit-identical alone, inside the whole batch, in another order and in
    row slices: no atomics, a fixed merge order, the same tiles for every row. Where the rows move
    inside a tile under the interpreter, the dot under it (numpy's) may reorder a row's sum by its
    place (blas_rows_independent): there, moved rows agree to fp32 rounding (1e-5 on log-probs of
    about -10; a row mixed with another's would be off by whole units)."""
    from rmbench_fast.kernels.logprob_triton import fused_linear_logprobs

    def same_rows(a, b):
        if DEVICE == "cuda" or blas_rows_independent():
            return torch.equal(a, b)
        return a.shape == b.shape and (a - b).abs().max().item() <= 1e-5

    h, w, t, kw = make(37, 517, 48, dtype=dtype, bias=True, softcap=4.0)
    full = fused_linear_logprobs(h, w, t, **kw)
    for i in (0, 17, 36):
        assert torch.equal(fused_linear_logprobs(h[i:i + 1], w, t[i:i + 1], **kw), full[i:i + 1])
    perm = torch.randperm(37, generator=torch.Generator().manual_seed(3))[:20].to(DEVICE)
    assert same_rows(fused_linear_logprobs(h[perm], w, t[perm], **kw), full[perm])
    assert same_rows(fused_linear_logprobs(h, w, t, max_rows=16, **kw), full)
    assert torch.equal(fused_linear_logprobs(h, w, t, **kw), full)  # and run to run


@triton_interp
def test_triton_logits_row_is_batch_independent():
    from rmbench_fast.kernels.logits_triton import logits_logprobs as triton_logits

    g = torch.Generator().manual_seed(4)
    x = (torch.randn(23, 517, generator=g) * 4).to(DEVICE, torch.bfloat16)
    t = torch.randint(0, 517, (23,), generator=g).to(DEVICE)
    full = triton_logits(x, t)
    for i in (0, 9, 22):
        assert torch.equal(triton_logits(x[i:i + 1], t[i:i + 1]), full[i:i + 1])
    assert torch.equal(triton_logits(x.flip(0), t.flip(0)), full.flip(0))


@triton_interp
@pytest.mark.parametrize("config, chunk_v, softcap", [
    (dict(BLOCK_N=32, BLOCK_V=64, BLOCK_D=32, GROUP_N=2, num_warps=4, num_stages=2), 128, 6.0),
    # tiles that cross chunk ends; a cap above 41 (no fixed maximum: a running one)
    (dict(BLOCK_N=16, BLOCK_V=32, BLOCK_D=16, GROUP_N=1, num_warps=4, num_stages=2), 48, 60.0)])
def test_triton_other_tilings(config, chunk_v, softcap):
    """Other tile shapes, and both soft-capping variants of the log-sum-exp."""
    from rmbench_fast.kernels.logprob_triton import fused_linear_logprobs

    h, w, t, kw = make(37, 997, 48, bias=True, scale=3.0, softcap=softcap)
    ours = fused_linear_logprobs(h, w, t, config=config, chunk_v=chunk_v, **kw)
    assert err(ours, reference_linear_logprobs(h, w, t, dtype=torch.float64, **kw)) <= 1e-4



@triton_interp
@pytest.mark.parametrize("dtype, d", [(torch.float32, 36), (torch.bfloat16, 40)])  # d: no BLOCK_D divides it
@pytest.mark.parametrize("head", [dict(), dict(bias=True, scale=1.3, softcap=3.0), dict(softcap=60.0)],
                         ids=["plain", "full", "running-max"])
def test_triton_tma_loads(dtype, d, head):
    """Tiles loaded through tensor descriptors (zero-filled past N, V and d, no masks): the same
    log-probs as the pointer loads of the same tiles, bit for bit, and the float64 reference's."""
    from rmbench_fast.kernels.logprob_configs import INTERPRETER
    from rmbench_fast.kernels.logprob_triton import fused_linear_logprobs

    if DEVICE == "cuda" and torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("TMA needs compute capability 9.0+")
    h, w, t, kw = make(37, 997, d, dtype=dtype, **head)
    t[0], t[-1] = 0, 996
    plain = fused_linear_logprobs(h, w, t, config=INTERPRETER, **kw)
    tma = fused_linear_logprobs(h, w, t, config={**INTERPRETER, "TMA": True}, **kw)
    if DEVICE == "cpu":  # the interpreter: the same tiles, the same sums
        assert torch.equal(tma, plain)
    else:  # compiled: the same tiles; allow the last bit in case the MMA instruction differs
        assert err(tma, plain) <= 1e-5
    exact = reference_linear_logprobs(h, w, t, dtype=torch.float64, **kw)
    assert err(tma, exact) <= (1e-4 if dtype == torch.float32 else 5e-3)
    with pytest.raises(ValueError, match="16-byte aligned"):  # a bf16 row of 20 values is 40 bytes
        fused_linear_logprobs(h[:, :20].contiguous().to(torch.bfloat16), w[:, :20].contiguous().to(torch.bfloat16),
                              t, config={**INTERPRETER, "TMA": True})

@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_logits_logprobs(impl, dtype):
    g = torch.Generator().manual_seed(1)
    x = (torch.randn(23, 517, generator=g) * 4).to(DEVICE, dtype)
    t = torch.randint(0, 517, (23,), generator=g).to(DEVICE)
    x[3, :300] = float("-inf")  # masked-out tokens: whole chunks of -inf
    x[4, t[4]] = float("-inf")  # an impossible target: log-prob -inf
    exact = reference_logits_logprobs(x, t, torch.float64)
    ours = logits_logprobs(x, t, impl=impl)
    assert ours[4].item() == float("-inf")
    keep = torch.arange(23, device=DEVICE) != 4
    assert err(ours[keep], exact[keep]) <= 1e-5


def test_torch_logits_row_chunks():
    g = torch.Generator().manual_seed(5)
    x, t = torch.randn(40, 300, generator=g) * 3, torch.randint(0, 300, (40,), generator=g)
    exact = reference_logits_logprobs(x, t, torch.float64)
    for rows in (1, 7, 64):
        assert err(chunked_logits_logprobs(x, t, row_chunk=rows), exact) <= 1e-5


@pytest.mark.parametrize("impl", IMPLS)
def test_targets_outside_vocabulary_are_errors(impl):
    """Every entry point names the first offending row and its target; none returns a log-prob."""
    h, w, t, _ = make(20, 97, 16)
    x = torch.randn(20, 97, device=DEVICE)
    for bad, row in ((70000, 12), (-1, 12), (97, 12)):
        t2 = t.clone()
        t2[12], t2[15] = bad, 5000
        calls = [lambda: linear_logprobs(h, w, t2, impl=impl), lambda: logits_logprobs(x, t2, impl=impl),
                 lambda: reference_linear_logprobs(h, w, t2), lambda: reference_logits_logprobs(x, t2)]
        if impl == "triton":
            from rmbench_fast.kernels.logits_triton import logits_logprobs as triton_logits
            from rmbench_fast.kernels.logprob_triton import fused_linear_logprobs

            calls += [lambda: fused_linear_logprobs(h, w, t2), lambda: triton_logits(x, t2)]
        else:
            calls += [lambda: chunked_linear_logprobs(h, w, t2), lambda: chunked_logits_logprobs(x, t2)]
        for call in calls:
            with pytest.raises(TargetOutOfVocabError) as e:
                call()
            assert isinstance(e.value, ValueError) and (e.value.row, e.value.target) == (row, bad)
            assert f"target {bad} of row {row} is outside the vocabulary [0, 97)" in str(e.value)
    with pytest.raises(ValueError, match="one per row"):
        linear_logprobs(h, w, t[:5], impl=impl)


def test_auto_times_once_per_shape_bucket(monkeypatch):
    """`auto` keeps the faster candidate per key, times each key once, and with tuning off takes
    the first candidate untimed (the timer is injected: no GPU here)."""
    monkeypatch.setattr(dispatch, "_AUTO_CHOICES", {})
    monkeypatch.delenv("RMBENCH_LOGPROB_TUNING", raising=False)
    calls = []
    speed = {"triton": 2.0, "torch": 1.0}

    def timer(fn):
        calls.append(fn())
        return speed[calls[-1]]

    cands = {"triton": lambda: "triton", "torch": lambda: "torch"}
    key = K.auto_key("linear", 3000, 128256, 4096, torch.bfloat16)
    assert key == K.auto_key("linear", 4096, 128256, 4096, torch.bfloat16)  # same N bucket
    assert K.pick_fastest(key, cands, timer) == "torch" and calls == ["triton", "torch"]
    speed["torch"] = 9.0
    assert K.pick_fastest(key, cands, timer) == "torch" and len(calls) == 2  # memoized
    big = K.auto_key("linear", 16384, 128256, 4096, torch.bfloat16)
    assert K.pick_fastest(big, cands, timer) == "triton" and len(calls) == 4
    assert K.auto_choices() == {key: "torch", big: "triton"}
    monkeypatch.setenv("RMBENCH_LOGPROB_TUNING", "0")
    assert K.pick_fastest(K.auto_key("logits", 10, 5, None, torch.float32), cands, timer) == "triton"
    assert len(calls) == 4
    assert K.resolve_impl("auto", torch.device("cpu")) == "torch"


@triton_interp
def test_extra_memory_and_config_pruning(monkeypatch):
    """The partial buffers stay under 64 MiB at N = 16384, V = 256000 (and for a 1M vocabulary);
    autotuning keeps the configurations of the input dtype that fit in shared memory."""
    import rmbench_fast.kernels.logprob_configs as C
    import rmbench_fast.kernels.logprob_triton as T

    monkeypatch.setattr(T, "interpreting", lambda: False)  # the GPU's chunk sizes
    assert T.chunk_size(256000) == 1024 and T.chunk_size(1_000_000) == 4096
    assert T.partial_bytes(16384, 256000) <= 64 * 2**20 and T.partial_bytes(10**6, 10**6) <= 64 * 2**20
    monkeypatch.setattr(C, "max_shared_mem", lambda: 100 * 1024)
    half = C.prune(T.HALF_CONFIGS + T.FP32_CONFIGS, {"h_ptr": torch.zeros(1, dtype=torch.bfloat16)})
    assert half and all(c in T.HALF_CONFIGS for c in half) and len(half) < len(T.HALF_CONFIGS)
    assert all(c.num_stages * (c.kwargs["BLOCK_N"] + c.kwargs["BLOCK_V"]) * c.kwargs["BLOCK_D"] * 2 <= 100 * 1024
               for c in half)
    fp32 = C.prune(T.HALF_CONFIGS + T.FP32_CONFIGS, {"h_ptr": torch.zeros(1)})
    assert fp32 and all(c in T.FP32_CONFIGS for c in fp32)
    # before Hopper: no tile whose accumulator would spill registers (tests/test_kernel_compile.py
    # compiles what is kept for sm_80 and checks ptxas reports no spills)
    monkeypatch.setattr(C, "major_capability", lambda: 8)
    monkeypatch.setattr(C, "max_shared_mem", lambda: 163 * 1024)
    half = C.prune(T.HALF_CONFIGS + T.FP32_CONFIGS, {"h_ptr": torch.zeros(1, dtype=torch.bfloat16)})
    assert {(c.kwargs["BLOCK_N"], c.kwargs["BLOCK_V"], c.num_warps) for c in half} == {(128, 128, 8), (64, 128, 4)}
    fp32 = C.prune(T.HALF_CONFIGS + T.FP32_CONFIGS, {"h_ptr": torch.zeros(1)})
    assert {(c.kwargs["BLOCK_N"], c.kwargs["BLOCK_V"]) for c in fp32} == {(64, 64), (32, 128)}
    for kind, elem in (("half", 2), ("fp32", 4)):
        pinned = C.fixed(kind, 8)
        assert C.fits(pinned, pinned["num_warps"], pinned["num_stages"], elem, 8, 163 * 1024)
        assert C.fixed(kind, 9) == C.FIXED[kind]


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_properties(0).total_memory < 40 * 2**30,
                    reason="needs a GPU with 40 GiB")
def test_cuda_offsets_beyond_2_31():
    """V * d and N * d above 2^31 elements: the kernel's row offsets are int64 (on CPU the
    interpreter cannot reach such offsets without allocating them)."""
    from rmbench_fast.kernels.logprob_triton import fused_linear_logprobs

    g = torch.Generator(device="cuda").manual_seed(0)
    v, d = 262_144, 8_200  # 2.15e9 weights
    w = torch.randn(v, d, device="cuda", dtype=torch.bfloat16, generator=g) * 0.02
    h = torch.randn(8, d, device="cuda", dtype=torch.bfloat16, generator=g)
    t = torch.tensor([v - 1, v - 2, 0, 5, v - 100, 200_000, 131_072, v - 3], device="cuda")
    assert err(fused_linear_logprobs(h, w, t), chunked_linear_logprobs(h, w, t)) <= 1e-4
    del w
    n, d = 2**31 // 4096 + 1000, 4096  # N * d above 2^31, in one launch (max_rows=n)
    h = torch.randn(n, d, device="cuda", dtype=torch.bfloat16, generator=g)
    w = torch.randn(300, d, device="cuda", dtype=torch.bfloat16, generator=g) * 0.02
    t = torch.randint(0, 300, (n,), device="cuda", generator=g)
    ours = fused_linear_logprobs(h, w, t, max_rows=n)
    assert err(ours[-5000:], chunked_linear_logprobs(h[-5000:], w, t[-5000:])) <= 1e-4


@pytest.mark.parametrize("n, v, d", [(512, 32000, 256), (300, 50257, 128)])
@pytest.mark.parametrize("head", [dict(), dict(bias=True, scale=0.5, softcap=30.0)], ids=["plain", "full"])
def test_torch_path_realistic(n, v, d, head):
    h, w, t, kw = make(n, v, d, **head)
    ours = linear_logprobs(h, w, t, impl="torch", **kw)
    assert err(ours, reference_linear_logprobs(h, w, t, dtype=torch.float64, **kw)) <= 1e-4


def test_torch_path_chunk_edges():
    """Chunks that split rows and vocabulary unevenly, targets at the vocabulary's ends."""
    h, w, t, kw = make(70, 301, 24, bias=True)
    t[0], t[1] = 0, 300
    exact = reference_linear_logprobs(h, w, t, dtype=torch.float64, **kw)
    for rows, vocab in [(1, 1), (7, 64), (64, 300), (1000, 1000)]:
        ours = chunked_linear_logprobs(h, w, t, row_chunk=rows, vocab_chunk=vocab, **kw)
        assert err(ours, exact) <= 1e-4, (rows, vocab)


def plain_chunked(h, w, t, row_chunk, vocab_chunk, bias=None, scale=None, softcap=None, divisor=None):
    """The chunked op's arithmetic written plainly: per row chunk, each vocabulary chunk's fp32
    logits, torch.logsumexp of each, the target read from its chunk, one logsumexp of the table."""
    mult = (1.0 if scale is None else scale) / (1.0 if divisor is None else divisor)
    out = []
    for r0 in range(0, h.shape[0], row_chunk):
        hr, tr = h[r0:r0 + row_chunk].float(), t[r0:r0 + row_chunk]
        lses, picked = [], torch.zeros(hr.shape[0])
        for v0 in range(0, w.shape[0], vocab_chunk):
            x = torch.mm(hr, w[v0:v0 + vocab_chunk].float().T)
            if bias is not None:
                x = x + bias[v0:v0 + vocab_chunk].float()
            x = x * mult if mult != 1.0 else x
            x = softcap * torch.tanh(x / softcap) if softcap is not None else x
            lses.append(torch.logsumexp(x, dim=1))
            for i, target in enumerate(tr.tolist()):
                if v0 <= target < v0 + x.shape[1]:
                    picked[i] = x[i, target - v0]
        out.append(picked - torch.logsumexp(torch.stack(lses, dim=1), dim=1))
    return torch.cat(out)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_torch_path_is_bitwise_the_plain_chunked_sums(dtype):
    """The in-place log-sum-exp and the targets grouped by chunk change no bit: the op equals its
    arithmetic written plainly, including rows whose logits overflow to inf."""
    if DEVICE != "cpu":
        pytest.skip("the CPU path's bit-level arithmetic")
    for (n, v, d), head, (rows, vocab) in [((70, 301, 24), dict(bias=True), (7, 64)),
                                          ((129, 2500, 32), dict(scale=0.7, softcap=3.0), (64, 1000)),
                                          ((40, 999, 16), dict(), (1024, 1024))]:
        h, w, t, kw = make(n, v, d, dtype=dtype, **head)
        t[0], t[-1] = 0, v - 1
        if dtype == torch.float32:
            h[1] = 3e38  # logits of +-inf: logsumexp's own handling of an infinite max
        ours = chunked_linear_logprobs(h, w, t, row_chunk=rows, vocab_chunk=vocab, **kw)
        plain = plain_chunked(h, w, t, rows, vocab, **kw)
        assert torch.equal(ours.isnan(), plain.isnan())
        assert torch.equal(ours[~ours.isnan()], plain[~plain.isnan()]), (n, v, d, head)


@pytest.mark.parametrize("sorted_segments", [True, False])
def test_segment_stats(sorted_segments):
    g = torch.Generator().manual_seed(2)
    lp = -torch.rand(200, generator=g) * 5
    seg = torch.sort(torch.randint(0, 9, (200,), generator=g)).values
    if not sorted_segments:
        seg = seg[torch.randperm(200, generator=g)]
    ours = segment_stats(lp, seg, 10)  # segment 9 stays empty
    ref = reference_segment_stats(lp, seg, 10)
    for a, b in zip(ours, ref):
        assert torch.allclose(a.cpu(), b, atol=1e-9, rtol=0)
    assert ours[1][9] == 0


@triton_interp
def test_fused_logprobs_and_segment_stats_give_the_three_rewards():
    """The DPO scorer's path: the fused op's log-probs, then per-sequence sums (sum, avg, norm)."""
    h, w, t, kw = make(40, 200, 32)
    seg = torch.tensor([0] * 10 + [1] * 25 + [2] * 5, device=DEVICE)
    total, count, sumsq = segment_stats(linear_logprobs(h, w, t, impl="triton"), seg, 3)
    exact = reference_linear_logprobs(h, w, t, dtype=torch.float64).cpu()
    for k, (a, b) in enumerate([(0, 10), (10, 35), (35, 40)]):
        assert abs(total[k].item() - exact[a:b].sum().item()) <= 1e-4 * (b - a)
        assert count[k].item() == b - a
        assert abs(-sumsq[k].sqrt().item() - (-exact[a:b].norm().item())) <= 1e-4 * (b - a)

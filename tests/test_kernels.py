"""The fused log-prob op: Triton kernels (interpreter mode on CPU) and the chunked torch path,
against the plain references and float64."""

import os

import pytest
import torch

from rmbench_fast.kernels import fused_logprob_stats, linear_logprobs, logits_logprobs, segment_stats
from rmbench_fast.kernels.logprob_reference import (reference_linear_logprobs, reference_logits_logprobs,
                                                     reference_segment_stats)
from rmbench_fast.kernels.logprob_torch import chunked_linear_logprobs

triton_interp = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1" and not torch.cuda.is_available(),
                                   reason="Triton needs a GPU or TRITON_INTERPRET=1")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

# odd sizes that divide no tile size
SHAPES = [(37, 997, 48), (64, 1000, 64), (5, 130, 20), (1, 33, 17)]
HEADS = [dict(), dict(bias=True), dict(scale=0.7), dict(softcap=4.0), dict(bias=True, scale=1.3, softcap=3.0)]


def make(n, v, d, dtype=torch.float32, bias=False, scale=None, softcap=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(n, d, generator=g).to(DEVICE, dtype)
    w = (torch.randn(v, d, generator=g) * 0.4).to(DEVICE, dtype)
    b = (torch.randn(v, generator=g)).to(DEVICE, dtype) if bias else None
    t = torch.randint(0, v, (n,), generator=g).to(DEVICE)
    return h, w, t, dict(bias=b, scale=scale, softcap=softcap)


@triton_interp
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("head", HEADS, ids=lambda h: "+".join(h) or "plain")
def test_triton_fused_fp32(shape, head):
    h, w, t, kw = make(*shape, **head)
    ours = linear_logprobs(h, w, t, impl="triton", **kw)
    exact = reference_linear_logprobs(h, w, t, dtype=torch.float64, **kw)
    ref32 = reference_linear_logprobs(h, w, t, dtype=torch.float32, **kw)
    assert ours.dtype == torch.float32 and ours.shape == (shape[0],)
    assert (ours.double() - exact).abs().max() <= 1e-4
    assert (ours - ref32).abs().max() <= 1e-4


@triton_interp
@pytest.mark.parametrize("shape", SHAPES[:2])
def test_triton_fused_bf16_no_worse_than_official(shape):
    """bf16 inputs: the fused op's error against float64 is no worse than the official path's
    (bf16 logits, bf16 log_softmax)."""
    h, w, t, kw = make(*shape, dtype=torch.bfloat16)
    exact = reference_linear_logprobs(h, w, t, dtype=torch.float64)
    official = reference_linear_logprobs(h, w, t, dtype=torch.bfloat16)
    ours = linear_logprobs(h, w, t, impl="triton")
    ours_err = (ours.double() - exact).abs().max().item()
    official_err = (official.double() - exact).abs().max().item()
    assert ours_err <= official_err
    assert ours_err <= 1e-4  # bf16 x bf16 products are exact in fp32; only the fp32 sums round


@pytest.mark.parametrize("shape", SHAPES[:2])
def test_torch_path_bf16_no_worse_than_official(shape):
    h, w, t, _ = make(*shape, dtype=torch.bfloat16)
    exact = reference_linear_logprobs(h, w, t, dtype=torch.float64)
    official = reference_linear_logprobs(h, w, t, dtype=torch.bfloat16)
    ours = linear_logprobs(h, w, t, impl="torch")
    assert (ours.double() - exact).abs().max() <= (official.double() - exact).abs().max()


@triton_interp
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_triton_logits_kernel(dtype):
    g = torch.Generator().manual_seed(1)
    x = (torch.randn(23, 517, generator=g) * 4).to(DEVICE, dtype)
    t = torch.randint(0, 517, (23,), generator=g).to(DEVICE)
    ours = logits_logprobs(x, t, impl="triton")
    assert (ours.double() - reference_logits_logprobs(x, t, torch.float64)).abs().max() <= 1e-5
    assert (ours - logits_logprobs(x, t, impl="torch")).abs().max() <= 1e-5


@pytest.mark.parametrize("n, v, d", [(512, 32000, 256), (300, 50257, 128)])
@pytest.mark.parametrize("head", [dict(), dict(bias=True, scale=0.5, softcap=30.0)], ids=["plain", "full"])
def test_torch_path_realistic(n, v, d, head):
    h, w, t, kw = make(n, v, d, **head)
    ours = linear_logprobs(h, w, t, impl="torch", **kw)
    exact = reference_linear_logprobs(h, w, t, dtype=torch.float64, **kw)
    assert (ours.double() - exact).abs().max() <= 1e-4


def test_torch_path_chunk_edges():
    """Chunks that split rows and vocabulary unevenly, targets at the vocabulary's ends."""
    h, w, t, kw = make(70, 301, 24, bias=True)
    t[0], t[1] = 0, 300
    exact = reference_linear_logprobs(h, w, t, dtype=torch.float64, **kw)
    for rows, vocab in [(1, 1), (7, 64), (64, 300), (1000, 1000)]:
        ours = chunked_linear_logprobs(h, w, t, row_chunk=rows, vocab_chunk=vocab, **kw)
        assert (ours.double() - exact).abs().max() <= 1e-4, (rows, vocab)


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
def test_fused_stats_give_the_three_rewards():
    h, w, t, kw = make(40, 200, 32)
    seg = torch.tensor([0] * 10 + [1] * 25 + [2] * 5, device=DEVICE)
    st = fused_logprob_stats(h, w, t, seg, 3, impl="triton")
    exact = reference_linear_logprobs(h, w, t, dtype=torch.float64).cpu()
    for k, (a, b) in enumerate([(0, 10), (10, 35), (35, 40)]):
        assert abs(st.total[k].item() - exact[a:b].sum().item()) <= 1e-4 * (b - a)
        assert st.count[k].item() == b - a
        assert abs(-st.sumsq[k].sqrt().item() - (-exact[a:b].norm().item())) <= 1e-4 * (b - a)

"""torch on the GPU: block_encode writes the CPU encoder's bytes, block_decode the CPU
decoder's bits, and quantized_attention (every variant) agrees with the CPU reference."""
import pytest
from conftest import awkward_matrix, cuda_available

pytestmark = pytest.mark.skipif(not cuda_available(), reason="needs torch with a CUDA GPU")

import lowbit  # noqa: E402

if cuda_available():
    import torch

FORMATS = ["nf4", "mxfp4", "nvfp4"]
VARIANTS = ["naive_sequential", "tiled_sequential", "tiled_fused", "fused_two_kernel"]


def bits_equal(a, b):
    assert a.shape == b.shape and a.dtype == b.dtype
    if a.dtype.is_floating_point:
        view = {2: torch.int16, 4: torch.int32}[a.element_size()]
        a, b = a.view(view), b.view(view)
    assert torch.equal(a.cpu(), b.cpu())


def same_encoding(a, b):
    bits_equal(a.codes, b.codes)
    bits_equal(a.scales, b.scales)
    assert (a.global_scale is None) == (b.global_scale is None)
    if a.global_scale is not None:
        bits_equal(a.global_scale, b.global_scale)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("shape", [(1, 64), (17, 192), (130, 1024)])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_gpu_equals_cpu(rng, fmt, shape, dtype):
    x_cpu = torch.from_numpy(awkward_matrix(rng, *shape)).to(getattr(torch, dtype))
    x = x_cpu.cuda()
    w, w_cpu = lowbit.block_encode(x, fmt), lowbit.block_encode(x_cpu, fmt)
    assert w.codes.is_cuda and w.fmt == fmt and w.shape == shape
    same_encoding(w, w_cpu)
    for out_dtype in ("float32", "float16", "bfloat16"):
        got = lowbit.block_decode(w, dtype=out_dtype)
        assert got.is_cuda
        bits_equal(got, lowbit.block_decode(w_cpu, dtype=out_dtype))


def test_gpu_nan_raises():
    x = torch.zeros((2, 64), device="cuda")
    x[1, 5] = float("nan")
    with pytest.raises(lowbit.LowbitError, match="row 1, column 5"):
        lowbit.block_encode(x, "nf4")


def test_runs_on_current_stream(rng):
    x = torch.from_numpy(awkward_matrix(rng, 64, 256)).cuda()
    want = lowbit.block_encode(x, "nvfp4")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        got = lowbit.block_encode(x, "nvfp4")
        decoded = lowbit.block_decode(got)
    s.synchronize()
    same_encoding(got, want)
    bits_equal(decoded, lowbit.block_decode(want))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("seq_len,heads,kv_heads,head_dim,causal,bias", [
    (1, 2, 1, 64, True, False), (33, 8, 2, 64, True, True), (130, 3, 1, 128, False, False)])
def test_attention_gpu_vs_cpu(fmt, variant, seq_len, heads, kv_heads, head_dim, causal, bias):
    g = torch.Generator().manual_seed(seq_len * 131 + heads)
    d_model = 256
    x = torch.randn((seq_len, d_model), generator=g).half()
    ws = [lowbit.block_encode(torch.randn((n * head_dim, d_model), generator=g) / d_model ** 0.5, fmt)
          for n in (heads, kv_heads, kv_heads)]
    bs = [(torch.randn(n * head_dim, generator=g) * 0.1).half() if bias else None for n in (heads, kv_heads, kv_heads)]
    want = lowbit.quantized_attention(x, *ws, heads, kv_heads, head_dim, causal, *bs).double()
    ws_gpu = [lowbit.BlockWeights(w.codes.cuda(), w.scales.cuda(),
                                  None if w.global_scale is None else w.global_scale.cuda(), w.fmt, w.shape)
              for w in ws]
    got = lowbit.quantized_attention(x.cuda(), *ws_gpu, heads, kv_heads, head_dim, causal,
                                     *(b.cuda() if bias else None for b in bs), variant=variant)
    assert got.is_cuda and got.dtype == torch.float16
    # tests/gpu/attention_gpu_test.cpp bounds each element by u|o| + 2 Vmax (2E + 2u) (u = 2^-11,
    # E the score error from rounding q and k to f16); with these O(1) inputs that is well under
    # 1e-2 of the output's scale, so a relative 1e-2 of max |o| is used here instead.
    torch.testing.assert_close(got.cpu().double(), want, rtol=1e-2, atol=1e-2 * want.abs().max().item())

"""torch on the GPU: lowbit equals torch._int_mm and its own CPU path bit for bit, runs on
the current stream, and its custom ops work under torch.compile and CUDA graphs."""
import numpy as np
import pytest
from conftest import awkward_matrix, cuda_available

pytestmark = pytest.mark.skipif(not cuda_available(), reason="needs torch with a CUDA GPU")

import lowbit  # noqa: E402

if cuda_available():
    import torch

    import lowbit.torch_ops  # noqa: F401


def bits_equal(a, b):
    assert a.shape == b.shape and a.dtype == b.dtype
    if a.dtype.is_floating_point:
        view = {2: torch.int16, 4: torch.int32}[a.element_size()]
        a, b = a.view(view), b.view(view)
    assert torch.equal(a.cpu(), b.cpu())


@pytest.mark.parametrize("m,n,k", [(32, 32, 32), (64, 96, 128), (1024, 512, 4096), (33, 40, 72)])
def test_int8_matmul_equals_int_mm(m, n, k):
    g = torch.Generator(device="cuda").manual_seed(m * n + k)
    a = torch.randint(-128, 128, (m, k), dtype=torch.int8, device="cuda", generator=g)
    b = torch.randint(-128, 128, (k, n), dtype=torch.int8, device="cuda", generator=g)
    got = lowbit.int8_matmul(a, b)
    # What torch._int_mm takes on this H100 (cuBLASLt refused m = 33 with
    # CUBLAS_STATUS_NOT_SUPPORTED although torch documents only m > 16).
    if m > 16 and m % 8 == 0 and k % 8 == 0 and n % 8 == 0:
        want = torch._int_mm(a, b)
    else:
        want = (a.cpu().long() @ b.cpu().long()).int().cuda()
    bits_equal(got, want)
    # nn.Linear's K-major weight
    bits_equal(lowbit.int8_matmul(a, b.t().contiguous(), b_layout="n_by_k"), got)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16] if cuda_available() else [])
@pytest.mark.parametrize("scheme,gran,group", [("int8", "channel", 0), ("int8", "token", 0), ("int4", "group", 32),
                                               ("int8_asym", "tensor", 0), ("int4_sym", "group", 16)])
def test_quantize_gpu_equals_cpu(dtype, scheme, gran, group):
    rng = np.random.default_rng(7)
    x_cpu = torch.from_numpy(awkward_matrix(rng, 129, 200)).to(dtype)
    got = lowbit.quantize_tensor(x_cpu.cuda(), scheme, gran, group)
    want = lowbit.quantize_tensor(x_cpu, scheme, gran, group)
    for g, w in zip(got, want):
        if w is None:
            assert g is None
        else:
            assert g.is_cuda
            bits_equal(g, w)
    for out in (torch.float32, torch.float16, torch.bfloat16):
        y = lowbit.dequantize_tensor(*got, scheme, gran, group, dtype=out, cols=200)
        bits_equal(y, lowbit.dequantize_tensor(*want, scheme, gran, group, dtype=out, cols=200))


def test_epilogue_gpu_equals_cpu():
    g = torch.Generator().manual_seed(3)
    a = torch.randint(-128, 128, (70, 96), dtype=torch.int8, generator=g)
    b = torch.randint(-128, 128, (96, 48), dtype=torch.int8, generator=g)
    sa, sb = torch.rand(70, generator=g) / 50, torch.rand(48, generator=g) / 50
    bias = torch.randn(48, generator=g)
    for out in ("float32", "float16", "bfloat16"):
        want = lowbit.int8_matmul(a, b, sa, sb, 0.5, bias, True, out_dtype=out)
        got = lowbit.int8_matmul(a.cuda(), b.cuda(), sa.cuda(), sb.cuda(), 0.5, bias.cuda(), True, out_dtype=out)
        bits_equal(got, want)


def test_runs_on_current_stream():
    x = torch.randn(4096, 1024, device="cuda")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        codes, scales, _ = lowbit.quantize_tensor(x, "int8", "token")
        y = lowbit.dequantize_tensor(codes, scales, None, "int8", "token")
    s.synchronize()
    assert (y - x).abs().max() <= scales.max()


def test_errors_from_gpu():
    with pytest.raises(lowbit.LowbitError, match="finite"):
        lowbit.quantize_tensor(torch.tensor([[1.0, float("nan")]], device="cuda"), "int8", "token", check=True)
    with pytest.raises(lowbit.LowbitError, match="same device|on cpu|device"):
        lowbit.int8_matmul(torch.ones(2, 3, dtype=torch.int8, device="cuda"), torch.ones(3, 4, dtype=torch.int8))


def test_custom_ops_under_compile():
    a = torch.randint(-128, 128, (64, 128), dtype=torch.int8, device="cuda")
    b = torch.randint(-128, 128, (128, 32), dtype=torch.int8, device="cuda")
    x = torch.randn(64, 128, device="cuda", dtype=torch.float16)

    def f(a, b, x):
        c = lowbit.int8_matmul(a, b, scale_a=0.5, out_dtype=torch.float32)
        codes, scales, mins = lowbit.quantize_tensor(x, "int4", "group", 32)
        y = lowbit.dequantize_tensor(codes, scales, mins, "int4", "group", 32, dtype=torch.float16)
        return c + 1, y * 2

    eager = f(a, b, x)
    compiled = torch.compile(f, fullgraph=True)(a, b, x)
    for e, c in zip(eager, compiled):
        bits_equal(c, e)
    torch.library.opcheck(torch.ops.lowbit.int8_matmul, (a, b, None, None, 1.0, None, False, "k_by_n", "i32"))
    torch.library.opcheck(torch.ops.lowbit.quantize, (x, "int8", "token", 0))


def test_custom_ops_in_cuda_graph():
    a = torch.randint(-128, 128, (64, 128), dtype=torch.int8, device="cuda")
    b = torch.randint(-128, 128, (128, 64), dtype=torch.int8, device="cuda")
    x = torch.randn(64, 128, device="cuda")
    want_c = lowbit.int8_matmul(a, b)
    want_q = lowbit.quantize_tensor(x, "int8", "token")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up outside capture
        lowbit.int8_matmul(a, b)
        lowbit.quantize_tensor(x, "int8", "token")
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        c = torch.ops.lowbit.int8_matmul(a, b, None, None, 1.0, None, False, "k_by_n", "i32")
        codes, scales, _ = torch.ops.lowbit.quantize(x, "int8", "token", 0)
    graph.replay()
    torch.cuda.synchronize()
    bits_equal(c, want_c)
    bits_equal(codes, want_q[0])
    bits_equal(scales, want_q[1])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16] if cuda_available() else [])
@pytest.mark.parametrize("bits", [4, 8])
def test_quantized_linear_close_to_linear(dtype, bits):
    torch.manual_seed(0)
    linear = torch.nn.Linear(512, 256, bias=True).to("cuda", dtype)
    q = lowbit.QuantizedLinear.from_linear(linear, bits=bits, group_size=128)
    assert q.codes.is_cuda
    for m in (1, 7, 64):
        x = torch.randn(m, 512, device="cuda", dtype=dtype)
        want = linear(x).float()
        got = q(x)
        assert got.dtype == dtype and got.shape == want.shape
        rel = (got.float() - want).norm() / want.norm()
        assert rel < (0.08 if bits == 4 else 0.01), rel
    # the CPU path of the same module gives the same values (to accumulation order)
    x = torch.randn(3, 512, device="cuda", dtype=dtype)
    y_gpu = q(x)
    y_cpu = q.to("cpu")(x.cpu())
    torch.testing.assert_close(y_cpu, y_gpu.cpu(), rtol=1e-2, atol=1e-2)


def test_quantized_linear_compiles():
    linear = torch.nn.Linear(256, 128).to("cuda", torch.float16)
    q = lowbit.QuantizedLinear.from_linear(linear, bits=4, group_size=64)
    x = torch.randn(2, 5, 256, device="cuda", dtype=torch.float16)
    bits_equal(torch.compile(q, fullgraph=True)(x), q(x))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("heads,kv_heads,head_dim", [(8, 8, 64), (32, 8, 128), (14, 2, 64)])
def test_flash_attention_equals_sdpa(dtype, causal, heads, kv_heads, head_dim):
    """lowbit.flash_attention against torch's scaled_dot_product_attention, sequence by
    sequence of a batch of mixed lengths (one of them a causal chunk: fewer queries than
    keys, queries at the end, as lowbit defines it)."""
    torch.manual_seed(5)
    dt = getattr(torch, dtype)
    lengths = [(1, 1), (63, 63), (130, 130), (40, 200)]
    cu_q = [0]
    cu_k = [0]
    for a, b in lengths:
        cu_q.append(cu_q[-1] + a)
        cu_k.append(cu_k[-1] + b)
    q = torch.randn(cu_q[-1], heads, head_dim, device="cuda", dtype=dt)
    k = torch.randn(cu_k[-1], kv_heads, head_dim, device="cuda", dtype=dt)
    v = torch.randn(cu_k[-1], kv_heads, head_dim, device="cuda", dtype=dt)
    out = lowbit.flash_attention(q, k, v, causal=causal, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
    assert out.shape == q.shape and out.dtype == dt
    for b, (nq, nk) in enumerate(lengths):
        qs = q[cu_q[b]:cu_q[b + 1]].transpose(0, 1).float()
        ks = k[cu_k[b]:cu_k[b + 1]].transpose(0, 1).float().repeat_interleave(heads // kv_heads, 0)
        vs = v[cu_k[b]:cu_k[b + 1]].transpose(0, 1).float().repeat_interleave(heads // kv_heads, 0)
        mask = None
        if causal:  # query i at position nk - nq + i
            mask = torch.arange(nk, device="cuda")[None, :] <= (nk - nq + torch.arange(nq, device="cuda"))[:, None]
        want = torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, attn_mask=mask).transpose(0, 1)
        got = out[cu_q[b]:cu_q[b + 1]].float()
        tol = 4e-3 if dtype == "float16" else 3e-2
        assert torch.allclose(got, want, atol=tol, rtol=tol), (b, (got - want).abs().max().item())

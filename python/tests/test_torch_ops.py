"""torch custom ops of the block formats, quantized attention and the decode KV cache:
the same results as eager calls, under torch.compile(fullgraph=True), and opcheck's
schema / fake-tensor / autograd-registration tests. On the CPU (torch's CPU tensors)
everywhere torch is installed; on CUDA where there is a GPU."""
import numpy as np
import pytest
from conftest import cuda_available, has_module

pytestmark = pytest.mark.skipif(not has_module("torch"), reason="needs torch")

import lowbit  # noqa: E402
from lowbit import _lowbit  # noqa: E402

if has_module("torch"):
    import torch

    import lowbit.torch_ops as torch_ops

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not cuda_available(), reason="needs a CUDA GPU"))]


def bits_equal(a, b):
    assert a.shape == b.shape and a.dtype == b.dtype and a.device == b.device
    if a.dtype.is_floating_point:
        view = {2: torch.int16, 4: torch.int32}[a.element_size()]
        a, b = a.view(view), b.view(view)
    assert torch.equal(a, b)


def fresh_compile(fn, backend="aot_eager"):
    # aot_eager traces through Dynamo, the fake implementations and functionalization (what
    # torch.compile needs of an op) without inductor's C++ build, which keeps CPU runs short.
    torch._dynamo.reset()
    return torch.compile(fn, fullgraph=True, backend=backend)


@pytest.mark.parametrize("fmt", ["nf4", "mxfp4", "nvfp4"])
def test_block_format_table_matches_cpp(fmt):
    code_cols, scale_count, scale_dtype, has_global, block = _lowbit.block_layout(fmt, 3, 128)
    want_block, want_dtype, want_global = torch_ops.BLOCK_FORMATS[fmt]
    assert (block, has_global, code_cols, scale_count) == (want_block, want_global, 64, 3 * 128 // want_block)
    assert {"f32": torch.float32, "u8": torch.uint8}[scale_dtype] == want_dtype


@pytest.mark.parametrize("device", DEVICES)
def test_block_ops_under_compile(device):
    g = torch.Generator().manual_seed(0)
    w = torch.randn(32, 128, generator=g).to(device)

    def f(w):
        enc = lowbit.block_encode(w, "nvfp4")
        back = lowbit.block_decode(enc, dtype=torch.float16)
        nf4 = lowbit.block_encode(w, "nf4")
        return back.float() * 2, nf4.codes, lowbit.block_decode(nf4) + 1

    # inductor on the GPU; on the CPU it builds C++ for ~40 s on two cores: aot_eager there.
    for got, want in zip(fresh_compile(f, "inductor" if device == "cuda" else "aot_eager")(w), f(w)):
        bits_equal(got, want)
    enc = lowbit.block_encode(w, "mxfp4")
    torch.library.opcheck(torch.ops.lowbit.block_encode, (w, "mxfp4"))
    torch.library.opcheck(torch.ops.lowbit.block_decode, (enc.codes, enc.scales, None, "mxfp4", 128, "f32"))


@pytest.mark.parametrize("device", DEVICES)
def test_quantized_attention_under_compile(device):
    g = torch.Generator().manual_seed(1)
    d_model, heads, kv_heads, head_dim = 128, 2, 1, 64
    ws = [lowbit.block_encode(torch.randn(n * head_dim, d_model, generator=g).to(device) / 8, "nf4")
          for n in (heads, kv_heads, kv_heads)]
    x = torch.randn(24, d_model, generator=g).to(device, torch.float16)

    def f(x):
        return lowbit.quantized_attention(x, *ws, heads=heads, kv_heads=kv_heads, head_dim=head_dim, causal=True) * 2

    bits_equal(fresh_compile(f)(x), f(x))
    parts = [p for w in ws for p in (w.codes, w.scales, w.global_scale)]
    torch.library.opcheck(torch.ops.lowbit.quantized_attention,
                          (x, *parts, None, None, None, heads, kv_heads, head_dim, True, "nf4", "fused_two_kernel"))


def kv_tokens(device, n, kv_heads, n_heads, head_dim, seed):
    g = torch.Generator().manual_seed(seed)
    k = torch.randn(n, kv_heads, head_dim, generator=g).to(device, torch.float16)
    v = torch.randn(n, kv_heads, head_dim, generator=g).to(device, torch.float16)
    q = torch.randn(n, n_heads, head_dim, generator=g).to(device, torch.float16)
    return k, v, q


def test_kv_cache_torch_cpu_equals_numpy():
    k, v, q = kv_tokens("cpu", 20, 2, 4, 64, 3)
    ours = lowbit.LayerKVCache("selective", 2, 64, 32, sink=2, window=4, kv_bits=4, device="cpu")
    ref = lowbit.LayerKVCache("selective", 2, 64, 32, sink=2, window=4, kv_bits=4)
    for t in range(20):
        ours.append(k[t], v[t])
        ref.append(k[t].numpy(), v[t].numpy())
        np.testing.assert_array_equal(ours.attention(q[t]).numpy(), ref.attention(q[t].numpy()))
    for name, buf in ours.buffers.items():
        assert isinstance(buf, torch.Tensor)
        np.testing.assert_array_equal(buf.numpy().view(np.uint8), ref.buffers[name].view(np.uint8))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("policy", ["selective", "int4"])
def test_kv_cache_under_compile(device, policy):
    kv_heads, n_heads, head_dim = 2, 4, 64
    k, v, q = kv_tokens(device, 12, kv_heads, n_heads, head_dim, 4)
    eager = lowbit.LayerKVCache(policy, kv_heads, head_dim, 16, sink=2, window=3, kv_bits=4, device=device)
    compiled = lowbit.LayerKVCache(policy, kv_heads, head_dim, 16, sink=2, window=3, kv_bits=4, device=device)

    def step(cache, k, v, q):
        cache.append(k, v)
        return cache.attention(q, out_dtype=torch.float16).float() + 1

    for t in range(9):  # eager steps up to the last three
        step(eager, k[t], v[t], q[t])
        if t < 6:
            step(compiled, k[t], v[t], q[t])
    torch._dynamo.reset()
    fn = torch.compile(step, fullgraph=True, backend="aot_eager", dynamic=False)
    for t in range(6, 9):  # one graph per length (the length is a constant of the graph)
        got = fn(compiled, k[t], v[t], q[t])
    assert compiled.length == eager.length == 9
    bits_equal(got, eager.attention(q[8], out_dtype=torch.float16).float() + 1)
    for name in eager.buffers:
        bits_equal(compiled.buffers[name], eager.buffers[name])


@pytest.mark.parametrize("device", DEVICES)
def test_kv_ops_opcheck(device):
    kv_heads, n_heads, head_dim = 1, 2, 64
    k, v, q = kv_tokens(device, 6, kv_heads, n_heads, head_dim, 5)
    cache = lowbit.LayerKVCache("selective", kv_heads, head_dim, 8, sink=1, window=2, kv_bits=8, device=device)
    for t in range(5):
        cache.append(k[t], v[t])
    spec = cache._spec()
    torch.library.opcheck(torch.ops.lowbit.kv_attention, (*cache.buffers.values(), q[4], "selective", spec, 5, "f32"))
    torch.library.opcheck(torch.ops.lowbit.kv_append, (*cache.buffers.values(), k[5], v[5], "selective", spec, 5))


@pytest.mark.parametrize("device", DEVICES)
def test_kv_position_tensor_forms_compile_once(device):
    """With the position in a tensor, one compiled graph serves every decode step."""
    kv_heads, n_heads, head_dim = 2, 4, 64
    k, v, q = kv_tokens(device, 10, kv_heads, n_heads, head_dim, 6)
    eager = lowbit.LayerKVCache("selective", kv_heads, head_dim, 10, sink=2, window=3, kv_bits=8, device=device)
    compiled = lowbit.LayerKVCache("selective", kv_heads, head_dim, 10, sink=2, window=3, kv_bits=8, device=device)
    pos = torch.zeros(1, dtype=torch.int32, device=device)

    def step(cache, k, v, q, pos):
        cache.append_at(k, v, pos)
        out = cache.attention_at(q, pos)
        pos.add_(1)
        return out * 2

    fn = fresh_compile(step)
    with torch._dynamo.config.patch(error_on_recompile=True):
        for t in range(10):
            got = fn(compiled, k[t], v[t], q[t], pos)
            eager.append(k[t], v[t])
            want = eager.attention(q[t]) * 2
            if device == "cpu":
                bits_equal(got, want)
            else:  # the graph form runs the split plan of max_length positions
                torch.testing.assert_close(got, want, rtol=2e-3, atol=2e-3)
    assert int(pos.item()) == 10
    for name in eager.buffers:
        bits_equal(compiled.buffers[name], eager.buffers[name])
    spec = compiled._spec()
    torch.library.opcheck(torch.ops.lowbit.kv_attention_at, (*compiled.buffers.values(), q[9], pos - 1, "selective",
                                                             spec, "f16"))
    torch.library.opcheck(torch.ops.lowbit.kv_append_at, (*compiled.buffers.values(), k[9], v[9], pos - 1,
                                                          "selective", spec))

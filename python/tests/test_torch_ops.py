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
def test_quantize_ops_under_compile_on_symbolic_sizes(device):
    """quantize_tensor / dequantize_tensor trace under torch.compile with symbolic sizes
    (dynamic=True: the shape functions evaluate the C++ layout rule on SymInts), one graph
    for every size, giving the eager bits; opcheck's schema and fake-tensor tests."""
    g = torch.Generator().manual_seed(7)

    def f(x):
        codes, scales, mins = lowbit.quantize_tensor(x, "int4", "group", 32)
        y = lowbit.dequantize_tensor(codes, scales, mins, "int4", "group", 32, dtype=torch.float16, cols=x.shape[1])
        c8, s8, none = lowbit.quantize_tensor(x, "int8", "channel")
        assert none is None
        return codes, scales, mins, y * 2, c8, s8, lowbit.dequantize_tensor(c8, s8, None, "int8", "channel") + 1

    torch._dynamo.reset()
    fn = torch.compile(f, fullgraph=True, backend="aot_eager", dynamic=True)
    with torch._dynamo.config.patch(error_on_recompile=True):
        for rows, cols in [(5, 64), (9, 96), (3, 33)]:
            x = torch.randn(rows, cols, generator=g).to(device)
            got, want = fn(x), f(x)
            assert got[1].shape == (rows, (cols + 31) // 32) and got[0].shape == (rows, (cols + 1) // 2)
            for a, b in zip(got, want):
                bits_equal(a, b)
    x = torch.randn(6, 40, generator=g).to(device)
    torch.library.opcheck(torch.ops.lowbit.quantize, (x, "int8", "token", 0))
    torch.library.opcheck(torch.ops.lowbit.quantize, (x, "int4", "group", 16))
    codes, scales, mins = torch.ops.lowbit.quantize(x, "int4_sym", "channel", 0)
    torch.library.opcheck(torch.ops.lowbit.dequantize, (codes, scales, mins, "int4_sym", "channel", 0, 40, "bf16"))


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


@pytest.mark.parametrize("scheme", ["int8", "int4", "int8_asym", "int4_sym"])
@pytest.mark.parametrize("granularity,group", [("tensor", 0), ("channel", 0), ("token", 0), ("group", 16)])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_quantize_torch_cpu_equals_numpy(scheme, granularity, group, dtype):
    """torch tensors' outputs go to _lowbit.quantize by address, NumPy's as arrays: the
    same bits (bfloat16 against its float32 widening, which is exact)."""
    x = torch.randn(7, 37, dtype=getattr(torch, dtype))
    got = lowbit.quantize_tensor(x, scheme, granularity, group)
    want = lowbit.quantize_tensor(x.float().numpy() if dtype == "bfloat16" else x.numpy(), scheme, granularity, group)
    for g, w in zip(got, want):
        if w is None:
            assert g is None
        else:
            assert isinstance(g, torch.Tensor) and g.is_contiguous()
            np.testing.assert_array_equal(g.numpy().view(np.uint8), w.view(np.uint8))


def test_quantize_torch_cpu_errors():
    with pytest.raises(lowbit.LowbitError, match="x: contains nan at row 1, column 2"):
        lowbit.quantize_tensor(torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, float("nan")]]), "int8", "token")
    with pytest.raises(lowbit.LowbitError, match="non-empty"):
        lowbit.quantize_tensor(torch.ones(0, 3), "int8")
    with pytest.raises(lowbit.LowbitError, match="dtype float64 is not one lowbit takes"):
        lowbit.quantize_tensor(torch.ones(2, 3, dtype=torch.float64))
    with pytest.raises(lowbit.LowbitError, match="group_size"):
        lowbit.quantize_tensor(torch.ones(2, 40), "int8", "group", 24)
    # Outputs by address meet the checks arrays meet.
    x = torch.ones(2, 3)
    with pytest.raises(lowbit.LowbitError, match="codes"):
        _lowbit.quantize(x, 0, torch.empty(2).data_ptr(), 0, "int8", "token", 0, None, 0, False, 0)
    with pytest.raises(lowbit.LowbitError, match="rank-2"):
        _lowbit.quantize(torch.ones(6), torch.empty(2).data_ptr(), torch.empty(2).data_ptr(), 0, "int8", "token", 0,
                         None, 0, False, 0)
    with pytest.raises(lowbit.LowbitError, match="mins: int8 \\(symmetric\\) has no mins"):
        _lowbit.quantize(x, torch.empty(2, 3, dtype=torch.int8).data_ptr(), torch.empty(2).data_ptr(),
                         torch.empty(2).data_ptr(), "int8", "token", 0, None, 0, False, 0)
    with pytest.raises(TypeError):  # a negative number is no address
        _lowbit.quantize(x, -1, torch.empty(2).data_ptr(), 0, "int8", "token", 0, None, 0, False, 0)


@pytest.mark.parametrize("device", DEVICES)
def test_torch_tensors_of_every_layout_and_path(device):
    """torch tensors reach the binding through torch's DLPack C exchange API (Tensor,
    Parameter; torch >= 2.11), else to_dlpack, and subclasses through nanobind's import:
    each describes the memory itself (an offset slice, a column slice with row stride >
    cols, a Parameter, a tensor requiring grad), giving the bits of a contiguous copy."""
    from lowbit._backend import torch_backend

    probe = torch.empty(0, device=device)
    stream = torch_backend().stream(probe)  # the backend names torch's types to the binding
    status = torch_backend().status_word(probe) if device == "cuda" else None
    fast = "exchange" if hasattr(torch.Tensor, "__dlpack_c_exchange_api__") else "to_dlpack"
    base = torch.randn(9, 80, generator=torch.Generator().manual_seed(3)).to(device)
    cases = {"offset rows": base[1:5], "column slice": base[:, 3:67],
             "parameter": torch.nn.Parameter(base[:4, :64].clone()),
             "requires grad": base[:4, :64].clone().requires_grad_()}
    for name, x in cases.items():
        refused = name == "requires grad" and fast == "to_dlpack"  # to_dlpack refuses it
        assert _lowbit._import_path(x) == ("nanobind" if refused else fast), name
        got = lowbit.quantize_tensor(x, "int8", "token")
        want = lowbit.quantize_tensor(x.detach().contiguous(), "int8", "token")
        for g, w in zip(got[:2], want[:2]):
            bits_equal(g, w)
        bits_equal(lowbit.dequantize_tensor(*got, "int8", "token"), lowbit.dequantize_tensor(*want, "int8", "token"))

    class Marked(torch.Tensor):
        pass

    marked = base[2:6, :64].as_subclass(Marked)
    assert _lowbit._import_path(marked) == "nanobind"
    codes, scales = torch.empty(4, 64, dtype=torch.int8, device=device), torch.empty(4, device=device)
    _lowbit.quantize(marked, codes, scales, None, "int8", "token", 0, None, stream, True, status)
    want = lowbit.quantize_tensor(base[2:6, :64].contiguous(), "int8", "token")
    bits_equal(codes, want[0])
    bits_equal(scales, want[1])


@pytest.mark.parametrize("out_dtype", ["float32", "float16", "bfloat16"])
def test_dequantize_torch_cpu_equals_numpy(out_dtype):
    """dequantize_tensor on torch CPU tensors equals it on NumPy arrays."""
    x = np.random.default_rng(1).standard_normal((6, 33)).astype(np.float32)
    for scheme, granularity, group in [("int8", "token", 0), ("int4", "group", 16), ("int4_sym", "channel", 0)]:
        want_q = lowbit.quantize_tensor(x, scheme, granularity, group)
        got_q = tuple(None if t is None else torch.from_numpy(t) for t in want_q)
        got = lowbit.dequantize_tensor(*got_q, scheme, granularity, group, dtype=getattr(torch, out_dtype), cols=33)
        assert got.dtype == getattr(torch, out_dtype) and got.shape == (6, 33)
        want = lowbit.dequantize_tensor(*want_q, scheme, granularity, group, cols=33)
        if out_dtype == "float16":
            want = lowbit.dequantize_tensor(*want_q, scheme, granularity, group, dtype="float16", cols=33)
        if out_dtype == "bfloat16":
            np.testing.assert_allclose(got.float().numpy(), want, rtol=1e-2)
        else:
            np.testing.assert_array_equal(got.numpy(), want)


@pytest.mark.parametrize("kernel", ["int8", "int4"])
@pytest.mark.parametrize("b_layout", ["k_by_n", "n_by_k"])
def test_matmul_torch_cpu_equals_numpy(kernel, b_layout):
    """int8_matmul / int4_matmul on torch CPU tensors equal them on NumPy arrays."""
    rng = np.random.default_rng(2)
    m, n, k = 5, 7, 33
    if kernel == "int8":
        a = rng.integers(-128, 128, (m, k), dtype=np.int8)
        b = rng.integers(-128, 128, (k, n) if b_layout == "k_by_n" else (n, k), dtype=np.int8)
        call = lowbit.int8_matmul
    else:
        a = rng.integers(0, 256, (m, (k + 1) // 2), dtype=np.uint8)
        b = rng.integers(0, 256, ((k + 1) // 2, n) if b_layout == "k_by_n" else (n, (k + 1) // 2), dtype=np.uint8)
        call = lambda a, b, **kw: lowbit.int4_matmul(a, b, k, **kw)  # noqa: E731
    scale_b = rng.random(n).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    for kw in [{}, {"scale_a": 0.5, "scale_b": scale_b, "bias": bias, "relu": True},
               {"scale_c": 0.25, "out_dtype": "float16"}]:
        want = call(a, b, b_layout=b_layout, **kw)
        tkw = {key: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for key, v in kw.items()}
        got = call(torch.from_numpy(a), torch.from_numpy(b), b_layout=b_layout, **tkw)
        assert isinstance(got, torch.Tensor) and got.shape == want.shape
        np.testing.assert_array_equal(got.numpy(), want)
    got = call(torch.from_numpy(a), torch.from_numpy(b), b_layout=b_layout, out_dtype=torch.bfloat16)
    assert got.dtype == torch.bfloat16 and got.shape == want.shape


def test_kv_cache_torch_cpu_equals_numpy():
    k, v, q = kv_tokens("cpu", 20, 2, 4, 64, 3)
    ours = lowbit.LayerKVCache("selective", 2, 64, 32, sink=2, window=4, kv_bits=4, device="cpu")
    ref = lowbit.LayerKVCache("selective", 2, 64, 32, sink=2, window=4, kv_bits=4)
    for t in range(20):
        ours.append(k[t], v[t])
        ref.append(k[t].numpy(), v[t].numpy())
        np.testing.assert_array_equal(ours.attention(q[t]).numpy(), ref.attention(q[t].numpy()))
        for got, want in zip(ours.read(), ref.read()):
            assert isinstance(got, torch.Tensor) and got.dtype == torch.float16
            np.testing.assert_array_equal(got.numpy().view(np.uint16), want.view(np.uint16))
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
        keys, values = cache.read()
        return cache.attention(q, out_dtype=torch.float16).float() + 1, keys * 2, values

    for t in range(9):  # eager steps up to the last three
        step(eager, k[t], v[t], q[t])
        if t < 6:
            step(compiled, k[t], v[t], q[t])
    torch._dynamo.reset()
    fn = torch.compile(step, fullgraph=True, backend="aot_eager", dynamic=False)
    for t in range(6, 9):  # one graph per length (the length is a constant of the graph)
        got = fn(compiled, k[t], v[t], q[t])
    assert compiled.length == eager.length == 9
    bits_equal(got[0], eager.attention(q[8], out_dtype=torch.float16).float() + 1)
    keys, values = eager.read()
    assert keys.shape == (9, kv_heads, head_dim)
    bits_equal(got[1], keys * 2)
    bits_equal(got[2], values)
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
    torch.library.opcheck(torch.ops.lowbit.kv_read, (*cache.buffers.values(), "selective", spec, 5))


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

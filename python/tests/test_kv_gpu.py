"""lowbit.kv.LayerKVCache on CUDA tensors (the engine's kv_append, decode_attention and
kv_read kernels) against its CPU path: the same buffer bytes after every append, attention
equal within float32 accumulation, read() bit for bit; on the current stream; inside a
CUDA graph."""
import numpy as np
import pytest
from conftest import cuda_available

pytestmark = pytest.mark.skipif(not cuda_available(), reason="needs torch with a CUDA GPU")

import lowbit  # noqa: E402

if cuda_available():
    import torch

    import lowbit.torch_ops  # noqa: F401


def tokens(n, heads, d, gain, seed):
    rng = np.random.default_rng(seed)
    channel = gain * np.where(rng.standard_normal(d) > 1.5, 6.0, 1.0)
    return (rng.standard_normal((n, heads, d)) * channel).astype(np.float16)


def same_bytes(gpu_buffer, cpu_buffer):
    np.testing.assert_array_equal(gpu_buffer.cpu().numpy().view(np.uint8), cpu_buffer.view(np.uint8))


CASES = [  # policy, kv_bits, kv_heads, n_heads, head_dim, tokens, max_tokens, sink, window
    ("full", 8, 2, 8, 128, 300, 320, 0, 0),
    ("window", 8, 1, 4, 64, 500, 64, 4, 32),
    ("selective", 8, 2, 4, 64, 200, 256, 4, 16),
    ("selective", 4, 8, 32, 128, 1500, 2048, 16, 32),
    ("selective", 4, 1, 3, 64, 70, 80, 0, 8),
    ("int8", 8, 4, 12, 128, 130, 160, 0, 0),
    ("int4", 4, 2, 16, 64, 2100, 2100, 0, 0),
]


@pytest.mark.parametrize("policy,kv_bits,kv_heads,n_heads,head_dim,n,max_tokens,sink,window", CASES)
def test_gpu_equals_cpu(policy, kv_bits, kv_heads, n_heads, head_dim, n, max_tokens, sink, window):
    seed = CASES.index((policy, kv_bits, kv_heads, n_heads, head_dim, n, max_tokens, sink, window))
    k = tokens(n, kv_heads, head_dim, 1.0, seed)
    v = tokens(n, kv_heads, head_dim, 0.5, seed + 100)
    q = tokens(n, n_heads, head_dim, 0.3, seed + 200)
    args = (policy, kv_heads, head_dim, max_tokens, sink, max(window, 1), kv_bits)
    gpu = lowbit.LayerKVCache(*args, device="cuda")
    cpu = lowbit.LayerKVCache(*args)
    kd, vd, qd = (torch.from_numpy(a).cuda() for a in (k, v, q))
    checks = {1, 2, sink + 1, sink + window, sink + window + 1, n // 2, n}
    for t in range(n):
        gpu.append(kd[t], vd[t])
        cpu.append(k[t], v[t])
        if t + 1 in checks:
            want = cpu.attention(q[t])
            got = gpu.attention(qd[t])
            assert got.is_cuda and got.dtype == torch.float32 and got.shape == (n_heads, head_dim)
            vmax = np.abs(v[: t + 1].astype(np.float32)).max()
            np.testing.assert_allclose(got.cpu().numpy(), want, rtol=2e-3, atol=2e-3 * vmax)
            half = gpu.attention(qd[t], out_dtype=torch.float16)
            assert half.dtype == torch.float16
            np.testing.assert_allclose(half.float().cpu().numpy(), want, rtol=4e-3, atol=4e-3 * vmax)
            for name, buf in gpu.buffers.items():
                same_bytes(buf, cpu.buffers[name])
            # read(): the kernel gives the CPU twin's values, bit for bit
            for got, want in zip(gpu.read(), cpu.read()):
                assert got.is_cuda and got.dtype == torch.float16 and got.shape == want.shape
                same_bytes(got, want)


def test_read_runs_on_current_stream():
    k = torch.randn(300, 2, 64, device="cuda").half()
    cache = lowbit.LayerKVCache("selective", 2, 64, 512, 4, 16, 4, device="cuda")
    cpu = lowbit.LayerKVCache("selective", 2, 64, 512, 4, 16, 4)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for t in range(300):
            cache.append(k[t], k[t])
        keys, values = cache.read()
    s.synchronize()
    kc = k.cpu().numpy()
    for t in range(300):
        cpu.append(kc[t], kc[t])
    want_k, want_v = cpu.read()
    same_bytes(keys, want_k)
    same_bytes(values, want_v)


def test_runs_on_current_stream():
    k = torch.randn(2048, 2, 128, device="cuda").half()
    q = torch.randn(8, 128, device="cuda").half()
    cache = lowbit.LayerKVCache("selective", 2, 128, 2048, 16, 32, 8, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for t in range(2048):
            cache.append(k[t], k[t])
        out = cache.attention(q)
    s.synchronize()
    cpu = lowbit.LayerKVCache("selective", 2, 128, 2048, 16, 32, 8)
    kc = k.cpu().numpy()
    for t in range(2048):
        cpu.append(kc[t], kc[t])
    np.testing.assert_allclose(out.cpu().numpy(), cpu.attention(q.cpu().numpy()), rtol=2e-3, atol=2e-2)


def test_in_cuda_graph():
    kv_heads, n_heads, d = 2, 8, 128
    k = torch.randn(100, kv_heads, d, device="cuda").half()
    q = torch.randn(n_heads, d, device="cuda").half()
    cache = lowbit.LayerKVCache("selective", kv_heads, d, 128, 4, 16, 4, device="cuda")
    for t in range(99):
        cache.append(k[t], k[t])
    bufs, spec = list(cache.buffers.values()), cache._spec()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up outside capture
        torch.ops.lowbit.kv_attention(*bufs, q, "selective", spec, 99, "f32")
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # the position and length are fixed at capture
        torch.ops.lowbit.kv_append(*bufs, k[99], k[99], "selective", spec, 99)
        out = torch.ops.lowbit.kv_attention(*bufs, q, "selective", spec, 100, "f32")
    graph.replay()
    torch.cuda.synchronize()
    eager = lowbit.LayerKVCache("selective", kv_heads, d, 128, 4, 16, 4, device="cuda")
    for t in range(100):
        eager.append(k[t], k[t])
    assert torch.equal(out, eager.attention(q))
    for name, buf in eager.buffers.items():
        assert torch.equal(cache.buffers[name].view(torch.uint8), buf.view(torch.uint8)), name


def test_errors_from_gpu():
    cache = lowbit.LayerKVCache("int8", 2, 64, 8, device="cuda")
    with pytest.raises(lowbit.LowbitError, match="k: on cpu, but|but the token is on cpu|k_scales: on cuda"):
        cache.append(torch.zeros(2, 64, dtype=torch.float16), torch.zeros(2, 64, dtype=torch.float16))
    cache.append(torch.zeros(2, 64, dtype=torch.float16, device="cuda"),
                 torch.zeros(2, 64, dtype=torch.float16, device="cuda"))
    with pytest.raises(lowbit.LowbitError, match="16-byte aligned"):
        q = torch.zeros(2 * 64 + 1, dtype=torch.float16, device="cuda")[1:].view(2, 64)
        cache.attention(q)


@pytest.mark.parametrize("policy,kv_bits", [("selective", 4), ("int8", 8), ("full", 8)])
def test_one_cuda_graph_for_every_step(policy, kv_bits):
    """append_at + attention_at + pos += 1 captured once, replayed for every token: the
    buffers equal the CPU cache's byte for byte, the outputs its attention."""
    kv_heads, n_heads, d, n = 2, 8, 128, 300
    k = tokens(n, kv_heads, d, 1.0, 1)
    q = tokens(n, n_heads, d, 0.3, 2)
    args = (policy, kv_heads, d, n, 8, 32, kv_bits)
    cache = lowbit.LayerKVCache(*args, device="cuda")
    cpu = lowbit.LayerKVCache(*args)
    k_in = torch.empty(kv_heads, d, dtype=torch.float16, device="cuda")
    q_in = torch.empty(n_heads, d, dtype=torch.float16, device="cuda")
    pos = torch.zeros(1, dtype=torch.int32, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up outside capture (no append: position 0 stays empty)
        cache.attention_at(q_in, pos)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        cache.append_at(k_in, k_in, pos)
        out = cache.attention_at(q_in, pos)
        pos += 1
    for t in range(n):
        k_in.copy_(torch.from_numpy(k[t]))
        q_in.copy_(torch.from_numpy(q[t]))
        graph.replay()
        cpu.append(k[t], k[t])
        if t in (0, 7, 8, 40, 41, n // 2, n - 1):
            want = cpu.attention(q[t])
            vmax = np.abs(k[: t + 1].astype(np.float32)).max()
            np.testing.assert_allclose(out.cpu().numpy(), want, rtol=2e-3, atol=2e-3 * vmax)
    assert int(pos.item()) == n
    for name, buf in cache.buffers.items():
        same_bytes(buf, cpu.buffers[name])

"""lowbit.kv.LayerKVCache on NumPy arrays (the CPU twin of the engine's decode cache):
its buffers hold quantize_tensor's per-token scales and mins rounded to f16 and the codes
those rounded values give, its attention equals an FP64 NumPy attention over the values
those give, and read() returns those values rounded to f16; bad input raises LowbitError
with the C++ message."""
import numpy as np
import pytest

import lowbit
from lowbit import _lowbit


def random_tokens(rng, n, heads, d, gain=1.0):
    """n tokens of f16 [heads, d]: N(0, 1) with a few loud channels, as real keys have."""
    channel = gain * np.where(rng.standard_normal(d) > 1.5, 6.0, 1.0)
    return (rng.standard_normal((n, heads, d)) * channel).astype(np.float16)


def quantized_form(x, bits):
    """(codes, scales, mins, values) of one token [heads, d] as the KV cache stores it, per
    token (per head): quantize_tensor's f32 scale (and min) rounded to f16, the codes encoded
    with the rounded values (q = rint(x / s) or rint((x - m) / s), in f32, clamped), and the
    values q * s (+ m) they stand for (one rounding: the kernels' fma)."""
    scheme = "int8" if bits == 8 else "int4"
    _, scales32, mins32 = lowbit.quantize_tensor(x, scheme, "token")
    scales = scales32.astype(np.float16)
    s = scales.astype(np.float32)[:, None]
    inv = np.float32(1) / np.where(s > 0, s, np.float32(1))
    inv = np.where(s > 0, inv, np.float32(0)).astype(np.float32)
    xf = x.astype(np.float32)
    if bits == 8:
        mins = None
        q = np.clip(np.rint(xf * inv), -128, 127)
        codes = q.astype(np.int8)
        values = (codes.astype(np.float64) * s).astype(np.float32)  # integer codes: 0, never -0
    else:
        mins = mins32.astype(np.float16)
        m = mins.astype(np.float32)[:, None]
        q = np.clip(np.rint((xf - m) * inv), 0, 15)
        qi = q.astype(np.uint8)
        codes = qi[:, 0::2] | (qi[:, 1::2] << 4)
        values = (qi.astype(np.float64) * s + m).astype(np.float32)
    return codes, scales, mins, values


def visible(policy, length, sink, window):
    """[(position, form)] the newest query reads: form 'f16' or 'q'."""
    if policy == "full":
        return [(p, "f16") for p in range(length)]
    if policy in ("int8", "int4"):
        return [(p, "q") for p in range(length)]
    sink_end = min(sink, length)
    recent = max(sink_end, length - window)
    body = [] if policy == "window" else [(p, "q") for p in range(sink_end, recent)]
    return [(p, "f16") for p in range(sink_end)] + body + [(p, "f16") for p in range(recent, length)]


def reference_attention(q, keys, values, kv_heads):
    """FP64 softmax(q k^T / sqrt(d)) v per query head (GQA), keys/values [n, kv_heads, d]."""
    n_heads, d = q.shape
    group = n_heads // kv_heads
    out = np.empty((n_heads, d))
    for h in range(n_heads):
        k = keys[:, h // group, :].astype(np.float64)
        v = values[:, h // group, :].astype(np.float64)
        s = k @ q[h].astype(np.float64) / np.sqrt(d)
        p = np.exp(s - s.max())
        out[h] = (p / p.sum()) @ v
    return out


def bits(a):
    a = np.ascontiguousarray(a)
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32}[a.dtype.itemsize])


CASES = [  # policy, kv_bits, kv_heads, n_heads, head_dim
    ("full", 8, 2, 4, 64),
    ("window", 8, 1, 3, 128),
    ("selective", 8, 2, 4, 64),
    ("selective", 4, 2, 2, 128),
    ("selective", 4, 1, 4, 64),
    ("int8", 8, 2, 6, 64),
    ("int4", 4, 1, 1, 128),
]


@pytest.mark.parametrize("policy,kv_bits,kv_heads,n_heads,head_dim", CASES)
def test_kv_cache_equals_reference(policy, kv_bits, kv_heads, n_heads, head_dim):
    rng = np.random.default_rng(CASES.index((policy, kv_bits, kv_heads, n_heads, head_dim)))
    sink, window, max_tokens, n = 4, 8, 40, 40
    cache = lowbit.LayerKVCache(policy, kv_heads, head_dim, max_tokens, sink, window, kv_bits)
    keys = random_tokens(rng, n, kv_heads, head_dim, 1.0)
    vals = random_tokens(rng, n, kv_heads, head_dim, 0.5)
    queries = random_tokens(rng, n, n_heads, head_dim, 0.3)
    forms = [(quantized_form(keys[p], kv_bits), quantized_form(vals[p], kv_bits)) for p in range(n)]
    layout = cache.layout
    for length in range(1, n + 1):
        cache.append(keys[length - 1], vals[length - 1])
        assert cache.length == length
        if length not in (1, 4, 5, 12, 13, 14, 27, 40):
            continue
        seen = visible(policy, length, sink, window)
        k_ref = np.stack([keys[p].astype(np.float32) if f == "f16" else forms[p][0][3] for p, f in seen])
        v_ref = np.stack([vals[p].astype(np.float32) if f == "f16" else forms[p][1][3] for p, f in seen])
        want = reference_attention(queries[length - 1], k_ref, v_ref, kv_heads)
        got = cache.attention(queries[length - 1])
        assert got.dtype == np.float32 and got.shape == (n_heads, head_dim)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        half = cache.attention(queries[length - 1], out_dtype="float16")
        assert half.dtype == np.float16
        np.testing.assert_array_equal(half, got.astype(np.float16))  # one rounding of the f32 result
        # read(): the values that query read, each rounded once to f16
        k_read, v_read = cache.read()
        assert k_read.dtype == v_read.dtype == np.float16
        assert k_read.shape == v_read.shape == (len(seen), kv_heads, head_dim)
        np.testing.assert_array_equal(bits(k_read), bits(k_ref.astype(np.float16)))
        np.testing.assert_array_equal(bits(v_read), bits(v_ref.astype(np.float16)))
        # The buffers: quantized positions hold those codes and f16 scales and mins.
        for p, f in seen:
            if f != "q":
                continue
            b = p - layout["body_base"]
            for part, (codes, scales, mins, _) in zip("kv", forms[p]):
                np.testing.assert_array_equal(cache.buffers[f"{part}_codes"][b], codes)
                np.testing.assert_array_equal(bits(cache.buffers[f"{part}_scales"][b]), bits(scales))
                if mins is not None:
                    np.testing.assert_array_equal(bits(cache.buffers[f"{part}_mins"][b]), bits(mins))
    # FP16 slots hold the tokens' bits (full: slot = position; ring: sink + p % window)
    if policy in ("full", "window", "selective"):
        for p, f in visible(policy, n, sink, window):
            if f == "f16":
                slot = p if (policy == "full" or p < sink) else sink + p % window
                np.testing.assert_array_equal(bits(cache.buffers["k_f16"][:, slot, :]), bits(keys[p]))
                np.testing.assert_array_equal(bits(cache.buffers["v_f16"][:, slot, :]), bits(vals[p]))


def test_window_policy_takes_any_number_of_tokens():
    rng = np.random.default_rng(5)
    cache = lowbit.LayerKVCache("window", 1, 64, max_tokens=8, sink=2, window=4)
    assert cache.capacity == -1
    toks = random_tokens(rng, 30, 1, 64)
    for t in toks:
        cache.append(t, t)
    q = random_tokens(rng, 1, 2, 64)[0]
    seen = [p for p, _ in visible("window", 30, 2, 4)]
    want = reference_attention(q, toks[seen].astype(np.float32), toks[seen].astype(np.float32), 1)
    np.testing.assert_allclose(cache.attention(q), want, rtol=1e-5, atol=1e-6)
    k, v = cache.read()  # the sink and the window: the dropped middle is not read
    assert k.shape == (6, 1, 64)
    np.testing.assert_array_equal(bits(k), bits(toks[seen]))
    np.testing.assert_array_equal(bits(v), bits(toks[seen]))


def test_read_errors():
    cache = lowbit.LayerKVCache("selective", 1, 64, 8, sink=1, window=2)
    with pytest.raises(lowbit.LowbitError, match=r"kv_read: the cache is empty \(length 0\); append a token first"):
        cache.read()
    t = np.ones((1, 64), np.float16)
    cache.append(t, t)
    k, v = cache.read()
    assert k.shape == (1, 1, 64) and np.all(k == 1) and np.all(v == 1)
    # below the Python layer: the outputs must hold the visible values
    with pytest.raises(lowbit.LowbitError, match=r"k_out: expected a contiguous f16 \[1 x 1 x 64\]"):
        cache._layer.read(np.zeros((2, 1, 64), np.float16), np.zeros((1, 1, 64), np.float16), 1, 0)
    with pytest.raises(lowbit.LowbitError, match="v_out: expected a contiguous f16"):
        cache._layer.read(np.zeros((1, 1, 64), np.float16), np.zeros((1, 1, 64), np.float32), 1, 0)
    with pytest.raises(lowbit.LowbitError, match=r"kv_read: length 9, expected 1\.\.8"):
        cache._layer.read(np.zeros((9, 1, 64), np.float16), np.zeros((9, 1, 64), np.float16), 9, 0)


@pytest.mark.parametrize("policy,kv_bits", [("full", 8), ("window", 8), ("selective", 8), ("selective", 4),
                                            ("int8", 8), ("int4", 4)])
def test_nbytes(policy, kv_bits):
    cache = lowbit.LayerKVCache(policy, 2, 128, max_tokens=1024, sink=16, window=32, kv_bits=kv_bits)
    assert cache.nbytes == sum(b.nbytes for b in cache.buffers.values())
    full = 2 * 2 * 1024 * 128 * 2
    expect = {"full": full, "window": 2 * 2 * 48 * 128 * 2,
              "selective": 2 * (2 * 48 * 128 * 2 + 2 * 976 * (128 * kv_bits // 8 + 2 * (1 if kv_bits == 8 else 2))),
              "int8": 2 * 2 * 1024 * (128 + 2), "int4": 2 * 2 * 1024 * (64 + 4)}[policy]  # f16 scales, mins
    assert cache.nbytes == expect
    assert "nbytes=" in repr(cache)


def test_reset():
    rng = np.random.default_rng(2)
    a = lowbit.LayerKVCache("selective", 1, 64, 16, 2, 3, 4)
    b = lowbit.LayerKVCache("selective", 1, 64, 16, 2, 3, 4)
    junk, toks = random_tokens(rng, 9, 1, 64), random_tokens(rng, 7, 1, 64)
    for t in junk:
        a.append(t, t)
    a.reset()
    for t in toks:
        a.append(t, t)
        b.append(t, t)
    q = random_tokens(rng, 1, 1, 64)[0]
    np.testing.assert_array_equal(a.attention(q), b.attention(q))


def kv_error_cases():
    k = np.zeros((2, 64), np.float16)
    return [
        (lambda: lowbit.LayerKVCache("lossy", 2, 64, 16), "kv cache policy: expected full, window, selective"),
        (lambda: lowbit.LayerKVCache("full", 2, 96, 16), "head_dim = 96, expected 64 or 128"),
        (lambda: lowbit.LayerKVCache("selective", 2, 64, 16, kv_bits=5), "kv_bits = 5, expected 8 or 4"),
        (lambda: lowbit.LayerKVCache("selective", 2, 64, 16, window=0), "window 0 (>= 1)"),
        (lambda: lowbit.LayerKVCache("full", 0, 64, 16), "kv_heads = 0, expected 1..1024"),
        (lambda: lowbit.LayerKVCache("full", 2, 64, 16).append(k.astype(np.float32), k),
         "k: expected a contiguous f16 [kv_heads x head_dim] = [2 x 64], got f32"),
        (lambda: lowbit.LayerKVCache("full", 2, 64, 16).append(k, np.zeros((3, 64), np.float16)),
         "v: expected a contiguous f16 [kv_heads x head_dim] = [2 x 64]"),
        (lambda: lowbit.LayerKVCache("full", 2, 64, 16).append(k[:, ::2], k), "k: expected a contiguous f16"),
        (lambda: lowbit.LayerKVCache("full", 2, 64, 16).attention(np.zeros((4, 64), np.float16)),
         "kv_attention: length 0, expected 1..16"),
    ]


@pytest.mark.parametrize("case", range(len(kv_error_cases())))
def test_errors_carry_the_cpp_message(case):
    call, message = kv_error_cases()[case]
    with pytest.raises(lowbit.LowbitError, match=message.replace("[", r"\[").replace(".", r"\.").replace("(", r"\(")
                       .replace(")", r"\)")):
        call()


def test_attention_errors():
    cache = lowbit.LayerKVCache("int4", 2, 64, 4, kv_bits=4)
    k = np.ones((2, 64), np.float16)
    cache.append(k, k)
    with pytest.raises(lowbit.LowbitError, match="q: n_heads = 3 is not a positive multiple of kv_heads = 2"):
        cache.attention(np.zeros((3, 64), np.float16))
    with pytest.raises(lowbit.LowbitError, match="q: expected a contiguous f16"):
        cache.attention(np.zeros((2, 64), np.float32))
    with pytest.raises(lowbit.LowbitError, match="expected a rank-2 tensor"):
        cache.attention(np.zeros((1, 2, 64), np.float16))
    with pytest.raises(lowbit.LowbitError, match="dtype: expected float32, float16"):
        cache.attention(np.zeros((2, 64), np.float16), out_dtype="int8")
    for _ in range(3):
        cache.append(k, k)
    with pytest.raises(lowbit.LowbitError, match="the cache is full"):
        cache.append(k, k)
    # below the Python layer, the C++ checks hold too
    with pytest.raises(lowbit.LowbitError, match=r"kv_append: position 4 outside the cache \(4 tokens\)"):
        cache._layer.append(k, k, 4, 0)
    with pytest.raises(lowbit.LowbitError, match="kv_attention: length 5, expected 1..4"):
        cache._layer.attention(np.zeros((2, 64), np.float16), np.zeros((2, 64), np.float32), 5, None, 0)


def test_buffers_are_checked():
    layout = _lowbit.kv_layout("selective", 2, 64, 4, 8, 8, 32)
    assert layout["codes"] == (20, 2, 64) and layout["code_dtype"] == "i8" and layout["mins"] == (0, 2)
    f16 = np.zeros(layout["f16"], np.float16)
    codes = np.zeros(layout["codes"], np.int8)
    assert layout["param_dtype"] == "f16"
    scales = np.zeros(layout["params"], np.float16)
    with pytest.raises(lowbit.LowbitError, match="v_f16: overlaps k_f16 in memory; outputs must not share bytes"):  # K and V must not share storage
        _lowbit.KvLayer("selective", 2, 64, 4, 8, 8, 32, f16, codes, scales, None, f16, codes, scales, None)
    _lowbit.KvLayer("selective", 2, 64, 4, 8, 8, 32, f16, codes, scales, None, f16.copy(), codes.copy(),
                    scales.copy(), None)
    with pytest.raises(lowbit.LowbitError, match="k_scales: expected 40 contiguous f16 values, got f32"):
        layer = _lowbit.KvLayer("selective", 2, 64, 4, 8, 8, 32, f16, codes, scales.astype(np.float32), None, f16,
                                codes, scales, None)
        layer.append(f16[:, 0, :].copy(), f16[:, 0, :].copy(), 0, 0)
    with pytest.raises(lowbit.LowbitError, match="v_codes: expected 2560 contiguous i8 values, got u8"):
        layer = _lowbit.KvLayer("selective", 2, 64, 4, 8, 8, 32, f16, codes, scales, None, f16,
                                codes.view(np.uint8), scales, None)
        layer.append(f16[:, 0, :].copy(), f16[:, 0, :].copy(), 0, 0)
    with pytest.raises(lowbit.LowbitError, match="k_scales: missing"):
        layer = _lowbit.KvLayer("selective", 2, 64, 4, 8, 8, 32, f16, codes, None, None, f16, codes, scales, None)
        layer.append(f16[:, 0, :].copy(), f16[:, 0, :].copy(), 0, 0)


@pytest.mark.parametrize("policy,kv_bits", [("selective", 4), ("window", 8), ("int8", 8)])
def test_position_array_forms_equal_host_forms(policy, kv_bits):
    """append_at / attention_at (the position in an int32 [1] array, for CUDA graphs) do what
    append / attention do at the same positions."""
    rng = np.random.default_rng(11)
    host = lowbit.LayerKVCache(policy, 2, 64, 24, sink=2, window=5, kv_bits=kv_bits)
    at = lowbit.LayerKVCache(policy, 2, 64, 24, sink=2, window=5, kv_bits=kv_bits)
    assert at.max_length == 24
    k, v, q = random_tokens(rng, 24, 2, 64), random_tokens(rng, 24, 2, 64), random_tokens(rng, 24, 4, 64)
    pos = np.zeros(1, np.int32)
    for t in range(24):
        host.append(k[t], v[t])
        at.append_at(k[t], v[t], pos)
        np.testing.assert_array_equal(at.attention_at(q[t], pos), host.attention(q[t]))
        pos += 1
    assert at.length == 0  # the caller owns the position
    for name, buf in host.buffers.items():
        np.testing.assert_array_equal(at.buffers[name].view(np.uint8), buf.view(np.uint8))


def test_position_array_errors():
    cache = lowbit.LayerKVCache("int4", 1, 64, 4, kv_bits=4)
    k = np.ones((1, 64), np.float16)
    with pytest.raises(lowbit.LowbitError, match=r"pos: expected an int32 \[1\] array, got i8"):
        cache.append_at(k, k, np.zeros(1, np.int8))
    with pytest.raises(lowbit.LowbitError, match=r"pos: expected an int32 \[1\] array"):
        cache.append_at(k, k, np.zeros(2, np.int32))
    with pytest.raises(lowbit.LowbitError, match=r"kv_append_at: position 4 outside the cache \(4 tokens\)"):
        cache.append_at(k, k, np.full(1, 4, np.int32))
    with pytest.raises(lowbit.LowbitError, match=r"kv_attention_at: position -1 outside the cache \(4 tokens\)"):
        cache.attention_at(np.ones((1, 64), np.float16), np.full(1, -1, np.int32))
    with pytest.raises(lowbit.LowbitError, match="kv_attention_at: max_length 5, expected 1..4"):
        cache._layer.attention_at(np.ones((1, 64), np.float16), np.zeros((1, 64), np.float32),
                                  np.zeros(1, np.int32), 5, None, 0)

"""quantized_attention on NumPy arrays (the C++ CPU reference) against a NumPy float64
implementation of include/lowbit/attention.h's formula, with the weights decoded by
block_decode to f16 (the op's definition of its weights)."""
import numpy as np
import pytest

import lowbit


def reference(x, ws, biases, heads, kv_heads, head_dim, causal):
    """O [L, H*hd] in float64: projections, then softmax(Q_h K_g^T / sqrt(hd)) V_g, g = h / (H / Hkv)."""
    x = x.astype(np.float64)
    proj = []
    for w, b in zip(ws, biases):
        y = x @ lowbit.block_decode(w, dtype="float16").astype(np.float64).T
        proj.append(y if b is None else y + b.astype(np.float64))
    q, k, v = proj
    seq_len = x.shape[0]
    group = heads // kv_heads
    out = np.empty((seq_len, heads * head_dim))
    mask = np.triu(np.ones((seq_len, seq_len), bool), 1)
    for h in range(heads):
        g = h // group
        qh = q[:, h * head_dim:(h + 1) * head_dim]
        kg = k[:, g * head_dim:(g + 1) * head_dim]
        vg = v[:, g * head_dim:(g + 1) * head_dim]
        s = qh @ kg.T / np.sqrt(head_dim)
        if causal:
            s = np.where(mask, -np.inf, s)
        p = np.exp(s - s.max(axis=1, keepdims=True))
        out[:, h * head_dim:(h + 1) * head_dim] = (p / p.sum(axis=1, keepdims=True)) @ vg
    return out


def problem(rng, seq_len, d_model, heads, kv_heads, head_dim, fmt, bias):
    x = rng.standard_normal((seq_len, d_model)).astype(np.float16)
    scale = 1 / np.sqrt(d_model)
    ws = [lowbit.block_encode((rng.standard_normal((n * head_dim, d_model)) * scale).astype(np.float32), fmt)
          for n in (heads, kv_heads, kv_heads)]
    biases = [(rng.standard_normal(n * head_dim) * 0.1).astype(np.float16) if bias else None
              for n in (heads, kv_heads, kv_heads)]
    return x, ws, biases


@pytest.mark.parametrize("fmt", ["nf4", "mxfp4", "nvfp4"])
@pytest.mark.parametrize("seq_len,heads,kv_heads,head_dim,causal,bias", [
    (1, 2, 1, 64, True, False),
    (7, 4, 2, 64, True, True),     # GQA, causal, biases
    (13, 3, 3, 64, False, False),  # MHA, not causal
    (5, 2, 1, 128, False, True),
])
def test_matches_reference(rng, fmt, seq_len, heads, kv_heads, head_dim, causal, bias):
    x, ws, biases = problem(rng, seq_len, 128, heads, kv_heads, head_dim, fmt, bias)
    got = lowbit.quantized_attention(x, *ws, heads, kv_heads, head_dim, causal=causal, bq=biases[0], bk=biases[1],
                                     bv=biases[2])
    want = reference(x, ws, biases, heads, kv_heads, head_dim, causal)
    assert got.dtype == np.float16 and got.shape == (seq_len, heads * head_dim)
    # The C++ reference computes in float64 too and rounds once to f16 (via f32): within one f16 ulp.
    err = np.abs(got.astype(np.float64) - want)
    assert np.all(err <= 2.0 ** -10 * np.abs(want) + 2.0 ** -24), err.max()


def test_variants_and_plain_tuples(rng):
    """CPU inputs run the CPU reference whatever the variant; weights may be (codes, scales, g) tuples."""
    x, ws, _ = problem(rng, 9, 64, 2, 1, 64, "nvfp4", False)
    base = lowbit.quantized_attention(x, *ws, 2, 1, 64, causal=True)
    for variant in ("naive_sequential", "tiled_sequential", "tiled_fused", "fused_two_kernel"):
        got = lowbit.quantized_attention(x, *(w[:3] for w in ws), 2, 1, 64, causal=True, variant=variant,
                                         fmt="nvfp4")
        np.testing.assert_array_equal(got.view(np.uint16), base.view(np.uint16))


@pytest.mark.parametrize("kwargs,message", [
    (dict(head_dim=96), r"head_dim: expected 64 or 128, got 96 \[quantized_attention.cpp:\d+\]$"),
    (dict(heads=3), "kv_heads: heads 3 is not a multiple of kv_heads 2"),
    (dict(variant="flash"), "variant: expected naive_sequential"),
    (dict(x_dtype=np.float32), "x: expected dtype f16"),
    (dict(bq=np.zeros(7, np.float16)), "bq: expected a contiguous vector of 256 elements"),
])
def test_errors(rng, kwargs, message):
    x, ws, _ = problem(rng, 4, 64, 4, 2, 64, "nf4", False)
    x = x.astype(kwargs.pop("x_dtype", np.float16))
    args = dict(heads=4, kv_heads=2, head_dim=64)
    args.update(kwargs)
    with pytest.raises(lowbit.LowbitError, match=message):
        lowbit.quantized_attention(x, *ws, **args)


def test_mixed_formats_rejected(rng):
    x, ws, _ = problem(rng, 4, 64, 2, 2, 64, "nf4", False)
    wk = lowbit.block_encode(np.ones((128, 64), np.float32), "mxfp4")
    with pytest.raises(lowbit.LowbitError, match="wk: encoded as mxfp4"):
        lowbit.quantized_attention(x, ws[0], wk, ws[2], 2, 2, 64)


def flash_reference(q, k, v, cu_q, cu_k, causal, scale):
    """softmax(scale q k^T (+ mask by position)) v per sequence and head, in float64."""
    q, k, v = (a.astype(np.float64) for a in (q, k, v))
    heads, kv_heads, head_dim = q.shape[1], k.shape[1], q.shape[2]
    scale = 1 / np.sqrt(head_dim) if scale is None else scale
    out = np.empty(q.shape)
    for b in range(len(cu_q) - 1):
        qs, ks, vs = q[cu_q[b]:cu_q[b + 1]], k[cu_k[b]:cu_k[b + 1]], v[cu_k[b]:cu_k[b + 1]]
        nq, nk = len(qs), len(ks)
        # Query i sits at position nk - nq + i of the keys when causal.
        mask = np.arange(nk)[None, :] > (nk - nq + np.arange(nq))[:, None]
        for h in range(heads):
            g = h // (heads // kv_heads)
            s = qs[:, h] @ ks[:, g].T * scale
            if causal:
                s = np.where(mask, -np.inf, s)
            p = np.exp(s - s.max(axis=1, keepdims=True))
            out[cu_q[b]:cu_q[b + 1], h] = (p / p.sum(axis=1, keepdims=True)) @ vs[:, g]
    return out


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("heads,kv_heads,head_dim", [(4, 4, 64), (6, 2, 64), (8, 1, 128)])
def test_flash_attention_matches_numpy(causal, heads, kv_heads, head_dim):
    rng = np.random.default_rng(11)
    lengths = [(5, 5), (3, 9), (1, 1), (12, 30)]
    cu_q = np.cumsum([0] + [a for a, _ in lengths])
    cu_k = np.cumsum([0] + [b for _, b in lengths])
    q = rng.standard_normal((cu_q[-1], heads, head_dim)).astype(np.float16)
    k = rng.standard_normal((cu_k[-1], kv_heads, head_dim)).astype(np.float16)
    v = rng.standard_normal((cu_k[-1], kv_heads, head_dim)).astype(np.float16)
    out = lowbit.flash_attention(q, k, v, causal=causal, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
    assert out.shape == q.shape and out.dtype == np.float16
    want = flash_reference(q, k, v, cu_q, cu_k, causal, None)
    np.testing.assert_allclose(out.astype(np.float64), want, rtol=1e-3, atol=1e-6)
    # One sequence by default, and a given scale.
    one = lowbit.flash_attention(q[:5], k[:5], v[:5], causal=causal, scale=0.2)
    np.testing.assert_allclose(one.astype(np.float64), flash_reference(q[:5], k[:5], v[:5], [0, 5], [0, 5], causal, 0.2),
                               rtol=1e-3, atol=1e-6)


def test_flash_attention_errors_name_the_argument():
    q = np.zeros((4, 4, 64), np.float16)
    k = np.zeros((4, 3, 64), np.float16)
    with pytest.raises(lowbit.LowbitError, match="kv_heads: heads 4 is not a multiple of kv_heads 3"):
        lowbit.flash_attention(q, k, k)
    with pytest.raises(lowbit.LowbitError, match="head_dim: expected 64 or 128"):
        lowbit.flash_attention(np.zeros((4, 4, 80), np.float16), np.zeros((4, 4, 80), np.float16),
                               np.zeros((4, 4, 80), np.float16))
    with pytest.raises(lowbit.LowbitError, match="sequence 0 has 4 queries and only 2 keys"):
        lowbit.flash_attention(q, q[:2], q[:2])
    with pytest.raises(lowbit.LowbitError, match="q: expected a rank-3 tensor"):
        lowbit.flash_attention(q.reshape(4, 256), q, q)

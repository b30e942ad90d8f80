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

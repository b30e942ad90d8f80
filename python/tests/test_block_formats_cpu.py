"""block_encode / block_decode on NumPy arrays against a NumPy reimplementation of the
formats written from their definitions (QLoRA's NF4 levels and thresholds; the OCP MX
E2M1 and E8M0 codes; the OFP8 E4M3 (FN) scale and NVFP4's fp32 tensor scale): the
encoder's bytes and the decoder's bits are checked, not closeness."""
from fractions import Fraction

import numpy as np
import pytest
from conftest import awkward_matrix

import lowbit

BLOCK = {"nf4": 64, "mxfp4": 32, "nvfp4": 16}
FORMATS = list(BLOCK)

# QLoRA's 16 NF4 levels (bitsandbytes' table as float32) and its 15 decision thresholds
# (the float literals of bitsandbytes' dQuantizeNF4; a value on a threshold takes the lower code).
NF4_LEVELS = np.array([
    -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
    -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
    0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
    0.7229568362236023, 1.0], np.float32)
_NF4_THRESHOLD_TEXT = [
    "-0.8480964004993439", "-0.6106329262256622", "-0.4599952697753906", "-0.33967943489551544",
    "-0.23460740596055984", "-0.13791173323988914", "-0.045525018125772476", "0.03979014977812767",
    "0.1202552504837513", "0.2035212516784668", "0.2920137718319893", "0.3893125355243683",
    "0.5016634166240692", "0.6427869200706482", "0.8614784181118011"]


def _f32_literal(text):
    """A decimal rounded straight to float32 (as a C++ float literal is), not via double."""
    exact = Fraction(text)
    f = np.float32(float(text))
    candidates = [np.nextafter(f, np.float32(-1)), f, np.nextafter(f, np.float32(1))]
    errs = [abs(Fraction(float(c)) - exact) for c in candidates]
    best = min(errs)
    ties = [c for c, e in zip(candidates, errs) if e == best]
    return min(ties, key=lambda c: int(np.array(c).view(np.uint32)) & 1)  # ties to even


NF4_THRESHOLDS = np.array([_f32_literal(t) for t in _NF4_THRESHOLD_TEXT], np.float32)
E2M1_MAGNITUDES = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], np.float32)


def e2m1_value(code):
    code = np.asarray(code, np.int64)
    return np.where(code & 8, -1, 1).astype(np.float32) * E2M1_MAGNITUDES[code & 7]


def e2m1_code(y):
    """Round to nearest, ties to the even code, saturating at 6; the sign is kept (-0 is 8)."""
    a = np.abs(y)
    code = ((a > 0.25).astype(np.uint8) + (a >= 0.75) + (a > 1.25) + (a >= 1.75) + (a > 2.5) + (a >= 3.5)
            + (a > 5.0))
    return (code | (np.signbit(y).astype(np.uint8) << 3)).astype(np.uint8)


def e8m0_value(code):
    return np.ldexp(np.float64(1), np.asarray(code, np.int64) - 127)  # no 0xFF (NaN) for finite inputs


def e4m3_value(code):
    """E4M3 FN: bias 7, subnormals m * 2^-9, 0x7F/0xFF NaN, no Inf."""
    code = np.asarray(code, np.int64)
    e, m = (code >> 3) & 15, code & 7
    mag = np.where(e == 0, m * 2.0 ** -9, (1 + m / 8.0) * np.ldexp(1.0, e - 7))
    mag = np.where((e == 15) & (m == 7), np.nan, mag)
    return np.where(code & 0x80, -mag, mag)


E4M3_TABLE = e4m3_value(np.arange(0x7F))  # the non-negative finite values, ascending by code


def e4m3_code(a):
    """Non-negative float -> E4M3 code: the nearest value (ties to the even code), saturating at 448."""
    a = np.asarray(a, np.float64)
    d = np.abs(a[..., None] - E4M3_TABLE)
    best = d.min(axis=-1, keepdims=True)
    tied = d == best
    even = tied & (np.arange(0x7F) % 2 == 0)
    code = np.where(even.any(-1), even.argmax(-1), tied.argmax(-1))
    return np.where(a >= 448, 0x7E, code).astype(np.uint8)


def pack(codes):
    return (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)


def unpack(packed):
    return np.stack([packed & 15, packed >> 4], axis=2).reshape(packed.shape[0], -1)


def encode(x, fmt):
    """(packed codes, scales, global scale or None) of x [rows, cols]."""
    x = x.astype(np.float32)
    rows, cols = x.shape
    blocks = x.reshape(rows, cols // BLOCK[fmt], BLOCK[fmt])
    absmax = np.abs(blocks).max(axis=2, keepdims=True)
    g = None
    if fmt == "nf4":
        with np.errstate(divide="ignore"):
            inv = np.float32(1) / absmax
        inv = np.where((absmax > 0) & np.isfinite(inv), inv, np.float32(0)).astype(np.float32)
        y = blocks * inv
        codes = (y[..., None] > NF4_THRESHOLDS).sum(axis=-1).astype(np.uint8)
        scales = absmax.ravel()
    elif fmt == "mxfp4":
        _, e = np.frexp(absmax.astype(np.float64))  # absmax = m 2^e, m in [0.5, 1): floor(log2) = e - 1
        shared = np.where(absmax > 0, np.clip(e - 1 - 2, -127, 127), -127)  # emax of E2M1 is 2
        codes = e2m1_code(blocks * np.ldexp(np.float32(1), -shared).astype(np.float32))
        scales = (shared + 127).astype(np.uint8).ravel()
    else:
        g = np.float32(np.abs(x).max()) / np.float32(448 * 6)
        if g > 0:
            s = e4m3_code(absmax / (np.float32(6) * g))
        else:
            s = np.zeros_like(absmax, np.uint8)
        d = (e4m3_value(s).astype(np.float32) * g).astype(np.float32)
        with np.errstate(divide="ignore", invalid="ignore"):
            y = np.where(d > 0, blocks / np.where(d > 0, d, 1), np.float32(0)).astype(np.float32)
        codes = e2m1_code(y)
        scales = s.ravel()
        g = np.array([g], np.float32)
    return pack(codes.reshape(rows, cols)), scales, g


def decode(packed, scales, g, fmt):
    """float32 values [rows, cols] of the stored bytes."""
    codes = unpack(packed).astype(np.int64)
    rows, cols = codes.shape
    blocks = codes.reshape(rows, cols // BLOCK[fmt], BLOCK[fmt])
    s = scales.reshape(rows, cols // BLOCK[fmt], 1)
    if fmt == "nf4":
        out = NF4_LEVELS[blocks] * s
    elif fmt == "mxfp4":
        out = (e2m1_value(blocks) * e8m0_value(s)).astype(np.float32)  # exact
    else:
        out = (e2m1_value(blocks) * e4m3_value(s).astype(np.float32)) * g[0]  # exact, then one f32 rounding
    return out.astype(np.float32).reshape(rows, cols)


def test_reference_tables():
    assert NF4_LEVELS[7] == 0 and len(NF4_THRESHOLDS) == 15 and np.all(np.diff(NF4_THRESHOLDS) > 0)
    assert e4m3_value(0x7E) == 448 and e4m3_value(0x01) == 2.0 ** -9 and e4m3_value(0x08) == 2.0 ** -6
    assert np.array_equal(e2m1_code(np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5, 7, -0.1], np.float32)),
                          [0, 2, 2, 4, 4, 6, 6, 7, 8])


SHAPES = [(1, 64), (3, 128), (17, 192), (5, 640)]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_encode_matches_reference(rng, fmt, shape, dtype):
    x = awkward_matrix(rng, *shape, dtype=dtype)
    w = lowbit.block_encode(x, fmt)
    codes, scales, g = encode(x, fmt)
    assert isinstance(w, lowbit.BlockWeights) and w.fmt == fmt and w.shape == shape
    assert w.codes.dtype == np.uint8 and w.codes.shape == (shape[0], shape[1] // 2)
    np.testing.assert_array_equal(w.codes, codes)
    if fmt == "nf4":
        assert w.scales.dtype == np.float32
        np.testing.assert_array_equal(w.scales.view(np.uint32), scales.view(np.uint32))
    else:
        assert w.scales.dtype == np.uint8
        np.testing.assert_array_equal(w.scales, scales)
    if fmt == "nvfp4":
        np.testing.assert_array_equal(w.global_scale.view(np.uint32), g.view(np.uint32))
    else:
        assert w.global_scale is None


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("shape", SHAPES)
def test_decode_matches_reference(rng, fmt, shape):
    """Decoding the stored bytes: f32 bit for bit, f16 the f32 value rounded once."""
    x = awkward_matrix(rng, *shape)
    w = lowbit.block_encode(x, fmt)
    want = decode(w.codes, w.scales, w.global_scale, fmt)
    got = lowbit.block_decode(w)
    assert got.dtype == np.float32 and got.shape == shape
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    got16 = lowbit.block_decode(w.codes, w.scales, w.global_scale, fmt, dtype="float16")
    np.testing.assert_array_equal(got16.view(np.uint16), want.astype(np.float16).view(np.uint16))


def test_nf4_round_trip_error(rng):
    """Each NF4 value is its block's absmax times the nearest level (up to the thresholds)."""
    x = rng.standard_normal((8, 256)).astype(np.float32)
    y = lowbit.block_decode(lowbit.block_encode(x, "nf4"))
    absmax = np.abs(x.reshape(8, 4, 64)).max(axis=2, keepdims=True)
    nearest = np.abs((x.reshape(8, 4, 64) / absmax)[..., None] - NF4_LEVELS).min(axis=-1)
    err = np.abs(x - y).reshape(8, 4, 64) / absmax
    np.testing.assert_allclose(err, nearest, atol=1e-6)
    assert err.max() <= (NF4_LEVELS[1] - NF4_LEVELS[0]) / 2 + 1e-6


def test_special_values():
    """Zero blocks, exact levels and the top of each format's range."""
    x = np.zeros((2, 64), np.float32)
    x[1, :16] = [6, -6, 4, 3, 2, 1.5, 1, 0.5, -0.5, 0.25, 0.75, 5, 7, -7, 0, 1.25]
    for fmt in FORMATS:
        w = lowbit.block_encode(x, fmt)
        np.testing.assert_array_equal(w.codes, encode(x, fmt)[0])
        assert not lowbit.block_decode(w)[0].any()  # an all-zero row decodes to +-0
    # mxfp4 with absmax 7: shared exponent floor(log2 7) - 2 = 0, so 7 saturates to 6.
    w = lowbit.block_encode(x, "mxfp4")
    assert w.scales[2] == 127
    np.testing.assert_array_equal(lowbit.block_decode(w)[1, :16],
                                  [6, -6, 4, 3, 2, 1.5, 1, 0.5, -0.5, 0, 1, 4, 6, -6, 0, 1])


def test_strided_input(rng):
    x = awkward_matrix(rng, 6, 256)
    view = x[::2, :128]
    for fmt in FORMATS:
        got = lowbit.block_encode(view, fmt)
        np.testing.assert_array_equal(got.codes, encode(np.ascontiguousarray(view), fmt)[0])


@pytest.mark.parametrize("call,message", [
    (lambda: lowbit.block_encode(np.ones((2, 48), np.float32), "nf4"),
     r"cols: 48 is not a multiple of the nf4 block size 64 \[layout.cpp:\d+\]$"),
    (lambda: lowbit.block_encode(np.ones((2, 40), np.float32), "nvfp4"), "not a multiple of the nvfp4 block size 16"),
    (lambda: lowbit.block_encode(np.ones((2, 64), np.int8), "nf4"), "x: expected dtype f32, f16 or bf16"),
    (lambda: lowbit.block_encode(np.ones((2, 64), np.float64), "nf4"), "x: dtype float64 is not one lowbit takes"),
    (lambda: lowbit.block_encode(np.ones((2, 64), np.float32), "fp4"), "format: expected nf4, mxfp4 or nvfp4"),
    (lambda: lowbit.block_encode(np.ones((2, 2, 64), np.float32), "nf4"), "expected a rank-2 tensor"),
    (lambda: lowbit.block_encode(np.array([[np.nan] * 64], np.float32), "nf4"), "block_encode needs finite values"),
    (lambda: lowbit.block_decode(np.zeros((2, 32), np.uint8), np.zeros(1, np.float32), None, "nf4"),
     "scales: expected 2 elements"),
    (lambda: lowbit.block_decode(np.zeros((2, 32), np.uint8), np.zeros(2, np.uint8), None, "nf4"), "scales"),
    (lambda: lowbit.block_decode(np.zeros((2, 32), np.uint8), np.zeros(8, np.uint8), None, "nvfp4"),
     "global_scale"),
])
def test_errors(call, message):
    with pytest.raises(lowbit.LowbitError, match=message):
        call()

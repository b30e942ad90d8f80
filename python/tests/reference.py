"""A NumPy reimplementation of src/formats/code_scheme.h (and int8.h / int4.h), written
from the formulas, to check the library's codes, scales and values bit for bit."""
import numpy as np

F32_MAX = np.float32(np.finfo(np.float32).max)

# scheme -> (bits, asymmetric)
SCHEMES = {"int8": (8, False), "int4": (4, True), "int8_asym": (8, True), "int4_sym": (4, False)}


def _domains(rows, cols, granularity, group_size):
    """[(param index, row slice, col slice)] in scale order."""
    if granularity == "tensor":
        return [(slice(None), slice(None))]
    if granularity == "channel":
        return [(slice(None), slice(c, c + 1)) for c in range(cols)]
    if granularity == "token":
        return [(slice(r, r + 1), slice(None)) for r in range(rows)]
    groups = -(-cols // group_size)
    return [(slice(r, r + 1), slice(g * group_size, (g + 1) * group_size)) for r in range(rows) for g in range(groups)]


def _scale(block, bits, asym):
    with np.errstate(over="ignore"):
        if asym:
            lo, hi = np.float64(block.min()), np.float64(block.max())
            levels = (1 << bits) - 1
            return np.float32((hi - lo) / levels), np.float32(0.0 if lo == 0 else lo)
        qmax = np.float32((1 << (bits - 1)) - 1)
        absmax = np.abs(block).max()
        s = absmax / qmax
        if absmax <= F32_MAX and s * qmax > F32_MAX:
            s = np.nextafter(s, np.float32(0))
        return np.float32(s), np.float32(0)


def _inverse(s):
    with np.errstate(divide="ignore", over="ignore"):
        inv = np.float32(1) / s
    return inv if (s > 0 and inv <= F32_MAX) else np.float32(0)


def quantize(x, scheme, granularity, group_size=0):
    """(codes as stored, scales, mins or None) for a float32/float16 array x [T, D]."""
    bits, asym = SCHEMES[scheme]
    x = x.astype(np.float32)
    rows, cols = x.shape
    domains = _domains(rows, cols, granularity, group_size)
    scales = np.empty(len(domains), np.float32)
    mins = np.empty(len(domains), np.float32)
    q = np.empty((rows, cols), np.int32)
    for i, (rs, cs) in enumerate(domains):
        block = x[rs, cs]
        s, m = _scale(block, bits, asym)
        scales[i], mins[i] = s, m
        inv = _inverse(s)
        with np.errstate(over="ignore", invalid="ignore"):
            v = ((block - m) * inv) if asym else (block * inv)
        lo, hi = (0, (1 << bits) - 1) if asym else (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
        q[rs, cs] = np.rint(np.clip(v, lo, hi)).astype(np.int32)
    stored = (q & ((1 << bits) - 1)).astype(np.uint8)
    if bits == 4:
        if cols % 2:
            stored = np.concatenate([stored, np.zeros((rows, 1), np.uint8)], axis=1)
        stored = (stored[:, 0::2] | (stored[:, 1::2] << 4)).astype(np.uint8)
    elif not asym:
        stored = stored.view(np.int8)
    return stored, scales, (mins if asym else None)


def dequantize(codes, scales, mins, scheme, granularity, group_size, cols, out_dtype=np.float32):
    """Values [T, cols] in float32, rounded once to out_dtype."""
    bits, asym = SCHEMES[scheme]
    rows = codes.shape[0]
    raw = codes.view(np.uint8).astype(np.int32)
    if bits == 4:
        raw = np.stack([raw & 15, raw >> 4], axis=2).reshape(rows, -1)[:, :cols]
        if not asym:
            raw = np.where(raw >= 8, raw - 16, raw)
    elif not asym:
        raw = codes.astype(np.int32)
    out = np.empty((rows, cols), np.float32)
    for i, (rs, cs) in enumerate(_domains(rows, cols, granularity, group_size)):
        q = raw[rs, cs]
        if asym:
            # fma(q, s, m): q * s is exact in double, so one rounding of the sum (to double,
            # then float) matches except at a float midpoint: vanishingly rare.
            out[rs, cs] = (q.astype(np.float64) * np.float64(scales[i]) + np.float64(mins[i])).astype(np.float32)
        else:
            out[rs, cs] = q.astype(np.float32) * scales[i]
    return out.astype(out_dtype)


def unpack_int4_signed(packed, k):
    """Signed INT4 values [rows, k] of two's complement nibbles packed along the last axis."""
    raw = packed.astype(np.int32)
    vals = np.stack([raw & 15, raw >> 4], axis=-1).reshape(packed.shape[0], -1)[:, :k]
    return np.where(vals >= 8, vals - 16, vals)

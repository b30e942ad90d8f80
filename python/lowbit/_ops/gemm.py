"""int8 / int4 matmul for a known backend."""
from __future__ import annotations

from .. import _checks, _lowbit


def as_scale(backend, value, like):
    """A Python number as a one-element f32 array on like's device (arrays and None as they are)."""
    if value is None or hasattr(value, "shape"):
        return value
    return backend.scalar(float(value), like)


def matmul_with(backend, kernel, a, b, k, n, scale_a, scale_b, scale_c, bias, relu, b_layout, out_name):
    """The product for a known backend (also the torch custom ops' implementation)."""
    if a.shape[0] * n >= _checks.LARGE_OUTPUT:
        _checks.check_inputs((a, "a"), (b, "b"))
    out = backend.empty((a.shape[0], n), out_name, a)
    if scale_a is not None:
        scale_a = as_scale(backend, scale_a, a)
    if scale_b is not None:
        scale_b = as_scale(backend, scale_b, a)
    stream = backend.stream(a)
    if kernel == "int8":
        _lowbit.int8_matmul(a, b, b_layout, out, scale_a, scale_b, float(scale_c), bias, bool(relu), stream)
    else:
        _lowbit.int4_matmul(a, b, b_layout, k, out, scale_a, scale_b, float(scale_c), bias, bool(relu), stream)
    return out

"""int8_matmul / int4_matmul: lowbit::int8_gemm and lowbit::int4_gemm with the fused
scale + bias + ReLU epilogue."""
from __future__ import annotations

from . import _checks, _lowbit
from ._backend import backend_of, dtype_name
from ._ops.gemm import as_scale, matmul_with

LowbitError = _lowbit.LowbitError


def _n_of(b, b_layout: str, what: str) -> int:
    if len(b.shape) != 2:
        raise LowbitError(f"{what}: expected a rank-2 tensor, got rank {len(b.shape)}")
    if b_layout == "k_by_n":
        return b.shape[1]
    if b_layout == "n_by_k":
        return b.shape[0]
    raise LowbitError(f"b_layout: expected 'k_by_n' ([K, N]) or 'n_by_k' ([N, K], nn.Linear's weight), "
                      f"got {b_layout!r}")


def _out_dtype(scale_a, scale_b, scale_c, bias, relu, out_dtype) -> str:
    if out_dtype is not None:
        return dtype_name(out_dtype)
    epilogue = scale_a is not None or scale_b is not None or scale_c != 1.0 or bias is not None or relu
    return "f32" if epilogue else "i32"


def _matmul(kernel, a, b, k, scale_a, scale_b, scale_c, bias, relu, b_layout, out_dtype, what_a, what_b):
    backend = backend_of(a)
    a_shape, b_shape = a.shape, b.shape
    if len(a_shape) != 2:
        raise LowbitError(f"{what_a}: expected a rank-2 tensor [M, K], got rank {len(a_shape)}")
    # The plain product (no epilogue, B as [K, N]): the hot call, without the general checks.
    if (out_dtype is None and scale_a is None and scale_b is None and bias is None and not relu and scale_c == 1.0
            and b_layout == "k_by_n" and len(b_shape) == 2 and not backend.compiling()):
        return matmul_with(backend, kernel, a, b, k, b_shape[1], None, None, 1.0, None, False, b_layout, "i32")
    n = _n_of(b, b_layout, what_b)
    out_name = _out_dtype(scale_a, scale_b, scale_c, bias, relu, out_dtype)
    if backend.compiling():
        import torch

        from . import torch_ops  # noqa: F401

        scale_a, scale_b = as_scale(backend, scale_a, a), as_scale(backend, scale_b, a)
        if kernel == "int8":
            return torch.ops.lowbit.int8_matmul(a, b, scale_a, scale_b, float(scale_c), bias, bool(relu), b_layout,
                                                out_name)
        return torch.ops.lowbit.int4_matmul(a, b, k, scale_a, scale_b, float(scale_c), bias, bool(relu), b_layout,
                                            out_name)
    return matmul_with(backend, kernel, a, b, k, n, scale_a, scale_b, scale_c, bias, relu, b_layout, out_name)


def int8_matmul(a, b, scale_a=None, scale_b=None, scale_c=1.0, bias=None, relu=False, b_layout="k_by_n",
                out_dtype=None):
    """C = A @ B for int8 A [M, K] and B ([K, N] for b_layout "k_by_n", [N, K] for "n_by_k"),
    accumulated exactly in INT32.

    With no scales, bias or relu (and no out_dtype) C is int32. Otherwise C is out_dtype (float32 by
    default, or float16 / bfloat16) = relu?(((acc * scale_a) * scale_b) * scale_c + bias), with
    scale_a a number or float32 [1] / [M], scale_b a number or float32 [1] / [N], bias float32 [N].
    """
    try:
        return _matmul("int8", a, b, 0, scale_a, scale_b, scale_c, bias, relu, b_layout, out_dtype, "a", "b")
    except _checks.ARGUMENT_ERRORS as error:
        _checks.explain(error, arrays={"a": a, "b": b, "scale_a": scale_a, "scale_b": scale_b, "bias": bias})
        raise


def int4_matmul(a_packed, b_packed, k, scale_a=None, scale_b=None, scale_c=1.0, bias=None, relu=False,
                b_layout="k_by_n", out_dtype=None):
    """int8_matmul for signed INT4 operands (-8..7, two's complement nibbles) packed two per byte
    along K, low nibble first: a_packed uint8 [M, ceil(K/2)], b_packed uint8 [ceil(K/2), N]
    ("k_by_n") or [N, ceil(K/2)] ("n_by_k"). K is given because packing hides its parity.
    quantize_tensor(x, "int4_sym", ...) produces this operand form."""
    try:
        return _matmul("int4", a_packed, b_packed, int(k), scale_a, scale_b, scale_c, bias, relu, b_layout,
                       out_dtype, "a_packed", "b_packed")
    except _checks.ARGUMENT_ERRORS as error:
        _checks.explain(error, arrays={"a_packed": a_packed, "b_packed": b_packed, "scale_a": scale_a,
                                       "scale_b": scale_b, "bias": bias}, ints={"k": k})
        raise

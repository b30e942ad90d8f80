"""The weight-only product (W4A16 / W8A16) for a known backend."""
from __future__ import annotations

from .. import _checks, _lowbit

LowbitError = _lowbit.LowbitError

_ACT_NAMES = {"float16": "f16", "bfloat16": "bf16"}


def linear_with(backend, x, codes, scales, mins, bits, group_size, zero_point, n, k, act_dtype, bias):
    """weight_only_linear for a known backend (also the torch custom op's implementation)."""
    # The packed scales are raw bytes: x must have the type they were packed in.
    x_dtype = _ACT_NAMES.get(str(x.dtype).removeprefix("torch."))
    if x_dtype != act_dtype:
        raise LowbitError(f"x: expected dtype {act_dtype} (the packed weights' act_dtype), got {x.dtype}")
    if x.shape[0] * n >= _checks.LARGE_OUTPUT:
        _checks.check_inputs((x, "x"))
    out = backend.empty((x.shape[0], n), x_dtype, x)
    stream = backend.stream(x)
    _lowbit.weight_only_linear(x, codes, scales, mins, bits, group_size, zero_point, n, k, bias, out, stream)
    return out

"""Arguments the C++ layer cannot take, said in lowbit's words.

Two cases need more than the C++ checks:
- an argument the binding's converters refuse (a big-endian or object array, an integer
  past 64 bits, a float where an integer goes) makes nanobind raise its own TypeError,
  which lists the binding's private signature; `explain` names the argument instead.
  It runs only when a call failed, so it costs nothing otherwise.
- outputs are allocated here before the C++ call checks its inputs: a broadcast input
  of 2^20 x 2^20 would first ask NumPy for a 1 TiB output. `before_allocating` runs the
  C++ input checks first whenever the outputs are large (for small ones a failed check
  after allocating costs nothing, and the check would add host time to every call).
"""
from __future__ import annotations

from . import _lowbit

LowbitError = _lowbit.LowbitError

# What a failed conversion or allocation raises (LowbitError is a RuntimeError: not here).
ARGUMENT_ERRORS = (TypeError, ValueError, OverflowError, MemoryError)

# Outputs of at least this many elements are allocated only after their inputs passed
# the C++ checks (about 4 ms of work for the fastest op at this size).
LARGE_OUTPUT = 1 << 22

_TAKEN = "float32, float16, bfloat16, int8, uint8 or int32"
_TAKEN_NAMES = {"float32", "float16", "bfloat16", "int8", "uint8", "int32"}
_INT64 = range(-(1 << 63), 1 << 63)


def _array_problem(x):
    """Why lowbit cannot take array `x` (its dtype), or None."""
    dtype = getattr(x, "dtype", None)
    if dtype is None:
        return None
    byteorder = getattr(dtype, "byteorder", "=")  # NumPy and CuPy dtypes
    if byteorder not in ("=", "|") and not getattr(dtype, "isnative", True):
        return (f"{dtype.name} in big-endian byte order is not one lowbit takes (native byte order only: "
                f"convert with .astype({dtype.name!r}))")
    name = getattr(dtype, "name", None) or str(dtype).removeprefix("torch.")
    if getattr(dtype, "kind", "") == "O" or name == "object":
        return f"dtype object is not one lowbit takes ({_TAKEN})"
    if name not in _TAKEN_NAMES:
        return f"dtype {name} is not one lowbit takes ({_TAKEN})"
    return None


def _int_problem(value):
    """Why `value` cannot be a 64-bit integer argument, or None."""
    if isinstance(value, bool) or not isinstance(value, int):
        if hasattr(value, "__index__") and not isinstance(value, bool):
            value = value.__index__()
        else:
            return f"expected an integer, got {type(value).__name__} {value!r}"
    if value not in _INT64:
        return f"{value} does not fit in a 64-bit integer"
    return None


def explain(error, arrays=None, ints=None):
    """Raises LowbitError naming the first argument in `arrays` ({name: array or None}) or
    `ints` ({name: value or None}) that lowbit cannot take, chained to `error` (what the
    binding or the allocator raised); returns when none is at fault (the caller then
    re-raises `error`)."""
    for name, x in (arrays or {}).items():
        problem = None if x is None else _array_problem(x)
        if problem:
            raise LowbitError(f"{name}: {problem}") from error
    for name, value in (ints or {}).items():
        problem = None if value is None else _int_problem(value)
        if problem:
            raise LowbitError(f"{name}: {problem}") from error


def check_inputs(*inputs):
    """Each input (array, name), a matrix, meets the C++ checks (dtype, shape, strides,
    span), or LowbitError says what is wrong. Callers run it before allocating outputs of
    LARGE_OUTPUT elements or more (a test of that size costs ~20 ns; this, ~1 us)."""
    for x, name in inputs:
        problem = _array_problem(x)
        if problem:
            raise LowbitError(f"{name}: {problem}")
        _lowbit.check_matrix(x, name)

"""block_encode / block_decode: lowbit's block-wise 4-bit weight formats (NF4, MXFP4,
NVFP4; include/lowbit/block_formats.h) over NumPy arrays, torch tensors or CuPy arrays.

block_encode returns a BlockWeights named tuple (codes, scales, global_scale, fmt, shape):
the encoded arrays plus what is needed to read them back (the format name and the original
[rows, cols]), so that block_decode(w) and quantized_attention(x, wq, wk, wv, ...) need
nothing else. The parts can also be passed one by one.
"""
from __future__ import annotations

from typing import Any, NamedTuple, Optional, Tuple

from . import _checks, _lowbit
from ._backend import backend_of, dtype_name
from ._ops.block_formats import block_decode_with, block_encode_with

LowbitError = _lowbit.LowbitError

FORMATS = ("nf4", "mxfp4", "nvfp4")


class BlockWeights(NamedTuple):
    """A rows x cols tensor in a block format.

    codes         u8 [rows, cols / 2], two codes a byte, low nibble first
    scales        [rows * cols / block]: f32 absmax (nf4), u8 E8M0 (mxfp4), u8 E4M3 (nvfp4)
    global_scale  f32 [1] for nvfp4, else None
    fmt           "nf4" | "mxfp4" | "nvfp4"
    shape         (rows, cols) of the original tensor
    """
    codes: Any
    scales: Any
    global_scale: Optional[Any]
    fmt: str
    shape: Tuple[int, int]


def _check_rank2(x, what: str):
    if len(x.shape) != 2:
        raise LowbitError(f"{what}: expected a rank-2 tensor [rows, cols], got rank {len(x.shape)} "
                          f"(shape {tuple(x.shape)}); reshape it first")


def block_encode(x, fmt: str = "nf4") -> BlockWeights:
    """Encodes a 2-D float tensor (f32, f16 or bf16; cols a multiple of the block size:
    nf4 64, mxfp4 32, nvfp4 16) into a new BlockWeights of x's library on x's device.
    CUDA work runs on the current stream. Raises LowbitError (the C++ message) on bad
    arguments or NaN/Inf in x."""
    try:
        backend = backend_of(x)
        _check_rank2(x, "x")
        if backend.compiling():
            from . import torch_ops  # noqa: F401  (registers torch.ops.lowbit)

            codes, scales, global_scale = backend.torch.ops.lowbit.block_encode(x, fmt)
            return BlockWeights(codes, scales, global_scale if fmt == "nvfp4" else None, fmt, (x.shape[0], x.shape[1]))
        codes, scales, global_scale = block_encode_with(backend, x, fmt)
        return BlockWeights(codes, scales, global_scale, fmt, (int(x.shape[0]), int(x.shape[1])))
    except _checks.ARGUMENT_ERRORS as error:
        _checks.explain(error, arrays={"x": x})
        raise


def block_decode(codes, scales=None, global_scale=None, fmt: Optional[str] = None, dtype="float32", cols=None):
    """The values of an encoded tensor as a new [rows, cols] array of `dtype` (float32,
    float16 or bfloat16), each decoded value rounded once. Pass a BlockWeights alone, or
    its parts (codes, scales, global_scale, fmt); cols defaults to 2 * codes.shape[1]."""
    try:
        if isinstance(codes, BlockWeights):
            w = codes
            codes, scales, global_scale, fmt = w.codes, w.scales, w.global_scale, w.fmt
            cols = w.shape[1] if cols is None else cols
        if fmt is None or scales is None:
            raise LowbitError("block_decode: pass a BlockWeights, or codes, scales, global_scale and fmt")
        backend = backend_of(codes)
        _check_rank2(codes, "codes")
        if cols is None:
            cols = 2 * codes.shape[1]
        if backend.compiling():
            from . import torch_ops  # noqa: F401

            return backend.torch.ops.lowbit.block_decode(codes, scales, global_scale, fmt, cols, dtype_name(dtype))
        return block_decode_with(backend, codes, scales, global_scale, fmt, int(cols), dtype_name(dtype))
    except _checks.ARGUMENT_ERRORS as error:
        _checks.explain(error, arrays={"codes": codes, "scales": scales, "global_scale": global_scale},
                        ints={"cols": cols})
        raise

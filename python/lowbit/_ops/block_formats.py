"""Block-format encode / decode (NF4, MXFP4, NVFP4) for a known backend."""
from __future__ import annotations

from .. import _checks, _lowbit

LowbitError = _lowbit.LowbitError


def block_encode_with(backend, x, fmt: str):
    """(codes, scales, global_scale or None) of block_encode for a known backend (also the
    torch custom op's implementation)."""
    rows, cols = int(x.shape[0]), int(x.shape[1])
    if rows * cols >= _checks.LARGE_OUTPUT:
        _checks.check_inputs((x, "x"))
    code_cols, scale_count, scale_dtype, has_global, _ = _lowbit.block_layout(fmt, rows, cols)
    codes = backend.empty((rows, code_cols), "u8", x)
    scales = backend.empty((scale_count,), scale_dtype, x)
    global_scale = backend.empty((1,), "f32", x) if has_global else None
    workspace, stream, deferred = None, 0, False
    if backend.is_cuda(x):
        stream = backend.stream(x)
        nbytes = _lowbit.block_encode_workspace_bytes(fmt, rows, cols)
        workspace = backend.empty((nbytes,), "u8", x) if nbytes else None
        deferred = backend.capturing()  # a CUDA graph cannot capture the NaN/Inf check's synchronization
    _lowbit.block_encode(x, codes, scales, global_scale, fmt, workspace, stream, deferred)
    return codes, scales, global_scale


def block_decode_with(backend, codes, scales, global_scale, fmt: str, cols: int, out_dtype: str):
    """block_decode for a known backend (also the torch custom op's implementation)."""
    rows, cols = int(codes.shape[0]), int(cols)
    if rows * cols >= _checks.LARGE_OUTPUT:  # cols came from the caller: it must fit the codes first
        _checks.check_inputs((codes, "codes"))
        code_cols = _lowbit.block_layout(fmt, rows, cols)[0]
        if code_cols != codes.shape[1]:
            raise LowbitError(f"cols: {cols} columns take {code_cols} code bytes a row, but codes has "
                              f"{codes.shape[1]}")
    out = backend.empty((rows, cols), out_dtype, codes)
    stream = backend.stream(codes)
    _lowbit.block_decode(codes, scales, global_scale, fmt, out, stream)
    return out

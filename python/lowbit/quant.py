"""quantize_tensor / dequantize_tensor: lowbit::quantize and lowbit::dequantize over
NumPy arrays, torch tensors or CuPy arrays (2-D: tokens x channels)."""
from __future__ import annotations

from . import _lowbit
from ._backend import backend_of, dtype_name

LowbitError = _lowbit.LowbitError


# (bits, has_mins, code dtype name) of each scheme. The C++ table (_lowbit.scheme_info) is
# the definition and test_quant_cpu checks that this copy agrees; it is kept in Python
# because torch.compile cannot trace a call into the extension module.
_SCHEMES = {"int8": (8, False, "i8"), "int4": (4, True, "u8"), "int8_asym": (8, True, "u8"),
            "int4_sym": (4, False, "u8")}


def scheme_info(scheme: str):
    """(bits, has_mins, code dtype name) of a scheme; raises LowbitError for an unknown one."""
    info = _SCHEMES.get(scheme)
    return info if info is not None else _lowbit.scheme_info(scheme)  # the C++ error message


def _check_rank2(x, what: str):
    if len(x.shape) != 2:
        raise LowbitError(f"{what}: expected a rank-2 tensor [tokens, channels], got rank {len(x.shape)} "
                          f"(shape {tuple(x.shape)}); reshape it first")


# (code_cols, scale shape, has_mins, code dtype name, GPU workspace bytes) by (scheme,
# granularity, group_size, rows, cols): what quantize_with derives before it allocates,
# from the C++ layout (which checks the arguments: a bad spec raises and is not cached).
_LAYOUTS = {}
_LAYOUTS_MAX = 4096


def _layout(scheme, granularity, group_size, rows, cols):
    key = (scheme, granularity, group_size, rows, cols)
    layout = _LAYOUTS.get(key)
    if layout is None:
        _, has_mins, code_dtype = scheme_info(scheme)
        code_cols, scale_rows, scale_cols = _lowbit.quant_layout(scheme, granularity, group_size, rows, cols)
        scale_shape = (scale_rows, scale_cols) if granularity == "group" else (scale_rows * scale_cols,)
        nbytes = _lowbit.quantize_workspace_bytes(scheme, granularity, group_size, rows, cols)
        layout = (code_cols, scale_shape, has_mins, code_dtype, nbytes)
        if len(_LAYOUTS) >= _LAYOUTS_MAX:
            _LAYOUTS.clear()
        _LAYOUTS[key] = layout
    return layout


def quantize_tensor(x, scheme: str = "int8", granularity: str = "channel", group_size: int = 0):
    """Quantizes a 2-D float tensor; returns (codes, scales, mins).

    scheme: "int8" (symmetric), "int4" (asymmetric, two codes a byte), "int8_asym", "int4_sym".
    granularity: "tensor" (scales [1]), "channel" ([D]), "token" ([T]) or "group" ([T, ceil(D/G)],
    group_size G a positive multiple of 16). mins is None for the symmetric schemes.
    Outputs are new arrays of x's library on x's device; CUDA work runs on the current stream.
    Raises LowbitError (with the C++ message) on bad arguments or NaN/Inf in x.
    """
    backend = backend_of(x)
    if backend.compiling():
        import torch

        from . import torch_ops  # noqa: F401  (registers torch.ops.lowbit)

        codes, scales, mins = torch.ops.lowbit.quantize(x, scheme, granularity, group_size)
        return codes, scales, (mins if scheme_info(scheme)[1] else None)
    return quantize_with(backend, x, scheme, granularity, group_size)


def quantize_with(backend, x, scheme, granularity, group_size, deferred=None):
    """quantize_tensor for a known backend (the torch custom op's implementation)."""
    shape = x.shape
    if len(shape) != 2:
        _check_rank2(x, "x")
    rows, cols = shape
    code_cols, scale_shape, has_mins, code_dtype, nbytes = _layout(scheme, granularity, group_size, rows, cols)
    codes = backend.empty((rows, code_cols), code_dtype, x)
    scales = backend.empty(scale_shape, "f32", x)
    mins = backend.empty(scale_shape, "f32", x) if has_mins else None
    workspace, stream = None, 0
    if backend.is_cuda(x):
        stream = backend.stream(x)
        workspace = backend.empty((nbytes,), "u8", x) if nbytes else None
        if deferred is None:
            # A CUDA graph cannot capture the synchronization of the NaN/Inf check.
            deferred = backend.capturing()
    dl = backend.dl
    _lowbit.quantize(dl(x), dl(codes), dl(scales), dl(mins), scheme, granularity, group_size, dl(workspace), stream,
                     bool(deferred))
    return codes, scales, mins


def default_cols(codes, scales, scheme: str, granularity: str) -> int:
    """D of the original tensor: codes' width for 8-bit codes; for packed 4-bit codes the
    channel count of per-channel scales, else twice the code width (pass cols= for odd D)."""
    if scheme_info(scheme)[0] == 8:
        return codes.shape[1]
    if granularity == "channel":
        return scales.shape[0]
    return 2 * codes.shape[1]


def dequantize_tensor(codes, scales, mins=None, scheme: str = "int8", granularity: str = "channel",
                      group_size: int = 0, dtype="float32", cols=None):
    """Decodes (codes, scales, mins) from quantize_tensor into a new [T, D] tensor of `dtype`
    (float32, float16 or bfloat16). For 4-bit codes of an odd D, pass cols=D."""
    backend = backend_of(codes)
    _check_rank2(codes, "codes")
    if cols is None:
        cols = default_cols(codes, scales, scheme, granularity)
    out_dtype = dtype_name(dtype)
    if backend.compiling():
        import torch

        from . import torch_ops  # noqa: F401

        return torch.ops.lowbit.dequantize(codes, scales, mins, scheme, granularity, group_size, cols, out_dtype)
    return dequantize_with(backend, codes, scales, mins, scheme, granularity, group_size, out_dtype, cols)


def dequantize_with(backend, codes, scales, mins, scheme, granularity, group_size, out_dtype, cols):
    out = backend.empty((codes.shape[0], cols), out_dtype, codes)
    stream = backend.stream(codes) if backend.is_cuda(codes) else 0
    dl = backend.dl
    _lowbit.dequantize(dl(codes), dl(scales), dl(mins), scheme, granularity, group_size, dl(out), stream)
    return out

"""quantize_tensor / dequantize_tensor: lowbit::quantize and lowbit::dequantize over
NumPy arrays, torch tensors or CuPy arrays (2-D: tokens x channels).

NaN or Inf in quantize_tensor's input:
- CPU arrays (NumPy, CPU tensors): LowbitError at the call, naming row and column.
- CUDA, check=False (the default): the call does not synchronize. The kernel records the
  first NaN/Inf in a status word of the device (lowbit::NonFiniteStatus), and
  check_quantize_status() raises it (once): it synchronizes the device and names the
  row and column where they are known. The codes and scales of such a call are not
  meaningful (with the symmetric schemes its scales are NaN or Inf).
- CUDA, check=True: the call synchronizes and raises at once (the C++ default,
  NonFiniteCheck::sync_and_throw); not allowed while a CUDA graph is being captured.
- Inside a CUDA graph the calls report into the same word, and check_quantize_status()
  after a replay raises it, provided the device's word existed before capture (made by
  any eager CUDA quantize_tensor, or by check_quantize_status(device)); otherwise the
  captured calls' reports are lost.
"""
from __future__ import annotations

from . import _checks, _lowbit
from ._backend import _DTYPE_ALIASES, backend_of, dtype_name, gpu_backends, torch_backend

LowbitError = _lowbit.LowbitError
_LARGE_OUTPUT = _checks.LARGE_OUTPUT


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


# (code_cols, scale shape, has_mins, code dtype name, GPU workspace bytes with its own
# status word, without it) by (scheme, granularity, group_size, rows, cols): what
# quantize_with derives before it allocates, from the C++ layout (which checks the
# arguments: a bad spec raises and is not cached).
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
        sticky = _lowbit.quantize_workspace_bytes_without_status(scheme, granularity, group_size, rows, cols)
        layout = (code_cols, scale_shape, has_mins, code_dtype, nbytes, sticky)
        if len(_LAYOUTS) >= _LAYOUTS_MAX:
            _LAYOUTS.clear()
        _LAYOUTS[key] = layout
    return layout


def quantize_tensor(x, scheme: str = "int8", granularity: str = "channel", group_size: int = 0,
                    check: bool = False):
    """Quantizes a 2-D float tensor; returns (codes, scales, mins).

    scheme: "int8" (symmetric), "int4" (asymmetric, two codes a byte), "int8_asym", "int4_sym".
    granularity: "tensor" (scales [1]), "channel" ([D]), "token" ([T]) or "group" ([T, ceil(D/G)],
    group_size G a positive multiple of 16). mins is None for the symmetric schemes.
    Outputs are new arrays of x's library on x's device; CUDA work runs on the current stream.
    Raises LowbitError (with the C++ message) on bad arguments. NaN/Inf in x: raised here on
    the CPU and with check=True; else (CUDA) by check_quantize_status() (see the module's
    docstring).
    """
    try:
        backend = backend_of(x)
        if backend.compiling():
            import torch

            from . import torch_ops  # noqa: F401  (registers torch.ops.lowbit)

            if check:
                raise LowbitError("quantize_tensor: check=True synchronizes, which torch.compile cannot trace; "
                                  "call lowbit.check_quantize_status() after the compiled function")
            codes, scales, mins = torch.ops.lowbit.quantize(x, scheme, granularity, group_size)
            return codes, scales, (mins if scheme_info(scheme)[1] else None)
        return quantize_with(backend, x, scheme, granularity, group_size, check)
    except _checks.ARGUMENT_ERRORS as error:
        _checks.explain(error, arrays={"x": x}, ints={"group_size": group_size})
        raise


def quantize_with(backend, x, scheme, granularity, group_size, check=False):
    """quantize_tensor for a known backend (the torch custom op's implementation)."""
    shape = x.shape
    if len(shape) != 2:
        _check_rank2(x, "x")
    rows, cols = shape
    layout = _LAYOUTS.get((scheme, granularity, group_size, rows, cols))
    if layout is None:
        layout = _layout(scheme, granularity, group_size, rows, cols)
    code_cols, scale_shape, has_mins, code_dtype, nbytes, sticky_bytes = layout
    if rows * cols >= _LARGE_OUTPUT:
        _checks.check_inputs((x, "x"))
    cuda = backend.is_cuda(x)
    if not cuda:
        stream, status = 0, 0
    elif check:
        if backend.capturing():
            raise LowbitError("quantize_tensor: check=True synchronizes, which CUDA graph capture forbids; "
                              "quantize with check=False and call lowbit.check_quantize_status() after replay")
        stream, status = backend.stream(x), 0
    else:
        # status 0: capturing before the device has a word (the captured reports are lost)
        stream, status = backend.stream_and_status(x)
    empty = backend.empty
    codes = empty((rows, code_cols), code_dtype, x)
    scales = empty(scale_shape, "f32", x)
    mins = empty(scale_shape, "f32", x) if has_mins else None
    workspace = None
    if cuda:
        if not status:
            workspace = empty((nbytes,), "u8", x)
        elif sticky_bytes:
            workspace = empty((sticky_bytes,), "u8", x)
    address = backend.address
    if address is None:  # NumPy (never CUDA)
        _lowbit.quantize(x, codes, scales, mins, scheme, granularity, group_size, None, 0, False)
    else:
        _lowbit.quantize_to(x, address(codes), address(scales), address(mins) if has_mins else 0, scheme,
                            granularity, group_size, workspace, stream, cuda and not check, status)
    return codes, scales, mins


def check_quantize_status(device=None) -> None:
    """Raises LowbitError for the first NaN/Inf that a CUDA quantize_tensor (check=False)
    found since the last check on `device` (a torch device, index or CuPy device; None:
    every device with a status word), naming its row and column where known; each report
    is raised once. Synchronizes those devices. Naming a CUDA torch device that has no word
    yet makes one (so that calls captured in a CUDA graph afterwards report)."""
    if isinstance(device, str) or type(device).__module__.startswith("torch"):
        torch_backend()  # its status_words_of(device) makes the word
    for backend in gpu_backends():
        for index, word in backend.status_words_of(device):
            backend.synchronize(index)
            _lowbit.check_quantize_status_word(word, backend.stream(word))


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
    try:
        backend = backend_of(codes)
        shape = codes.shape
        if len(shape) != 2:
            _check_rank2(codes, "codes")
        if cols is None:
            cols = shape[1] if _SCHEMES.get(scheme, (0,))[0] == 8 else default_cols(codes, scales, scheme, granularity)
        out_dtype = _DTYPE_ALIASES.get(dtype) or dtype_name(dtype)
        if backend.compiling():
            import torch

            from . import torch_ops  # noqa: F401

            return torch.ops.lowbit.dequantize(codes, scales, mins, scheme, granularity, group_size, cols, out_dtype)
        return dequantize_with(backend, codes, scales, mins, scheme, granularity, group_size, out_dtype, cols)
    except _checks.ARGUMENT_ERRORS as error:
        _checks.explain(error, arrays={"codes": codes, "scales": scales, "mins": mins},
                        ints={"group_size": group_size, "cols": cols})
        raise


def dequantize_with(backend, codes, scales, mins, scheme, granularity, group_size, out_dtype, cols):
    """dequantize_tensor for a known backend and output dtype (the torch custom op's implementation)."""
    rows = codes.shape[0]
    if rows * cols >= _LARGE_OUTPUT:  # cols came from the caller: it must fit the codes first
        _checks.check_inputs((codes, "codes"))
        code_cols = _lowbit.quant_layout(scheme, granularity, group_size, rows, cols)[0]
        if code_cols != codes.shape[1]:
            raise LowbitError(f"cols: {cols} columns take {code_cols} code columns, but codes has "
                              f"{codes.shape[1]}")
    out = backend.empty((rows, cols), out_dtype, codes)
    _lowbit.dequantize(codes, scales, mins, scheme, granularity, group_size, out, backend.stream(codes))
    return out

"""quantize / dequantize for a known backend, and the quantized layout they allocate from."""
from __future__ import annotations

from .. import _checks, _lowbit

LowbitError = _lowbit.LowbitError
_LARGE_OUTPUT = _checks.LARGE_OUTPUT


# The C++ scheme table, read once: (bits, has_mins, code dtype name) by scheme name. A
# plain dict, which torch.compile reads as a constant (it cannot trace a call into the
# extension module).
SCHEMES = _lowbit.quant_schemes()


def scheme_info(scheme: str):
    """(bits, has_mins, code dtype name) of a scheme; raises LowbitError for an unknown one."""
    info = SCHEMES.get(scheme)
    return info if info is not None else _lowbit.scheme_info(scheme)  # the C++ error message


def check_rank2(x, what: str):
    if len(x.shape) != 2:
        raise LowbitError(f"{what}: expected a rank-2 tensor [tokens, channels], got rank {len(x.shape)} "
                          f"(shape {tuple(x.shape)}); reshape it first")


def scale_shape(granularity, scale_rows, scale_cols):
    """The scales' (and mins') array shape: [rows, groups] per group, else a vector."""
    return (scale_rows, scale_cols) if granularity == "group" else (scale_rows * scale_cols,)


# The C++ layout rule (lowbit::quant_layout_rule) by (scheme, granularity, group_size).
_RULES = {}


def quant_shapes(scheme, granularity, group_size, rows, cols):
    """(code_cols, scale shape) of the quantized form of a rows x cols input by the C++
    layout rule, evaluated here so that rows and cols may be symbolic (torch.SymInt: the
    torch ops' shape functions). Raises LowbitError for an unknown scheme or granularity."""
    key = (scheme, granularity, group_size)
    rule = _RULES.get(key)
    if rule is None:
        rule = _RULES[key] = _lowbit.quant_layout_rule(scheme, granularity, group_size)
    code_cols, scale_rows, scale_cols = (_evaluate(term, rows, cols) for term in rule)
    return code_cols, scale_shape(granularity, scale_rows, scale_cols)


def _evaluate(term, rows, cols):
    """ceil(source / divisor) of a rule's (source, divisor); 0 for divisor 0."""
    source, divisor = term
    n = rows if source == "rows" else cols if source == "cols" else 1
    if divisor <= 0:
        return 0
    return n if divisor == 1 else (n + divisor - 1) // divisor


# (code_cols, scale shape, has_mins, code dtype name, GPU workspace bytes with its own
# status word, without it) by (scheme, granularity, group_size, rows, cols): what
# quantize_with derives before it allocates, from the C++ layout (which checks the
# arguments: a bad spec raises and is not cached).
LAYOUTS = {}
_LAYOUTS_MAX = 4096


def layout(scheme, granularity, group_size, rows, cols):
    key = (scheme, granularity, group_size, rows, cols)
    found = LAYOUTS.get(key)
    if found is None:
        _, has_mins, code_dtype = scheme_info(scheme)
        code_cols, scale_rows, scale_cols = _lowbit.quant_layout(scheme, granularity, group_size, rows, cols)
        nbytes = _lowbit.quantize_workspace_bytes(scheme, granularity, group_size, rows, cols)
        sticky = _lowbit.quantize_workspace_bytes_without_status(scheme, granularity, group_size, rows, cols)
        found = (code_cols, scale_shape(granularity, scale_rows, scale_cols), has_mins, code_dtype, nbytes, sticky)
        if len(LAYOUTS) >= _LAYOUTS_MAX:
            LAYOUTS.clear()
        LAYOUTS[key] = found
    return found


def quantize_with(backend, x, scheme, granularity, group_size, check=False):
    """quantize_tensor for a known backend (also the torch custom op's implementation)."""
    shape = x.shape
    if len(shape) != 2:
        check_rank2(x, "x")
    rows, cols = shape
    found = LAYOUTS.get((scheme, granularity, group_size, rows, cols))
    if found is None:
        found = layout(scheme, granularity, group_size, rows, cols)
    code_cols, scales_shape, has_mins, code_dtype, nbytes, sticky_bytes = found
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
    scales = empty(scales_shape, "f32", x)
    mins = empty(scales_shape, "f32", x) if has_mins else None
    workspace = None
    if cuda:
        if not status:
            workspace = empty((nbytes,), "u8", x)
        elif sticky_bytes:
            workspace = empty((sticky_bytes,), "u8", x)
    address = backend.address
    if address is None:  # NumPy (never CUDA): the arrays themselves
        _lowbit.quantize(x, codes, scales, mins, scheme, granularity, group_size, None, 0, False)
    else:  # torch, CuPy: outputs by address (see lowbit._backend)
        _lowbit.quantize(x, address(codes), address(scales), address(mins) if has_mins else 0, scheme, granularity,
                         group_size, workspace, stream, cuda and not check, status)
    return codes, scales, mins


def default_cols(codes, scales, scheme: str, granularity: str) -> int:
    """D of the original tensor: codes' width for 8-bit codes; for packed 4-bit codes the
    channel count of per-channel scales, else twice the code width (pass cols= for odd D)."""
    if scheme_info(scheme)[0] == 8:
        return codes.shape[1]
    if granularity == "channel":
        return scales.shape[0]
    return 2 * codes.shape[1]


def dequantize_with(backend, codes, scales, mins, scheme, granularity, group_size, out_dtype, cols):
    """dequantize_tensor for a known backend and output dtype (also the torch custom op's implementation)."""
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

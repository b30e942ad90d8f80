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
from ._ops.quant import SCHEMES, check_rank2, default_cols, dequantize_with, quantize_with, scheme_info

LowbitError = _lowbit.LowbitError


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


def dequantize_tensor(codes, scales, mins=None, scheme: str = "int8", granularity: str = "channel",
                      group_size: int = 0, dtype="float32", cols=None):
    """Decodes (codes, scales, mins) from quantize_tensor into a new [T, D] tensor of `dtype`
    (float32, float16 or bfloat16). For 4-bit codes of an odd D, pass cols=D."""
    try:
        backend = backend_of(codes)
        shape = codes.shape
        if len(shape) != 2:
            check_rank2(codes, "codes")
        if cols is None:
            cols = shape[1] if SCHEMES.get(scheme, (0,))[0] == 8 else default_cols(codes, scales, scheme, granularity)
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

"""Weight-only products (W4A16 / W8A16): quantize a weight [N, K] group-wise along K,
repack it once on the host (lowbit::pack_weights), multiply (lowbit::weight_only_gemm)."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Optional

import numpy as np

from . import _checks, _lowbit
from ._backend import NUMPY, backend_of, dtype_name
from ._ops.quant import quantize_with
from ._ops.weights import linear_with

LowbitError = _lowbit.LowbitError


@dataclass(frozen=True)
class PackedWeights:
    """A weight [n, k] in lowbit's packed form: three opaque uint8 byte buffers (codes, scales and
    mins in act_dtype; mins only with zero_point), all on one device."""

    codes: Any
    scales: Any
    mins: Optional[Any]
    n: int
    k: int
    bits: int = 4
    group_size: int = 128
    zero_point: bool = True
    act_dtype: str = "f16"

    def map(self, fn) -> "PackedWeights":
        """The same weights with fn applied to each buffer (e.g. torch.from_numpy, .to(device))."""
        return replace(self, codes=fn(self.codes), scales=fn(self.scales),
                       mins=None if self.mins is None else fn(self.mins))

    @property
    def nbytes(self) -> int:
        return sum(int(b.nbytes) for b in (self.codes, self.scales, self.mins) if b is not None)


def packed_weight_sizes(n, k, bits=4, group_size=128, zero_point=True, act_dtype="f16"):
    """(code bytes, scale count, min count) of the packed form of an n x k weight."""
    try:
        return _lowbit.packed_weight_sizes(bits, group_size, zero_point, dtype_name(act_dtype), n, k)
    except _checks.ARGUMENT_ERRORS as error:
        _checks.explain(error, ints={"n": n, "k": k, "bits": bits, "group_size": group_size})
        raise


def pack_weights(codes, scales, mins, n, k, bits=4, group_size=128, zero_point=True, act_dtype="f16"):
    """Repacks a quantized weight (host arrays) into the order the kernels read.

    codes: int8 [n, k] for bits 8, or uint8 [n, ceil(k/2)] (two 4-bit codes a byte, low nibble
    first: quantize_tensor's "int4" layout); scales, mins: float32 [n, ceil(k/G)] (mins with
    zero_point only). Returns PackedWeights with buffers of the codes' library, on the host."""
    try:
        backend = backend_of(codes)
        act = dtype_name(act_dtype)
        code_bytes, scale_count, min_count = _lowbit.packed_weight_sizes(bits, group_size, zero_point, act, n, k)
        if code_bytes >= _checks.LARGE_OUTPUT:
            _checks.check_inputs((codes, "codes"))
        size = 2  # act_dtype is f16 or bf16 (checked by packed_weight_sizes' caller, pack_weights)
        out_codes = backend.empty((code_bytes,), "u8", codes)
        out_scales = backend.empty((scale_count * size,), "u8", codes)
        out_mins = backend.empty((min_count * size,), "u8", codes) if zero_point else None
        _lowbit.pack_weights(codes, scales, mins, bits, group_size, zero_point, act, n, k, out_codes, out_scales,
                             out_mins)
        return PackedWeights(out_codes, out_scales, out_mins, int(n), int(k), int(bits), int(group_size),
                             bool(zero_point), act)
    except _checks.ARGUMENT_ERRORS as error:
        _checks.explain(error, arrays={"codes": codes, "scales": scales, "mins": mins},
                        ints={"n": n, "k": k, "bits": bits, "group_size": group_size})
        raise


def _host_float32(w):
    if isinstance(w, np.ndarray):
        return np.ascontiguousarray(w, dtype=np.float32)
    if type(w).__module__.startswith("torch"):
        return w.detach().to("cpu").float().contiguous().numpy()
    raise TypeError(f"w: expected a NumPy array or torch tensor, got {type(w).__name__}")


def quantize_weights(w, bits=4, group_size=128, zero_point=True, act_dtype="f16"):
    """Quantizes a weight [N, K] (nn.Linear's layout) with lowbit's quantize on the host, group-wise
    along K (group_size 32, 64, 128, or K for one group per row), and packs it. bits 4 with
    zero_point: int4 asymmetric (w = q*s + m); bits 4 without: symmetric (w = (q-8)*s); bits 8:
    int8 symmetric. Returns host PackedWeights (NumPy buffers)."""
    w = _host_float32(w)
    if w.ndim != 2:
        raise LowbitError(f"w: expected a rank-2 weight [N, K], got rank {w.ndim}")
    n, k = w.shape
    if bits == 8:
        scheme = "int8"
    elif bits == 4:
        scheme = "int4" if zero_point else "int4_sym"
    else:
        raise LowbitError(f"bits: expected 4 or 8, got {bits}")
    granularity = "token" if group_size == k else "group"
    codes, scales, mins = quantize_with(NUMPY, w, scheme, granularity, group_size if granularity == "group" else 0)
    if scheme == "int4_sym":
        codes ^= 0x88  # two's complement nibbles t -> q = t + 8, the (q - 8) * s form pack_weights takes
    return pack_weights(codes, scales, mins, n, k, bits, group_size, zero_point, act_dtype)


def weight_only_linear(x, packed: PackedWeights, bias=None):
    """out [M, N] = x [M, K] @ W^T (+ bias [N]), x, bias and out in packed.act_dtype (float16 or
    bfloat16), the weights dequantized in registers. x and packed on the same device."""
    try:
        backend = backend_of(x)
        if len(x.shape) != 2:
            raise LowbitError(f"x: expected a rank-2 tensor [M, K], got rank {len(x.shape)}")
        if backend.compiling():
            import torch

            from . import torch_ops  # noqa: F401

            return torch.ops.lowbit.weight_only_linear(x, packed.codes, packed.scales, packed.mins, packed.bits,
                                                       packed.group_size, packed.zero_point, packed.n, packed.k,
                                                       packed.act_dtype, bias)
        return linear_with(backend, x, packed.codes, packed.scales, packed.mins, packed.bits, packed.group_size,
                           packed.zero_point, packed.n, packed.k, packed.act_dtype, bias)
    except _checks.ARGUMENT_ERRORS as error:
        _checks.explain(error, arrays={"x": x, "bias": bias})
        raise

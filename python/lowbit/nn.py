"""QuantizedLinear: an nn.Linear whose weight is stored packed (W4A16 / W8A16) and
multiplied by lowbit's weight-only GEMM. Needs torch."""
from __future__ import annotations

import torch

from .weights import PackedWeights, quantize_weights, weight_only_linear

_ACT_NAMES = {torch.float16: "f16", torch.bfloat16: "bf16"}
_ACT_DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16}


class QuantizedLinear(torch.nn.Module):
    """y = x @ W^T + b with W quantized group-wise along K and packed by lowbit.

    The packed weight lives in uint8 buffers (codes, scales, mins: opaque bytes), so it follows
    .to(device) but not .half() / .to(dtype). Inputs of another dtype are cast to act_dtype and the
    output cast back. CUDA inputs run the GPU kernels; CPU inputs lowbit's CPU reference.
    """

    def __init__(self, packed: PackedWeights, bias: torch.Tensor | None = None):
        super().__init__()
        self.in_features, self.out_features = packed.k, packed.n
        self.bits, self.group_size, self.zero_point = packed.bits, packed.group_size, packed.zero_point
        self.act_dtype = _ACT_DTYPES[packed.act_dtype]
        as_tensor = lambda b: b if isinstance(b, torch.Tensor) else torch.from_numpy(b)  # noqa: E731
        self.register_buffer("codes", as_tensor(packed.codes))
        self.register_buffer("scales", as_tensor(packed.scales))
        self.register_buffer("mins", None if packed.mins is None else as_tensor(packed.mins))
        self.register_buffer("bias", None if bias is None else bias.detach().to(self.act_dtype).clone())

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear, bits: int = 4, group_size: int = 128, zero_point: bool = True,
                    act_dtype: torch.dtype | None = None) -> "QuantizedLinear":
        """Quantizes linear.weight on the host (int4 asymmetric per group for bits 4, int8 symmetric
        for bits 8), packs it, and puts the buffers on linear's device. act_dtype defaults to the
        weight's dtype if it is float16 / bfloat16, else float16. group_size larger than K means K."""
        weight = linear.weight
        act = act_dtype or (weight.dtype if weight.dtype in _ACT_NAMES else torch.float16)
        k = weight.shape[1]
        group = k if group_size >= k else group_size
        packed = quantize_weights(weight, bits=bits, group_size=group, zero_point=zero_point and bits == 4,
                                  act_dtype=_ACT_NAMES[act])
        return cls(packed, linear.bias).to(weight.device)

    def packed(self) -> PackedWeights:
        return PackedWeights(self.codes, self.scales, self.mins, self.out_features, self.in_features, self.bits,
                             self.group_size, self.zero_point, _ACT_NAMES[self.act_dtype])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x2 = x.reshape(-1, self.in_features)
        if x2.dtype != self.act_dtype:
            x2 = x2.to(self.act_dtype)
        if x2.stride(-1) != 1 or (x2.shape[0] > 1 and x2.stride(0) < self.in_features):
            x2 = x2.contiguous()
        bias = self.bias if self.bias is None or self.bias.dtype == self.act_dtype else self.bias.to(self.act_dtype)
        y = weight_only_linear(x2, self.packed(), bias)
        return y.to(x.dtype).reshape(*shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, bits={self.bits}, "
                f"group_size={self.group_size}, zero_point={self.zero_point}, act_dtype={self.act_dtype}")

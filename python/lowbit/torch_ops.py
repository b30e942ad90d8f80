"""lowbit's ops as PyTorch custom ops (torch.ops.lowbit.*), with fake implementations
that give output shapes and dtypes, so that they trace under torch.compile and run
inside CUDA graphs. Imported on demand by the public functions while torch.compile
traces; import it yourself to call torch.ops.lowbit.* directly."""

from typing import Optional

import torch

from ._backend import torch_backend
from .gemm import matmul_with
from .quant import dequantize_with, quantize_with, scheme_info
from .weights import linear_with

_DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "i32": torch.int32}


def _layout(scheme: str, granularity: str, group_size: int, rows, cols):
    # quant_layout in Python, so that it also works on symbolic sizes.
    bits = scheme_info(scheme)[0]
    code_cols = cols if bits == 8 else (cols + 1) // 2
    if granularity == "tensor":
        return code_cols, (1,)
    if granularity == "channel":
        return code_cols, (cols,)
    if granularity == "token":
        return code_cols, (rows,)
    if granularity == "group" and group_size > 0:
        return code_cols, (rows, (cols + group_size - 1) // group_size)
    raise ValueError(f"granularity {granularity!r} with group_size {group_size} is not valid")


@torch.library.custom_op("lowbit::quantize", mutates_args=())
def quantize(x: torch.Tensor, scheme: str, granularity: str, group_size: int) -> tuple[torch.Tensor, torch.Tensor,
                                                                                       torch.Tensor]:
    codes, scales, mins = quantize_with(torch_backend(), x, scheme, granularity, group_size)
    return codes, scales, (mins if mins is not None else x.new_empty((0,), dtype=torch.float32))


@quantize.register_fake
def _(x, scheme, granularity, group_size):
    _, has_mins, code_dtype = scheme_info(scheme)
    code_cols, scale_shape = _layout(scheme, granularity, group_size, x.shape[0], x.shape[1])
    codes = x.new_empty((x.shape[0], code_cols), dtype=torch.int8 if code_dtype == "i8" else torch.uint8)
    scales = x.new_empty(scale_shape, dtype=torch.float32)
    mins = x.new_empty(scale_shape if has_mins else (0,), dtype=torch.float32)
    return codes, scales, mins


@torch.library.custom_op("lowbit::dequantize", mutates_args=())
def dequantize(codes: torch.Tensor, scales: torch.Tensor, mins: Optional[torch.Tensor], scheme: str,
               granularity: str, group_size: int, cols: int, dtype: str) -> torch.Tensor:
    mins = mins if mins is not None and mins.numel() else None
    return dequantize_with(torch_backend(), codes, scales, mins, scheme, granularity, group_size, dtype, cols)


@dequantize.register_fake
def _(codes, scales, mins, scheme, granularity, group_size, cols, dtype):
    return codes.new_empty((codes.shape[0], cols), dtype=_DTYPES[dtype])


def _matmul_n(b, b_layout):
    return b.shape[1] if b_layout == "k_by_n" else b.shape[0]


@torch.library.custom_op("lowbit::int8_matmul", mutates_args=())
def int8_matmul(a: torch.Tensor, b: torch.Tensor, scale_a: Optional[torch.Tensor], scale_b: Optional[torch.Tensor],
                scale_c: float, bias: Optional[torch.Tensor], relu: bool, b_layout: str,
                out_dtype: str) -> torch.Tensor:
    return matmul_with(torch_backend(), "int8", a, b, 0, _matmul_n(b, b_layout), scale_a, scale_b, scale_c, bias,
                       relu, b_layout, out_dtype)


@int8_matmul.register_fake
def _(a, b, scale_a, scale_b, scale_c, bias, relu, b_layout, out_dtype):
    return a.new_empty((a.shape[0], _matmul_n(b, b_layout)), dtype=_DTYPES[out_dtype])


@torch.library.custom_op("lowbit::int4_matmul", mutates_args=())
def int4_matmul(a: torch.Tensor, b: torch.Tensor, k: int, scale_a: Optional[torch.Tensor],
                scale_b: Optional[torch.Tensor], scale_c: float, bias: Optional[torch.Tensor], relu: bool,
                b_layout: str, out_dtype: str) -> torch.Tensor:
    return matmul_with(torch_backend(), "int4", a, b, k, _matmul_n(b, b_layout), scale_a, scale_b, scale_c, bias,
                       relu, b_layout, out_dtype)


@int4_matmul.register_fake
def _(a, b, k, scale_a, scale_b, scale_c, bias, relu, b_layout, out_dtype):
    return a.new_empty((a.shape[0], _matmul_n(b, b_layout)), dtype=_DTYPES[out_dtype])


@torch.library.custom_op("lowbit::weight_only_linear", mutates_args=())
def weight_only_linear(x: torch.Tensor, codes: torch.Tensor, scales: torch.Tensor, mins: Optional[torch.Tensor],
                       bits: int, group_size: int, zero_point: bool, n: int, k: int, act_dtype: str,
                       bias: Optional[torch.Tensor]) -> torch.Tensor:
    return linear_with(torch_backend(), x, codes, scales, mins, bits, group_size, zero_point, n, k, act_dtype, bias)


@weight_only_linear.register_fake
def _(x, codes, scales, mins, bits, group_size, zero_point, n, k, act_dtype, bias):
    return x.new_empty((x.shape[0], n), dtype=_DTYPES[act_dtype])

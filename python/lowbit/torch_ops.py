"""lowbit's ops as PyTorch custom ops (torch.ops.lowbit.*), with fake implementations
that give output shapes and dtypes, so that they trace under torch.compile and run
inside CUDA graphs. Imported on demand by the public functions while torch.compile
traces; import it yourself to call torch.ops.lowbit.* directly.

The functional ops are registered with torch.library.Library (schema from the type
hints, one kernel for every device): a call is one Python kernel under the dispatcher.
torch.library.custom_op wraps that kernel in an autograd function, an aliasing check
and a dynamo guard (~10 us more a call on the CPU; issue 6). None of these ops has a
gradient. The KV ops that write the cache's buffers stay custom_op, which registers
the version bumps of mutated tensors.
"""

from typing import Optional

import torch

from . import _lowbit
from ._backend import torch_backend
from ._ops.attention import quantized_attention_with
from ._ops.block_formats import block_decode_with, block_encode_with
from ._ops.gemm import matmul_with
from ._ops.kv import kv_attention_with, kv_layer, kv_read_with
from ._ops.quant import dequantize_with, quant_shapes, quantize_with, scheme_info
from ._ops.weights import linear_with

_DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "i32": torch.int32,
           "i8": torch.int8, "u8": torch.uint8}

_LIB = torch.library.Library("lowbit", "FRAGMENT")  # kept alive: the registrations live with it


class _Op:
    """A functional op lowbit::<fn name>, callable like the custom_op objects it replaces."""

    def __init__(self, fn):
        self.name = fn.__name__
        _LIB.define(self.name + torch.library.infer_schema(fn, mutates_args=()), tags=(torch.Tag.pt2_compliant_tag,))
        _LIB.impl(self.name, fn, "CompositeExplicitAutograd")
        self._op = getattr(torch.ops.lowbit, self.name).default

    def register_fake(self, fn):
        torch.library.register_fake(f"lowbit::{self.name}", fn, lib=_LIB)
        return fn

    def __call__(self, *args):
        return self._op(*args)


@_Op
def quantize(x: torch.Tensor, scheme: str, granularity: str, group_size: int) -> tuple[torch.Tensor, torch.Tensor,
                                                                                       torch.Tensor]:
    codes, scales, mins = quantize_with(torch_backend(), x, scheme, granularity, group_size)
    return codes, scales, (mins if mins is not None else x.new_empty((0,), dtype=torch.float32))


@quantize.register_fake
def _(x, scheme, granularity, group_size):
    _, has_mins, code_dtype = scheme_info(scheme)
    code_cols, scale_shape = quant_shapes(scheme, granularity, group_size, x.shape[0], x.shape[1])
    codes = x.new_empty((x.shape[0], code_cols), dtype=_DTYPES[code_dtype])
    scales = x.new_empty(scale_shape, dtype=torch.float32)
    mins = x.new_empty(scale_shape if has_mins else (0,), dtype=torch.float32)
    return codes, scales, mins


@_Op
def dequantize(codes: torch.Tensor, scales: torch.Tensor, mins: Optional[torch.Tensor], scheme: str,
               granularity: str, group_size: int, cols: int, dtype: str) -> torch.Tensor:
    mins = mins if mins is not None and mins.numel() else None
    return dequantize_with(torch_backend(), codes, scales, mins, scheme, granularity, group_size, dtype, cols)


@dequantize.register_fake
def _(codes, scales, mins, scheme, granularity, group_size, cols, dtype):
    return codes.new_empty((codes.shape[0], cols), dtype=_DTYPES[dtype])


def _matmul_n(b, b_layout):
    return b.shape[1] if b_layout == "k_by_n" else b.shape[0]


@_Op
def int8_matmul(a: torch.Tensor, b: torch.Tensor, scale_a: Optional[torch.Tensor], scale_b: Optional[torch.Tensor],
                scale_c: float, bias: Optional[torch.Tensor], relu: bool, b_layout: str,
                out_dtype: str) -> torch.Tensor:
    return matmul_with(torch_backend(), "int8", a, b, 0, _matmul_n(b, b_layout), scale_a, scale_b, scale_c, bias,
                       relu, b_layout, out_dtype)


@int8_matmul.register_fake
def _(a, b, scale_a, scale_b, scale_c, bias, relu, b_layout, out_dtype):
    return a.new_empty((a.shape[0], _matmul_n(b, b_layout)), dtype=_DTYPES[out_dtype])


@_Op
def int4_matmul(a: torch.Tensor, b: torch.Tensor, k: int, scale_a: Optional[torch.Tensor],
                scale_b: Optional[torch.Tensor], scale_c: float, bias: Optional[torch.Tensor], relu: bool,
                b_layout: str, out_dtype: str) -> torch.Tensor:
    return matmul_with(torch_backend(), "int4", a, b, k, _matmul_n(b, b_layout), scale_a, scale_b, scale_c, bias,
                       relu, b_layout, out_dtype)


@int4_matmul.register_fake
def _(a, b, k, scale_a, scale_b, scale_c, bias, relu, b_layout, out_dtype):
    return a.new_empty((a.shape[0], _matmul_n(b, b_layout)), dtype=_DTYPES[out_dtype])


@_Op
def weight_only_linear(x: torch.Tensor, codes: torch.Tensor, scales: torch.Tensor, mins: Optional[torch.Tensor],
                       bits: int, group_size: int, zero_point: bool, n: int, k: int, act_dtype: str,
                       bias: Optional[torch.Tensor]) -> torch.Tensor:
    return linear_with(torch_backend(), x, codes, scales, mins, bits, group_size, zero_point, n, k, act_dtype, bias)


@weight_only_linear.register_fake
def _(x, codes, scales, mins, bits, group_size, zero_point, n, k, act_dtype, bias):
    return x.new_empty((x.shape[0], n), dtype=_DTYPES[act_dtype])


# (block size, scale dtype, has a global scale) of each block format: the C++ table
# (_lowbit.block_layout) is the definition, test_torch_ops_cpu checks that this copy
# agrees; kept here for the fake implementations (symbolic sizes).
BLOCK_FORMATS = {"nf4": (64, torch.float32, False), "mxfp4": (32, torch.uint8, False),
                 "nvfp4": (16, torch.uint8, True)}


def _none_if_empty(x: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    return x if x is not None and x.numel() else None


@_Op
def block_encode(x: torch.Tensor, fmt: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    codes, scales, global_scale = block_encode_with(torch_backend(), x, fmt)
    return codes, scales, (global_scale if global_scale is not None else x.new_empty((0,), dtype=torch.float32))


@block_encode.register_fake
def _(x, fmt):
    if fmt not in BLOCK_FORMATS:
        _lowbit.block_layout(fmt, 1, 64)  # raises the C++ message
    block, scale_dtype, has_global = BLOCK_FORMATS[fmt]
    rows, cols = x.shape
    codes = x.new_empty((rows, cols // 2), dtype=torch.uint8)
    scales = x.new_empty((rows * cols // block,), dtype=scale_dtype)
    return codes, scales, x.new_empty((1 if has_global else 0,), dtype=torch.float32)


@_Op
def block_decode(codes: torch.Tensor, scales: torch.Tensor, global_scale: Optional[torch.Tensor], fmt: str,
                 cols: int, dtype: str) -> torch.Tensor:
    return block_decode_with(torch_backend(), codes, scales, _none_if_empty(global_scale), fmt, cols, dtype)


@block_decode.register_fake
def _(codes, scales, global_scale, fmt, cols, dtype):
    return codes.new_empty((codes.shape[0], cols), dtype=_DTYPES[dtype])


@_Op
def quantized_attention(x: torch.Tensor, wq_codes: torch.Tensor, wq_scales: torch.Tensor,
                        wq_global: Optional[torch.Tensor], wk_codes: torch.Tensor, wk_scales: torch.Tensor,
                        wk_global: Optional[torch.Tensor], wv_codes: torch.Tensor, wv_scales: torch.Tensor,
                        wv_global: Optional[torch.Tensor], bq: Optional[torch.Tensor], bk: Optional[torch.Tensor],
                        bv: Optional[torch.Tensor], heads: int, kv_heads: int, head_dim: int, causal: bool, fmt: str,
                        variant: str) -> torch.Tensor:
    return quantized_attention_with(torch_backend(), x, (wq_codes, wq_scales, _none_if_empty(wq_global)),
                                    (wk_codes, wk_scales, _none_if_empty(wk_global)),
                                    (wv_codes, wv_scales, _none_if_empty(wv_global)), bq, bk, bv, heads, kv_heads,
                                    head_dim, causal, fmt, variant)


@quantized_attention.register_fake
def _(x, wq_codes, wq_scales, wq_global, wk_codes, wk_scales, wk_global, wv_codes, wv_scales, wv_global, bq, bk, bv,
      heads, kv_heads, head_dim, causal, fmt, variant):
    return x.new_empty((x.shape[0], heads * head_dim), dtype=torch.float16)


# One layer's decode KV cache (lowbit.kv.LayerKVCache): the buffers travel as tensors, so
# that torch sees what kv_append writes; spec = [kv_heads, head_dim, sink, window,
# kv_bits, max_tokens].
_KV_BUFFERS = ("k_f16", "k_codes", "k_scales", "k_mins", "v_f16", "v_codes", "v_scales", "v_mins")


@torch.library.custom_op("lowbit::kv_append", mutates_args=_KV_BUFFERS)
def kv_append(k_f16: torch.Tensor, k_codes: torch.Tensor, k_scales: torch.Tensor, k_mins: torch.Tensor,
              v_f16: torch.Tensor, v_codes: torch.Tensor, v_scales: torch.Tensor, v_mins: torch.Tensor,
              k: torch.Tensor, v: torch.Tensor, policy: str, spec: list[int], pos: int) -> None:
    layer = kv_layer(policy, spec, (k_f16, k_codes, k_scales, k_mins, v_f16, v_codes, v_scales, v_mins))
    backend = torch_backend()
    layer.append(k, v, pos, backend.stream(k))


@kv_append.register_fake
def _(k_f16, k_codes, k_scales, k_mins, v_f16, v_codes, v_scales, v_mins, k, v, policy, spec, pos):
    return None


@_Op
def kv_attention(k_f16: torch.Tensor, k_codes: torch.Tensor, k_scales: torch.Tensor, k_mins: torch.Tensor,
                 v_f16: torch.Tensor, v_codes: torch.Tensor, v_scales: torch.Tensor, v_mins: torch.Tensor,
                 q: torch.Tensor, policy: str, spec: list[int], length: int, out_dtype: str) -> torch.Tensor:
    layer = kv_layer(policy, spec, (k_f16, k_codes, k_scales, k_mins, v_f16, v_codes, v_scales, v_mins))
    return kv_attention_with(torch_backend(), layer, q, length, out_dtype, spec[1])


@kv_attention.register_fake
def _(k_f16, k_codes, k_scales, k_mins, v_f16, v_codes, v_scales, v_mins, q, policy, spec, length, out_dtype):
    return q.new_empty((q.shape[0], spec[1]), dtype=_DTYPES[out_dtype])


@_Op
def kv_read(k_f16: torch.Tensor, k_codes: torch.Tensor, k_scales: torch.Tensor, k_mins: torch.Tensor,
            v_f16: torch.Tensor, v_codes: torch.Tensor, v_scales: torch.Tensor, v_mins: torch.Tensor, policy: str,
            spec: list[int], length: int) -> tuple[torch.Tensor, torch.Tensor]:
    layer = kv_layer(policy, spec, (k_f16, k_codes, k_scales, k_mins, v_f16, v_codes, v_scales, v_mins))
    return kv_read_with(torch_backend(), layer, policy, spec, length, k_scales)


@kv_read.register_fake
def _(k_f16, k_codes, k_scales, k_mins, v_f16, v_codes, v_scales, v_mins, policy, spec, length):
    shape = (_lowbit.kv_visible_count(policy, *spec, length), spec[0], spec[1])
    return k_scales.new_empty(shape, dtype=torch.float16), k_scales.new_empty(shape, dtype=torch.float16)


# The device-position forms (one CUDA graph for every decode step): pos is an int32 [1]
# tensor on the cache's device.
@torch.library.custom_op("lowbit::kv_append_at", mutates_args=_KV_BUFFERS)
def kv_append_at(k_f16: torch.Tensor, k_codes: torch.Tensor, k_scales: torch.Tensor, k_mins: torch.Tensor,
                 v_f16: torch.Tensor, v_codes: torch.Tensor, v_scales: torch.Tensor, v_mins: torch.Tensor,
                 k: torch.Tensor, v: torch.Tensor, pos: torch.Tensor, policy: str, spec: list[int]) -> None:
    layer = kv_layer(policy, spec, (k_f16, k_codes, k_scales, k_mins, v_f16, v_codes, v_scales, v_mins))
    backend = torch_backend()
    layer.append_at(k, v, pos, backend.stream(k))


@kv_append_at.register_fake
def _(k_f16, k_codes, k_scales, k_mins, v_f16, v_codes, v_scales, v_mins, k, v, pos, policy, spec):
    return None


def _max_length(policy: str, spec) -> int:
    capacity = _lowbit.kv_layout(policy, *spec)["capacity"]
    return capacity if capacity >= 0 else spec[5]


@_Op
def kv_attention_at(k_f16: torch.Tensor, k_codes: torch.Tensor, k_scales: torch.Tensor, k_mins: torch.Tensor,
                    v_f16: torch.Tensor, v_codes: torch.Tensor, v_scales: torch.Tensor, v_mins: torch.Tensor,
                    q: torch.Tensor, pos: torch.Tensor, policy: str, spec: list[int], out_dtype: str) -> torch.Tensor:
    layer = kv_layer(policy, spec, (k_f16, k_codes, k_scales, k_mins, v_f16, v_codes, v_scales, v_mins))
    return kv_attention_with(torch_backend(), layer, q, None, out_dtype, spec[1], pos, _max_length(policy, spec))


@kv_attention_at.register_fake
def _(k_f16, k_codes, k_scales, k_mins, v_f16, v_codes, v_scales, v_mins, q, pos, policy, spec, out_dtype):
    return q.new_empty((q.shape[0], spec[1]), dtype=_DTYPES[out_dtype])

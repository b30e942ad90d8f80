"""lowbit: quantized LLM inference kernels for NumPy, PyTorch and Hugging Face transformers.

Arrays go in through DLPack without copies; outputs are new arrays of the input's library
(NumPy, torch or CuPy) on its device; CUDA work runs on the caller's current stream.
Errors raise LowbitError (a RuntimeError) carrying the C++ message; NaN/Inf met by a CUDA
quantize_tensor is raised by check_quantize_status() (see lowbit.quant).

torch-only names (QuantizedLinear, the torch.ops.lowbit custom ops) load on first use and
need torch; lowbit.hf_cache needs transformers.
"""
from ._lowbit import LowbitError
from ._lowbit import cuda as built_with_cuda
from .attention import flash_attention, quantized_attention
from .block_formats import BlockWeights, block_decode, block_encode
from .gemm import int4_matmul, int8_matmul
from .kv import LayerKVCache
from .quant import check_quantize_status, dequantize_tensor, quantize_tensor
from .weights import PackedWeights, pack_weights, packed_weight_sizes, quantize_weights, weight_only_linear

__all__ = [
    "LowbitError", "built_with_cuda", "quantize_tensor", "dequantize_tensor", "check_quantize_status", "int8_matmul",
    "int4_matmul", "PackedWeights", "pack_weights", "packed_weight_sizes", "quantize_weights", "weight_only_linear",
    "QuantizedLinear", "BlockWeights", "block_encode", "block_decode", "quantized_attention", "flash_attention", "LayerKVCache",
]


def __getattr__(name):
    # QuantizedLinear imports torch: only when asked for.
    if name == "QuantizedLinear":
        from .nn import QuantizedLinear

        return QuantizedLinear
    raise AttributeError(f"module 'lowbit' has no attribute {name!r}")

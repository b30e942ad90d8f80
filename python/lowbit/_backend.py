"""Which array library an input belongs to, and how to allocate like it.

Outputs are allocated with the caller's library (NumPy for NumPy inputs, torch for
torch tensors, CuPy for CuPy arrays) on the input's device, and handed to the C++
layer through DLPack, which writes into them in place. torch and CuPy are imported
only when an input comes from them.
"""
from __future__ import annotations

import numpy as np

from . import _lowbit

# lowbit dtype names -> NumPy dtypes (NumPy has no bfloat16).
_NUMPY_DTYPES = {"f32": np.float32, "f16": np.float16, "i8": np.int8, "u8": np.uint8, "i32": np.int32}

# Accepted spellings of a float output dtype.
_DTYPE_ALIASES = {
    "f32": "f32", "float32": "f32", "float": "f32",
    "f16": "f16", "float16": "f16", "half": "f16",
    "bf16": "bf16", "bfloat16": "bf16",
    "i32": "i32", "int32": "i32",
}


def dtype_name(dtype) -> str:
    """lowbit's name ('f32', 'f16', 'bf16', 'i32') for a string, NumPy or torch dtype."""
    if isinstance(dtype, str):
        key = dtype
    elif type(dtype).__module__.startswith("torch"):
        key = str(dtype).removeprefix("torch.")
    else:
        try:
            key = np.dtype(dtype).name
        except TypeError:
            key = str(dtype)
    try:
        return _DTYPE_ALIASES[key]
    except KeyError:
        raise _lowbit.LowbitError(
            f"dtype: expected float32, float16, bfloat16 or int32, got {dtype!r}") from None


class NumpyBackend:
    name = "numpy"

    @staticmethod
    def empty(shape, dtype: str, like):
        try:
            return np.empty(shape, _NUMPY_DTYPES[dtype])
        except KeyError:
            raise _lowbit.LowbitError(
                f"{dtype}: NumPy has no such dtype; pass torch tensors for bfloat16") from None

    @staticmethod
    def scalar(value: float, like):
        return np.full((1,), value, np.float32)

    @staticmethod
    def stream(like) -> int:
        return 0

    @staticmethod
    def is_cuda(like) -> bool:
        return False

    @staticmethod
    def compiling() -> bool:
        return False


class TorchBackend:
    name = "torch"

    def __init__(self):
        import torch

        self.torch = torch
        self.dtypes = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16,
                       "i8": torch.int8, "u8": torch.uint8, "i32": torch.int32}
        self.compiling = torch.compiler.is_compiling

    def empty(self, shape, dtype: str, like):
        return self.torch.empty(shape, dtype=self.dtypes[dtype], device=like.device)

    def scalar(self, value: float, like):
        # A fill kernel, not a host-to-device copy: safe under CUDA graph capture.
        return self.torch.full((1,), value, dtype=self.torch.float32, device=like.device)

    def stream(self, like) -> int:
        if like.device.type != "cuda":
            return 0
        return self.torch.cuda.current_stream(like.device).cuda_stream

    @staticmethod
    def is_cuda(like) -> bool:
        return like.device.type == "cuda"


class CupyBackend:
    name = "cupy"

    def __init__(self):
        import cupy

        self.cupy = cupy
        self.dtypes = {"f32": cupy.float32, "f16": cupy.float16, "i8": cupy.int8, "u8": cupy.uint8,
                       "i32": cupy.int32}

    def empty(self, shape, dtype: str, like):
        if dtype not in self.dtypes:
            raise _lowbit.LowbitError(f"{dtype}: CuPy has no such dtype; pass torch tensors for bfloat16")
        with like.device:
            return self.cupy.empty(shape, self.dtypes[dtype])

    def scalar(self, value: float, like):
        with like.device:
            return self.cupy.full((1,), value, self.cupy.float32)

    def stream(self, like) -> int:
        with like.device:
            return self.cupy.cuda.get_current_stream().ptr

    @staticmethod
    def is_cuda(like) -> bool:
        return True

    @staticmethod
    def compiling() -> bool:
        return False


NUMPY = NumpyBackend()
_torch_backend = None
_cupy_backend = None


def backend_of(x):
    """The backend of an array, by its type (cheap: no imports on the NumPy path)."""
    global _torch_backend, _cupy_backend
    if type(x) is np.ndarray:
        return NUMPY
    module = type(x).__module__
    if module.startswith("torch"):
        if _torch_backend is None:
            _torch_backend = TorchBackend()
        return _torch_backend
    if module.startswith("cupy"):
        if _cupy_backend is None:
            _cupy_backend = CupyBackend()
        return _cupy_backend
    if isinstance(x, np.ndarray):
        return NUMPY
    raise TypeError(f"lowbit takes NumPy arrays, torch tensors or CuPy arrays, got {type(x).__name__}")


def torch_backend() -> TorchBackend:
    global _torch_backend
    if _torch_backend is None:
        _torch_backend = TorchBackend()
    return _torch_backend

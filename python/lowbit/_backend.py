"""Which array library an input belongs to, and how to allocate like it.

Outputs are allocated with the caller's library (NumPy for NumPy inputs, torch for
torch tensors, CuPy for CuPy arrays) on the input's device, and handed to the C++
layer through DLPack, which writes into them in place. torch and CuPy are imported
only when an input comes from them.

Host cost per call (issue 6): each backend's `dl` gives the binding an argument in the
cheapest form nanobind's ndarray caster takes. For torch tensors that is the DLPack
capsule of torch.utils.dlpack.to_dlpack (a C function, ~0.3 us) instead of the tensor,
whose Python-level Tensor.__dlpack__ nanobind would otherwise call (3-4 us a tensor).
Both export the same memory without synchronizing (nanobind passes no stream, so
__dlpack__ uses its stream=-1 default); where __dlpack__ refuses (requires_grad, a
CUDA device that is not current) nanobind already fell back to to_dlpack.
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


class _PlainBackend:
    """What NumPy and CuPy share: no torch.compile, no capture test, arrays passed to the
    binding as they are (their __dlpack__ is a C method)."""

    @staticmethod
    def compiling() -> bool:
        return False

    @staticmethod
    def capturing() -> bool:
        return False

    @staticmethod
    def dl(x):
        return x

    @staticmethod
    def zero(x) -> None:
        x.fill(0)


class NumpyBackend(_PlainBackend):
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

class TorchBackend:
    name = "torch"

    def __init__(self):
        import torch
        from torch.utils.dlpack import to_dlpack

        self.torch = torch
        self.dtypes = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16,
                       "i8": torch.int8, "u8": torch.uint8, "i32": torch.int32}
        self.compiling = torch.compiler.is_compiling
        self._plain = (torch.Tensor, torch.nn.Parameter)  # types dl exports itself
        self._to_dlpack = to_dlpack
        # The raw cudaStream_t of a device's current stream and the capture test, as C
        # functions (what torch.cuda.current_stream(d).cuda_stream and
        # torch.cuda.is_current_stream_capturing() return, without their Python layers).
        self._raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        self._is_capturing = getattr(torch._C, "_cuda_isCurrentStreamCapturing", None)
        self._cuda_ready = False

    def empty(self, shape, dtype: str, like):
        # like.new_empty(*sizes): like's device without building a torch.device, and sizes
        # as arguments, which torch parses faster than a tuple (1.0 us a call on the CPU,
        # torch.empty(shape, device=like.device) 1.6 us).
        return like.new_empty(*shape, dtype=self.dtypes[dtype])

    def scalar(self, value: float, like):
        # A fill kernel, not a host-to-device copy: safe under CUDA graph capture.
        return like.new_full((1,), value, dtype=self.torch.float32)

    def stream(self, like) -> int:
        """The raw handle of the current CUDA stream of like's device (0 for CPU tensors)."""
        if not like.is_cuda:
            return 0
        if self._raw_stream is None:
            return self.torch.cuda.current_stream(like.device).cuda_stream
        if not self._cuda_ready:
            self.torch.cuda._lazy_init()  # what torch.cuda.current_stream does first
            self._cuda_ready = True
        return self._raw_stream(like.get_device())

    def capturing(self) -> bool:
        """Whether the current CUDA stream is capturing a graph."""
        if self._is_capturing is None:
            return self.torch.cuda.is_current_stream_capturing()
        return self._is_capturing()

    @staticmethod
    def is_cuda(like) -> bool:
        return like.is_cuda

    def dl(self, x):
        """x for the binding: a torch tensor (or nn.Parameter) as its DLPack capsule (see the
        module's docstring); anything else (None, other subclasses, other libraries' arrays)
        as it is."""
        if type(x) in self._plain:
            try:
                return self._to_dlpack(x)
            except Exception:  # noqa: BLE001  (nanobind reports what it cannot take)
                return x
        return x

    @staticmethod
    def zero(x) -> None:
        x.zero_()


class CupyBackend(_PlainBackend):
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


NUMPY = NumpyBackend()
_torch_backend = None
_cupy_backend = None


# The backend of each array type seen so far (one dict lookup a call).
_BACKEND_OF_TYPE = {np.ndarray: NUMPY}


def backend_of(x):
    """The backend of an array, by its type (cheap: no imports on the NumPy path)."""
    backend = _BACKEND_OF_TYPE.get(type(x))
    if backend is None:
        backend = _backend_of_new_type(x)
        _BACKEND_OF_TYPE[type(x)] = backend
    return backend


def _backend_of_new_type(x):
    global _torch_backend, _cupy_backend
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

"""Which array library an input belongs to, and how to allocate like it.

Outputs are allocated with the caller's library (NumPy for NumPy inputs, torch for
torch tensors, CuPy for CuPy arrays) on the input's device, and handed to the C++
layer through DLPack, which writes into them in place. torch and CuPy are imported
only when an input comes from them.

Host cost per call (issue 6): arrays go to the binding as they are, and its casters
(python/src/views.h) take a torch tensor through torch's DLPack C exchange API
(torch >= 2.11: a C function fills the description, tens of ns), or, for an older
torch, through torch.utils.dlpack.to_dlpack (a C function, registered by TorchBackend;
0.5-1 us a CUDA tensor more on the H100 host), instead of nanobind's own import, which
calls the Python-level Tensor.__dlpack__ (3-4 us). None of the paths synchronizes; where a fast path
refuses, nanobind's own import decides. TorchBackend also names torch.nn.Parameter to
the binding (it inherits the exchange API) and the types whose outputs may take it.
quantize_tensor on torch tensors and CuPy arrays hands its outputs (allocated here, so
contiguous and of known shapes) and the status word to _lowbit.quantize by address
(`address`; NumPy passes the arrays). Outputs are allocated here with torch (new_empty), not through the
exchange API's allocator: that costs the same (~2.3 us a CUDA output on the H100
host) and returns tensors wrapped around a DLPack deleter, whose record_stream does
nothing.

NaN/Inf status of GPU quantize (quant.py): one sticky status word per device, made by
`status_word` outside CUDA graph capture and kept for the process's life.
"""
from __future__ import annotations

import sys

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


# Bytes of a sticky NaN/Inf status word (lowbit::non_finite_status_bytes).
STATUS_BYTES = _lowbit.non_finite_status_bytes


class _PlainBackend:
    """What NumPy and CuPy share: no torch.compile, no capture test."""

    @staticmethod
    def compiling() -> bool:
        return False

    @staticmethod
    def capturing() -> bool:
        return False

    @staticmethod
    def zero(x) -> None:
        x.fill(0)


class NumpyBackend(_PlainBackend):
    name = "numpy"
    address = None  # arrays go to the binding as they are (see TorchBackend.address)

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

        self.torch = torch
        self.dtypes = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16,
                       "i8": torch.int8, "u8": torch.uint8, "i32": torch.int32}
        self.compiling = torch.compiler.is_compiling
        if not torch.compiler.is_compiling():  # Dynamo cannot trace the call (see _export_torch)
            _export_torch(torch)
        self.status_words = {}  # device index -> uint8 [STATUS_BYTES] tensor
        # The raw cudaStream_t of a device's current stream and the capture test, as C
        # functions (what torch.cuda.current_stream(d).cuda_stream and
        # torch.cuda.is_current_stream_capturing() return, without their Python layers).
        self._raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        self._is_capturing = getattr(torch._C, "_cuda_isCurrentStreamCapturing", None)
        self._cuda_ready = False
        self.address = torch.Tensor.data_ptr  # see the module's docstring
        self.status_addresses = {}  # device index -> data_ptr() of status_words[index]

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

    def status_word(self, like):
        """The sticky NaN/Inf status word of like's CUDA device; made (zeroed, and the
        zeroing waited for, so that any stream may use it) on first use, except while
        capturing a graph: then None until an eager call has made it."""
        index = like.get_device()
        word = self.status_words.get(index)
        if word is None:
            if self.capturing():
                return None
            word = like.new_zeros((STATUS_BYTES,), dtype=self.torch.uint8)
            self.torch.cuda.current_stream(index).synchronize()
            self.status_words[index] = word
        return word

    def stream_and_status(self, like):
        """(stream(like), the address of status_word(like) or 0 where that is None) of a
        CUDA tensor, its device looked up once."""
        index = like.get_device()
        status = self.status_addresses.get(index)
        if status is None:
            word = self.status_word(like)
            if word is None:
                return self.stream(like), 0
            status = self.status_addresses[index] = word.data_ptr()
        if self._raw_stream is None or not self._cuda_ready:
            return self.stream(like), status
        return self._raw_stream(index), status

    def status_words_of(self, device):
        """(index, word) of the status words on `device` (None: every device that has one;
        a CUDA device without one gets it)."""
        if device is None:
            return list(self.status_words.items())
        if type(device).__module__.startswith("cupy"):
            return []
        device = self.torch.device(device)
        if device.type != "cuda":
            return []
        word = self.status_word(self.torch.empty(0, device=device))
        return [] if word is None else [(word.get_device(), word)]

    def synchronize(self, index: int) -> None:
        self.torch.cuda.synchronize(index)

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
        self.status_words = {}  # device id -> uint8 [STATUS_BYTES] array

    @staticmethod
    def address(array) -> int:
        return array.data.ptr

    def stream_and_status(self, like):
        word = self.status_word(like)
        return self.stream(like), word.data.ptr

    def empty(self, shape, dtype: str, like):
        if dtype not in self.dtypes:
            raise _lowbit.LowbitError(f"{dtype}: CuPy has no such dtype; pass torch tensors for bfloat16")
        with like.device:
            return self.cupy.empty(shape, self.dtypes[dtype])

    def status_word(self, like):
        """TorchBackend.status_word for CuPy (no capture test: CuPy graphs are not handled)."""
        word = self.status_words.get(like.device.id)
        if word is None:
            with like.device:
                word = self.cupy.zeros((STATUS_BYTES,), self.cupy.uint8)
                like.device.synchronize()
            self.status_words[like.device.id] = word
        return word

    def status_words_of(self, device):
        if device is None:
            return list(self.status_words.items())
        index = getattr(device, "id", device)
        word = self.status_words.get(index) if isinstance(index, int) else None
        return [] if word is None else [(index, word)]

    def synchronize(self, index: int) -> None:
        self.cupy.cuda.Device(index).synchronize()

    def scalar(self, value: float, like):
        with like.device:
            return self.cupy.full((1,), value, self.cupy.float32)

    def stream(self, like) -> int:
        with like.device:
            return self.cupy.cuda.get_current_stream().ptr

    @staticmethod
    def is_cuda(like) -> bool:
        return True


def _export_torch(torch) -> None:
    """Names torch's tensor types and to_dlpack to the binding (see the module's
    docstring). Done when lowbit is imported after torch, else when the TorchBackend is
    made, unless that happens while torch.compile traces: until then torch.Tensor inputs
    still take the exchange API, outputs and Parameters nanobind's __dlpack__ path (the
    same result, ~3 us a tensor slower)."""
    from torch.utils.dlpack import to_dlpack

    _lowbit._set_torch_export(torch.Tensor, torch.nn.Parameter, to_dlpack)


if hasattr(sys.modules.get("torch"), "nn"):  # torch imported (fully) before lowbit
    _export_torch(sys.modules["torch"])

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


def gpu_backends():
    """The torch and CuPy backends made so far (the ones that may hold status words)."""
    return [b for b in (_torch_backend, _cupy_backend) if b is not None]


def torch_backend() -> TorchBackend:
    global _torch_backend
    if _torch_backend is None:
        _torch_backend = TorchBackend()
    return _torch_backend

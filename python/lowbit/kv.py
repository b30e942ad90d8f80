"""One layer's decode KV cache in lowbit's device layout (src/cuda/engine/kv_cache_gpu.h):
append a token's keys and values, run the newest query's attention over what the policy
keeps. On CUDA tensors this is the engine's kv_append / decode_attention kernels on the
caller's current stream; on NumPy arrays (or CPU torch tensors) their CPU twin, which
holds the same bytes: codes with f16 scales and mins (quantize_tensor's per-token scheme,
its f32 scale and min rounded to f16 and the codes encoded with the rounded values).

    cache = LayerKVCache("selective", kv_heads=2, head_dim=64, max_tokens=4096, sink=16,
                         window=32, kv_bits=8, device="cuda")
    for k, v, q in tokens:               # f16 [kv_heads, head_dim], RoPE applied; q [n_heads, head_dim]
        cache.append(k, v)
        out = cache.attention(q)         # f32 [n_heads, head_dim] (out_dtype="float16" for f16)
    k, v = cache.read()                  # f16 [visible, kv_heads, head_dim]: what that query read
    cache.nbytes                         # bytes of its buffers (FP16 slots, codes, scales, mins)

Policies (the engine's): "full" (every token FP16), "window" (sink + the last `window`
tokens FP16, older ones dropped), "selective" (sink + window FP16; a token leaving the
window is quantized from its FP16 value to INT8 or INT4 and kept), "int8" / "int4" (every
token quantized on arrival). INT8 is symmetric, INT4 asymmetric (scale + min), one f16
scale (+ f16 min) per token per KV head. head_dim is 64 or 128; n_heads a multiple of kv_heads (GQA).

torch: append, attention and read are torch custom ops (torch.ops.lowbit.kv_append /
kv_attention / kv_read, registered by lowbit.torch_ops) and trace under torch.compile. They take
the position from the host (`length`), so a CUDA graph that captures them replays the
captured position. For one graph that serves every decode step, keep the position on the
device and use the `_at` forms (torch.ops.lowbit.kv_append_at / kv_attention_at):

    pos = torch.zeros(1, dtype=torch.int32, device="cuda")   # the new token's position
    with torch.cuda.graph(graph):
        cache.append_at(k, v, pos)
        out = cache.attention_at(q, pos)
        pos += 1
    # each graph.replay() is one decode step (the caller keeps pos < cache.max_length)
"""
from __future__ import annotations

from . import _checks, _lowbit
from ._backend import NUMPY, backend_of, dtype_name, torch_backend
from ._ops.kv import kv_attention_with, kv_layer, kv_read_with

LowbitError = _lowbit.LowbitError

POLICIES = ("full", "window", "selective", "int8", "int4")
_PARTS = ("f16", "codes", "scales", "mins")


class LayerKVCache:
    """One layer's KV cache for decode (one sequence). See the module's docstring.

    device: None or "numpy" for NumPy buffers (the CPU path); a torch device ("cpu",
    "cuda", "cuda:1", torch.device) for torch tensors on it. Inputs must be on the same
    device as the buffers; outputs are new arrays of the query's library.
    """

    def __init__(self, policy: str = "selective", kv_heads: int = 1, head_dim: int = 128, max_tokens: int = 4096,
                 sink: int = 16, window: int = 32, kv_bits: int = 8, device=None):
        self.policy = policy
        try:
            self.kv_heads, self.head_dim, self.max_tokens = int(kv_heads), int(head_dim), int(max_tokens)
            self.sink, self.window, self.kv_bits = int(sink), int(window), int(kv_bits)
            layout = _lowbit.kv_layout(policy, self.kv_heads, self.head_dim, self.sink, self.window, self.kv_bits,
                                       self.max_tokens)
        except _checks.ARGUMENT_ERRORS as error:
            _checks.explain(error, ints={"kv_heads": kv_heads, "head_dim": head_dim, "max_tokens": max_tokens,
                                         "sink": sink, "window": window, "kv_bits": kv_bits})
            raise
        self.layout = layout
        self.capacity = layout["capacity"]  # -1: the window policy's ring takes any number of tokens
        self.nbytes = layout["nbytes"]
        if device is None or device == "numpy":
            backend, like = NUMPY, None
        else:
            backend = torch_backend()
            like = backend.torch.empty(0, device=backend.torch.device(device))
        self._backend = backend
        shapes = {"f16": layout["f16"], "codes": layout["codes"], "scales": layout["params"],
                  "mins": layout["mins"]}
        dtypes = {"f16": "f16", "codes": layout["code_dtype"], "scales": layout["param_dtype"],
                  "mins": layout["param_dtype"]}
        # k_f16, k_codes, k_scales, k_mins, v_f16, ...: parts the policy lacks are empty.
        self.buffers = {f"{kv}_{part}": _zeros(backend, shapes[part], dtypes[part], like)
                        for kv in "kv" for part in _PARTS}
        self._layer = kv_layer(policy, self._spec(), self.buffers.values())
        self.length = 0
        # Eager CUDA attention's workspaces by (form, stream, n_heads), sized for any length:
        # one allocation (and, for the _at form, one zeroing) instead of one a call. Reuse
        # within a stream is ordered; graph capture allocates its own (see _workspace).
        self._workspaces = {}

    @property
    def device(self):
        first = self.buffers["k_scales"]
        return getattr(first, "device", "numpy")

    def _spec(self):
        return [self.kv_heads, self.head_dim, self.sink, self.window, self.kv_bits, self.max_tokens]

    def append(self, k, v) -> None:
        """Appends one token: k, v f16 [kv_heads, head_dim] (RoPE applied), on the cache's device."""
        if self.capacity >= 0 and self.length >= self.capacity:
            raise LowbitError(f"kv_append: the cache is full ({self.capacity} tokens); reset() it or make "
                              f"max_tokens larger")
        try:
            backend = backend_of(k)
            if backend.compiling():
                from . import torch_ops  # noqa: F401  (registers torch.ops.lowbit)

                backend.torch.ops.lowbit.kv_append(*self.buffers.values(), k, v, self.policy, self._spec(),
                                                   self.length)
            else:
                self._layer.append(k, v, self.length, backend.stream(k))
        except _checks.ARGUMENT_ERRORS as error:
            _checks.explain(error, arrays={"k": k, "v": v})
            raise
        self.length += 1

    def attention(self, q, out_dtype="float32"):
        """softmax(q K^T / sqrt(head_dim)) V over what the newest token's query sees, as a new
        [n_heads, head_dim] array of out_dtype (float32 or float16); q f16 [n_heads, head_dim]."""
        try:
            backend = backend_of(q)
            out_name = dtype_name(out_dtype)
            if backend.compiling():
                from . import torch_ops  # noqa: F401

                return backend.torch.ops.lowbit.kv_attention(*self.buffers.values(), q, self.policy, self._spec(),
                                                             self.length, out_name)
            return kv_attention_with(backend, self._layer, q, self.length, out_name, self.head_dim,
                                     workspaces=self._workspaces, max_length=self.max_length)
        except _checks.ARGUMENT_ERRORS as error:
            _checks.explain(error, arrays={"q": q})
            raise

    @property
    def max_length(self) -> int:
        """Positions the `_at` forms may address: the capacity (window policy: max_tokens)."""
        return self.capacity if self.capacity >= 0 else self.max_tokens

    def append_at(self, k, v, pos) -> None:
        """append() at the position held by pos (an int32 [1] array on the cache's device),
        read when the work runs, so that a CUDA graph can replay it at every step. The caller
        owns the position (keeping pos < max_length, which the GPU cannot check); `length`
        is left alone."""
        try:
            backend = backend_of(k)
            if backend.compiling():
                from . import torch_ops  # noqa: F401

                backend.torch.ops.lowbit.kv_append_at(*self.buffers.values(), k, v, pos, self.policy, self._spec())
            else:
                self._layer.append_at(k, v, pos, backend.stream(k))
        except _checks.ARGUMENT_ERRORS as error:
            _checks.explain(error, arrays={"k": k, "v": v, "pos": pos})
            raise

    def attention_at(self, q, pos, out_dtype="float32"):
        """attention() of the query at the position held by pos (int32 [1] on the cache's
        device): over positions 0..*pos, in the forms the policy keeps then."""
        try:
            backend = backend_of(q)
            out_name = dtype_name(out_dtype)
            if backend.compiling():
                from . import torch_ops  # noqa: F401

                return backend.torch.ops.lowbit.kv_attention_at(*self.buffers.values(), q, pos, self.policy,
                                                                self._spec(), out_name)
            return kv_attention_with(backend, self._layer, q, None, out_name, self.head_dim, pos, self.max_length,
                                     self._workspaces)
        except _checks.ARGUMENT_ERRORS as error:
            _checks.explain(error, arrays={"q": q, "pos": pos})
            raise

    def read(self):
        """(k, v): the values the newest query reads, as new f16 [visible, kv_heads, head_dim]
        arrays of the cache's library on its device, in position order: FP16 tokens as held,
        quantized ones dequantized (q * scale, or q * scale + min for INT4, rounded once to
        f16); the window policy skips the dropped middle (visible = sink + window once full).
        CUDA work runs on the current stream. Needs at least one token."""
        if self.length < 1:
            raise LowbitError("kv_read: the cache is empty (length 0); append a token first")
        like = self.buffers["k_scales"]
        backend = self._backend
        if backend.compiling():
            from . import torch_ops  # noqa: F401  (registers torch.ops.lowbit)

            return backend.torch.ops.lowbit.kv_read(*self.buffers.values(), self.policy, self._spec(), self.length)
        return kv_read_with(backend, self._layer, self.policy, self._spec(), self.length, like)

    def reset(self) -> None:
        """Forgets every token (the buffers are overwritten by the next appends)."""
        self.length = 0

    def __repr__(self):
        return (f"LayerKVCache({self.policy!r}, kv_heads={self.kv_heads}, head_dim={self.head_dim}, "
                f"max_tokens={self.max_tokens}, sink={self.sink}, window={self.window}, kv_bits={self.kv_bits}, "
                f"length={self.length}, nbytes={self.nbytes})")


def _zeros(backend, shape, dtype, like):
    x = backend.empty(tuple(shape), dtype, like)
    x[...] = 0
    return x

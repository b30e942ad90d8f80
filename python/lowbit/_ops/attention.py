"""Quantized-weight prefill attention for a known backend."""
from __future__ import annotations

from .. import _checks, _lowbit
from .._backend import dtype_name


def quantized_attention_with(backend, x, q, k, v, bq, bk, bv, heads, kv_heads, head_dim, causal, fmt, variant):
    """quantized_attention for a known backend, the weights as (codes, scales, global_scale)
    (also the torch custom op's implementation)."""
    seq_len, d_model = int(x.shape[0]), int(x.shape[1])
    # Checks the configuration (heads x head_dim among it) before out is allocated from it.
    nbytes = _lowbit.attention_workspace_bytes(seq_len, d_model, heads, kv_heads, head_dim, causal, fmt, variant)
    if seq_len * heads * head_dim >= _checks.LARGE_OUTPUT:
        _checks.check_inputs((x, "x"))
    out = backend.empty((seq_len, heads * head_dim), "f16", x)
    workspace, stream = None, 0
    if backend.is_cuda(x):
        stream = backend.stream(x)
        workspace = backend.empty((nbytes,), "u8", x) if nbytes else None
    _lowbit.quantized_attention(x, *q, *k, *v, bq, bk, bv, heads, kv_heads, head_dim, causal, fmt, variant, out,
                                workspace, stream)
    return out


def flash_attention_with(backend, q, k, v, cu_q, cu_k, causal, scale):
    """flash_attention for a known backend: out like q, the workspace, the stream."""
    out = backend.empty(tuple(int(n) for n in q.shape), dtype_name(q.dtype), q)
    workspace, stream = None, 0
    if backend.is_cuda(q):
        stream = backend.stream(q)
        nbytes = _lowbit.flash_attention_workspace_bytes(len(cu_q) - 1)
        workspace = backend.empty((nbytes,), "u8", q)
    _lowbit.flash_attention(q, k, v, out, cu_q, cu_k, causal, scale, workspace, stream)
    return out

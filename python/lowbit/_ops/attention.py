"""Quantized-weight prefill attention for a known backend."""
from __future__ import annotations

from .. import _checks, _lowbit


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

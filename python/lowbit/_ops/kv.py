"""One layer's decode KV cache (lowbit.LayerKVCache) for a known backend: the attention
call and its CUDA workspaces, and reading the held values back."""
from __future__ import annotations

from .. import _lowbit

LowbitError = _lowbit.LowbitError


def kv_layer(policy, spec, buffers):
    """The extension's KvLayer over buffers (k_f16, k_codes, k_scales, k_mins, v_f16, ...),
    spec = [kv_heads, head_dim, sink, window, kv_bits, max_tokens]."""
    return _lowbit.KvLayer(policy, *spec, *buffers)


def kv_read_with(backend, layer, policy, spec, length, like):
    """LayerKVCache.read for a known backend (also the torch custom op's implementation):
    new f16 [visible, kv_heads, head_dim] arrays k, v like `like` (one of the cache's
    buffers), filled on its current stream."""
    visible = _lowbit.kv_visible_count(policy, *spec, length)
    shape = (visible, spec[0], spec[1])
    k, v = backend.empty(shape, "f16", like), backend.empty(shape, "f16", like)
    layer.read(k, v, length, backend.stream(like))
    return k, v


def kv_attention_with(backend, layer, q, length, out_name, head_dim, pos=None, max_length=0, workspaces=None):
    """LayerKVCache.attention (pos None) or attention_at (pos an int32 [1] array) for a known
    backend (also the torch custom ops' implementation). workspaces: the cache's dict of eager
    CUDA workspaces (None: allocate one for this call)."""
    shape = q.shape
    if len(shape) != 2:
        raise LowbitError(f"q: expected a rank-2 tensor [n_heads, head_dim], got rank {len(shape)}")
    n_heads = shape[0]
    out = backend.empty((n_heads, head_dim), out_name, q)
    if not backend.is_cuda(q):
        if pos is None:
            layer.attention(q, out, length, None, 0)
        else:
            layer.attention_at(q, out, pos, max_length, None, 0)
        return out
    stream = backend.stream(q)
    workspace = _workspace(backend, layer, q, n_heads, stream, length, pos is not None, max_length, workspaces)
    if pos is None:
        layer.attention(q, out, length, workspace, stream)
    else:
        layer.attention_at(q, out, pos, max_length, workspace, stream)
    return out


def _workspace(backend, layer, q, n_heads, stream, length, at, max_length, workspaces):
    """The CUDA workspace of one attention call. Eager calls share the cache's, one per
    (form, stream, n_heads), sized for any length up to max_length; a call being captured
    into a CUDA graph gets its own (a captured pointer must not be shared with eager calls
    on other streams). The _at form's is zeroed when made (its split counters start at
    zero and each call leaves them so)."""
    shared = workspaces is not None and (at or length <= max_length) and not backend.capturing()
    key = (at, stream, n_heads)
    if shared:
        workspace = workspaces.get(key)
        if workspace is not None:
            return workspace
    device = _device_index(q)
    if at or shared:
        nbytes = layer.workspace_bytes_at(n_heads, max_length, True, device)  # enough for any length
    else:
        nbytes = layer.workspace_bytes(length, n_heads, True, device)
    workspace = backend.empty((nbytes,), "u8", q) if nbytes else None
    if workspace is not None and at:
        backend.zero(workspace)  # a fill kernel on the stream
    if shared:
        workspaces[key] = workspace
    return workspace


def _device_index(x) -> int:
    device = x.device
    index = getattr(device, "index", None)  # torch
    if index is None:
        index = getattr(device, "id", 0)  # CuPy
    return int(index or 0)

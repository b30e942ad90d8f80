"""quantized_attention: lowbit::quantized_attention (include/lowbit/quantized_attention.h),
the prefill attention whose Q, K, V projection weights are stored in a block format; and
flash_attention (include/lowbit/flash_attention.h), attention over f16 / bf16 Q, K, V for
a batch of sequences of different lengths."""
from __future__ import annotations

from typing import Optional

from . import _checks, _lowbit
from ._backend import backend_of
from ._ops.attention import flash_attention_with, quantized_attention_with
from .block_formats import BlockWeights

LowbitError = _lowbit.LowbitError

VARIANTS = ("naive_sequential", "tiled_sequential", "tiled_fused", "fused_two_kernel")


def _parts(w, what: str, fmt: Optional[str]):
    """(codes, scales, global_scale, fmt) of a BlockWeights or a (codes, scales, global_scale) tuple."""
    if isinstance(w, BlockWeights):
        if fmt is not None and w.fmt != fmt:
            raise LowbitError(f"{what}: encoded as {w.fmt}, but the other weights are {fmt}")
        return w.codes, w.scales, w.global_scale, w.fmt
    if len(w) != 3:
        raise LowbitError(f"{what}: expected a BlockWeights or a (codes, scales, global_scale) tuple")
    if fmt is None:
        raise LowbitError(f"{what}: a plain tuple needs fmt= (or pass the BlockWeights from block_encode)")
    return (*w, fmt)


def quantized_attention(x, wq, wk, wv, heads: int, kv_heads: int, head_dim: int, causal: bool = False, bq=None,
                        bk=None, bv=None, variant: str = "fused_two_kernel", fmt: Optional[str] = None):
    """O = attention(X Wq^T + bq, X Wk^T + bk, X Wv^T + bv) as a new f16 [L, heads * head_dim].

    x: f16 [L, d_model]. wq [heads * head_dim, d_model], wk and wv [kv_heads * head_dim, d_model]:
    what block_encode returns (BlockWeights, all in one format), or (codes, scales, global_scale)
    tuples with fmt= naming the format. bq, bk, bv: optional f16 vectors. head_dim 64 or 128;
    kv_heads < heads is grouped-query attention. variant picks the GPU pipeline
    (naive_sequential, tiled_sequential, tiled_fused, fused_two_kernel); CPU inputs run the
    CPU reference whatever it is. CUDA work runs on the current stream.
    """
    try:
        backend = backend_of(x)
        if len(x.shape) != 2:
            raise LowbitError(f"x: expected a rank-2 tensor [L, d_model], got rank {len(x.shape)}")
        q = _parts(wq, "wq", fmt)
        k = _parts(wk, "wk", q[3])
        v = _parts(wv, "wv", q[3])
        fmt = q[3]
        if backend.compiling():
            from . import torch_ops  # noqa: F401  (registers torch.ops.lowbit)

            return backend.torch.ops.lowbit.quantized_attention(x, *q[:3], *k[:3], *v[:3], bq, bk, bv, heads, kv_heads,
                                                                head_dim, causal, fmt, variant)
        return quantized_attention_with(backend, x, q[:3], k[:3], v[:3], bq, bk, bv, heads, kv_heads, head_dim, causal,
                                        fmt, variant)
    except _checks.ARGUMENT_ERRORS as error:
        _checks.explain(error, arrays={"x": x, "bq": bq, "bk": bk, "bv": bv},
                        ints={"heads": heads, "kv_heads": kv_heads, "head_dim": head_dim})
        raise


def _prefix_sums(sums, total: int):
    """The prefix sums as a list of ints: [0, total] for None (one sequence), else the given
    ones (a list, or a NumPy / torch integer vector: copied to the host once)."""
    if sums is None:
        return [0, total]
    if hasattr(sums, "tolist"):
        sums = sums.tolist()
    return [int(n) for n in sums]


def flash_attention(q, k, v, causal: bool = True, cu_seqlens_q=None, cu_seqlens_k=None, scale: Optional[float] = None):
    """softmax(scale q k^T (+ causal mask)) v as a new tensor like q.

    q: [total_q, heads, head_dim], k and v: [total_k, kv_heads, head_dim] (heads a multiple
    of kv_heads), all float16 or all bfloat16 (torch for bfloat16), head_dim 64 or 128,
    heads and channels contiguous. cu_seqlens_q / cu_seqlens_k (ints, from 0) cut the rows
    into a batch of sequences, as flash_attn_varlen_func's; None: one sequence. Causal:
    a sequence's queries are the last of its keys' positions (chunked prefill when there
    are fewer queries than keys). scale: 1 / sqrt(head_dim) by default. CUDA work runs on
    the current stream.
    """
    try:
        backend = backend_of(q)
        cu_q = _prefix_sums(cu_seqlens_q, int(q.shape[0]))
        cu_k = _prefix_sums(cu_seqlens_k, int(k.shape[0]))
        return flash_attention_with(backend, q, k, v, cu_q, cu_k, causal, 0.0 if scale is None else float(scale))
    except _checks.ARGUMENT_ERRORS as error:
        _checks.explain(error, arrays={"q": q, "k": k, "v": v})
        raise

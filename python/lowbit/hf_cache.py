"""A Hugging Face transformers cache over lowbit's decode KV cache op: one
lowbit.LayerKVCache with the `selective` policy per decoder layer and batch row. The
first `sink` tokens and the last `window` tokens stay in FP16; a token leaving the window
is quantized (INT8, or INT4 with a min) and kept; attention gets back what
LayerKVCache.read() gives, the values the engine's decode attention reads.

    cache = LowbitQuantizedCache(model.config, sink=4, window=32, scheme="int8")
    model.generate(input_ids, past_key_values=cache, max_new_tokens=64)
    cache.kv_bytes()   # bytes of the op's buffers that hold the tokens

What an update returns: a one-token update (decode) gets exactly what that token's query
reads from the op. An update of several tokens (prefill) gets the tokens cached before it
as its first query reads them, and its own tokens rounded to FP16 as their slots hold
them: no query sees a token in a coarser form than one-at-a-time decoding would give it
(HF attends with one set of keys for all the update's queries).

What the op keeps, and so what this cache offers:
- scheme "int8" (symmetric) or "int4" (asymmetric: scale and min), one f16 scale (and
  min) per token and KV head. Other schemes ("int8_asym", "int4_sym") raise ValueError.
- granularity "token" only: key_granularity / value_granularity "channel" (one scale per
  channel over a block of tokens) has no form in the op and raises ValueError naming it.
- head_dim 64 or 128 (the op's kernels; another raises LowbitError at the first update).
- keys and values are held in FP16 whatever the model's dtype (bfloat16 values beyond
  FP16's range become inf) and handed back in the model's dtype.
- max_tokens positions per layer and row, allocated at the first update: by default the
  model's max_position_embeddings (4096 without a config).
CUDA tensors run the op's kernels on the current stream (no synchronization), CPU
tensors its CPU twin. Needs transformers (>= 4.56: the layered Cache API) and torch.
"""
from __future__ import annotations

import torch
from transformers.cache_utils import Cache, DynamicLayer

from .kv import LayerKVCache

SCHEME_BITS = {"int8": 8, "int4": 4}  # the op's INT8 symmetric and INT4 asymmetric bodies
DEFAULT_MAX_TOKENS = 4096


def _check_options(sink, window, scheme, key_granularity, value_granularity):
    if sink < 0 or window < 1:
        raise ValueError(f"sink must be >= 0 and window >= 1, got sink={sink}, window={window}")
    if scheme not in SCHEME_BITS:
        raise ValueError(f"scheme: expected 'int8' or 'int4' (the KV cache op's INT8 symmetric and INT4 asymmetric "
                         f"forms), got {scheme!r}")
    for name, granularity in (("key_granularity", key_granularity), ("value_granularity", value_granularity)):
        if granularity != "token":
            raise ValueError(f"{name}: expected 'token', got {granularity!r}: lowbit's KV cache op keeps one scale "
                             f"(and min) per token and KV head, and has no per-channel form")


class LowbitQuantizedLayer(DynamicLayer):
    """One decoder layer's cache: a LayerKVCache("selective") per batch row, made at the
    first update. self.keys / self.values stay empty [batch, kv_heads, 0, head_dim]
    tensors (the tokens live in the op's buffers)."""

    def __init__(self, sink: int = 4, window: int = 32, scheme: str = "int8", key_granularity: str = "token",
                 value_granularity: str = "token", max_tokens: int = DEFAULT_MAX_TOKENS):
        super().__init__()
        _check_options(sink, window, scheme, key_granularity, value_granularity)
        self.sink, self.window, self.scheme = sink, window, scheme
        self.key_granularity, self.value_granularity = key_granularity, value_granularity
        self.max_tokens = int(max_tokens)
        self.cumulative_length = 0
        self.rows: list[LayerKVCache] = []

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor | None = None, *args,
                            **kwargs) -> None:
        batch, kv_heads, _, head_dim = key_states.shape
        self.dtype, self.device = key_states.dtype, key_states.device
        self.keys = key_states.new_empty((batch, kv_heads, 0, head_dim))
        self.values = self.keys.clone()
        self.rows = [LayerKVCache("selective", kv_heads, head_dim, self.max_tokens, self.sink, self.window,
                                  SCHEME_BITS[self.scheme], device=key_states.device) for _ in range(batch)]
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """Appends the new tokens ([batch, kv_heads, tokens, head_dim]) and returns the keys
        and values attention reads, [batch, kv_heads, all tokens, head_dim] in the model's
        dtype (see the module's docstring)."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        batch, _, tokens, _ = key_states.shape
        if batch != len(self.rows):
            raise ValueError(f"key_states: batch {batch}, but this cache holds {len(self.rows)} rows; reset() it "
                             f"for a new batch")
        if self.cumulative_length + tokens > self.max_tokens:
            raise ValueError(f"LowbitQuantizedCache: {self.cumulative_length + tokens} tokens exceed max_tokens="
                             f"{self.max_tokens}; pass a larger max_tokens")
        # [batch, tokens, kv_heads, head_dim] in FP16: each [b, t] is one token as the op takes it.
        new_k = key_states.transpose(1, 2).to(torch.float16).contiguous()
        new_v = value_states.transpose(1, 2).to(torch.float16).contiguous()
        keys, values = [], []
        for row, k, v in zip(self.rows, new_k, new_v):
            row.append(k[0], v[0])
            held_k, held_v = row.read()  # what the first new token's query reads
            for t in range(1, tokens):
                row.append(k[t], v[t])
            keys.append(torch.cat([held_k, k[1:]]))
            values.append(torch.cat([held_v, v[1:]]))
        self.cumulative_length += tokens
        keys = torch.stack(keys).transpose(1, 2).to(key_states.dtype)
        values = torch.stack(values).transpose(1, 2).to(value_states.dtype)
        return keys, values

    def get_seq_length(self) -> int:
        return self.cumulative_length

    def get_max_cache_shape(self) -> int:
        return -1

    def _held_tokens(self):
        """(FP16 tokens, quantized tokens) of each row: the selective policy keeps every
        token, those beyond its FP16 slots (sink + window) quantized."""
        f16_slots = self.rows[0].layout["f16"][1] if self.rows else 0
        f16 = min(self.cumulative_length, f16_slots)
        return f16, self.cumulative_length - f16

    def quantized_tokens(self) -> int:
        return self._held_tokens()[1]

    def kv_bytes(self) -> int:
        """Bytes of the op's buffers that hold this layer's tokens, K and V, every row: the
        FP16 slots in use, and the codes, scales and mins of the quantized tokens."""
        if not self.rows:
            return 0
        f16, quantized = self._held_tokens()
        buffers = self.rows[0].buffers
        held = 0
        for part in "kv":
            slots = buffers[f"{part}_f16"]
            body = [buffers[f"{part}_{name}"] for name in ("codes", "scales", "mins")]
            held += f16 * slots.nbytes // slots.shape[1]
            if quantized:
                held += quantized * sum(b.nbytes for b in body) // body[0].shape[0]
        return held * len(self.rows)

    def allocated_bytes(self) -> int:
        """Bytes of the op's buffers allocated for max_tokens, every row."""
        return sum(row.nbytes for row in self.rows)

    def full_precision_bytes(self) -> int:
        """What a cache of the same tokens in the model's dtype would hold."""
        if not self.is_initialized:
            return 0
        batch, kv_heads, _, head_dim = self.keys.shape
        return 2 * self.cumulative_length * batch * kv_heads * head_dim * self.keys.element_size()

    def reset(self) -> None:
        """Forgets every token and the batch: the next update makes the rows anew."""
        self.cumulative_length = 0
        self.rows = []
        self.keys = self.values = None
        self.is_initialized = False

    def _unsupported(self, *args, **kwargs):
        raise NotImplementedError("LowbitQuantizedLayer supports generation (greedy or sampled, batch as given); "
                                  "cropping, beam search and batch reshuffles are not implemented")

    crop = reorder_cache = batch_repeat_interleave = batch_select_indices = _unsupported
    offload = prefetch = _unsupported


class LowbitQuantizedCache(Cache):
    """transformers Cache with one LowbitQuantizedLayer per decoder layer (see the module's
    docstring). max_tokens: positions each layer holds per batch row (default: the config's
    max_position_embeddings, else 4096)."""

    def __init__(self, config=None, num_layers: int | None = None, sink: int = 4, window: int = 32,
                 scheme: str = "int8", key_granularity: str = "token", value_granularity: str = "token",
                 max_tokens: int | None = None):
        text = None
        if config is not None:
            text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
        if num_layers is None:
            if text is None:
                raise ValueError("pass the model's config (or num_layers)")
            num_layers = text.num_hidden_layers
        if max_tokens is None:
            max_tokens = getattr(text, "max_position_embeddings", None) or DEFAULT_MAX_TOKENS
        layers = [LowbitQuantizedLayer(sink, window, scheme, key_granularity, value_granularity, max_tokens)
                  for _ in range(num_layers)]
        super().__init__(layers=layers)

    def kv_bytes(self) -> int:
        """Bytes of the op's buffers that hold the tokens, over all layers (scales and mins included)."""
        return sum(layer.kv_bytes() for layer in self.layers)

    def allocated_bytes(self) -> int:
        """Bytes of the op's buffers allocated (max_tokens positions per layer and row)."""
        return sum(layer.allocated_bytes() for layer in self.layers)

    def full_precision_bytes(self) -> int:
        """Bytes a cache of the same tokens in the model's dtype would hold."""
        return sum(layer.full_precision_bytes() for layer in self.layers)

    def quantized_tokens(self, layer_idx: int = 0) -> int:
        return self.layers[layer_idx].quantized_tokens() if layer_idx < len(self.layers) else 0

"""A Hugging Face transformers cache that keeps keys and values in lowbit's formats:
the first `sink` tokens and the last `window` tokens in full precision, the tokens in
between quantized (the engine's `selective` policy), dequantized on read.

    cache = LowbitQuantizedCache(model.config, sink=4, window=32, scheme="int8")
    model.generate(input_ids, past_key_values=cache, max_new_tokens=64)
    cache.kv_bytes()   # bytes held, scales and mins included

Granularity "token" quantizes each token as it leaves the window (one scale per token
and head). Granularity "channel" (keys, as KIVI does) waits until `window` more tokens
have left and quantizes them as one block with a scale per channel and head.
Needs transformers (>= 4.56: the layered Cache API) and torch. On CUDA the quantization
does not synchronize: NaN/Inf in keys or values is raised by lowbit.check_quantize_status().
"""
from __future__ import annotations

import torch
from transformers.cache_utils import Cache, DynamicLayer

from .quant import dequantize_tensor, quantize_tensor, scheme_info


class _QuantizedRun:
    """The quantized tokens of one tensor ([batch, heads, tokens, dim]) of a layer."""

    def __init__(self, scheme: str, granularity: str):
        if granularity not in ("token", "channel"):
            raise ValueError(f"granularity: expected 'token' or 'channel', got {granularity!r}")
        scheme_info(scheme)  # raises LowbitError for an unknown scheme
        self.scheme, self.granularity = scheme, granularity
        self.blocks = []  # channel: one (codes, scales, mins, shape) per block
        self.codes = self.scales = self.mins = None  # token: [B, H, T, code_cols], [B, H, T]
        self.tokens = 0

    def append(self, x: torch.Tensor) -> None:
        b, h, t, d = x.shape
        if self.granularity == "token":
            codes, scales, mins = quantize_tensor(x.reshape(b * h * t, d).contiguous(), self.scheme, "token")
            codes, scales = codes.view(b, h, t, -1), scales.view(b, h, t)
            mins = None if mins is None else mins.view(b, h, t)
            if self.codes is None:
                self.codes, self.scales, self.mins = codes, scales, mins
            else:
                self.codes = torch.cat([self.codes, codes], dim=2)
                self.scales = torch.cat([self.scales, scales], dim=2)
                self.mins = None if mins is None else torch.cat([self.mins, mins], dim=2)
        else:
            # Tokens are rows, (batch, head, dim) the channels: one scale per channel over the block.
            rows = x.permute(2, 0, 1, 3).reshape(t, b * h * d).contiguous()
            codes, scales, mins = quantize_tensor(rows, self.scheme, "channel")
            self.blocks.append((codes, scales, mins, (b, h, t, d)))
        self.tokens += t

    def read(self, dtype: torch.dtype, dim: int) -> torch.Tensor | None:
        if self.tokens == 0:
            return None
        if self.granularity == "token":
            b, h, t = self.scales.shape
            flat = dequantize_tensor(self.codes.reshape(b * h * t, -1), self.scales.reshape(-1),
                                     None if self.mins is None else self.mins.reshape(-1), self.scheme, "token",
                                     dtype=dtype, cols=dim)
            return flat.view(b, h, t, dim)
        parts = []
        for codes, scales, mins, (b, h, t, d) in self.blocks:
            rows = dequantize_tensor(codes, scales, mins, self.scheme, "channel", dtype=dtype)
            parts.append(rows.view(t, b, h, d).permute(1, 2, 0, 3))
        return torch.cat(parts, dim=2)

    def nbytes(self) -> int:
        tensors = [self.codes, self.scales, self.mins] + [x for blk in self.blocks for x in blk[:3]]
        return sum(x.numel() * x.element_size() for x in tensors if x is not None)


def _nbytes(x: torch.Tensor | None) -> int:
    return 0 if x is None else x.numel() * x.element_size()


class LowbitQuantizedLayer(DynamicLayer):
    """One decoder layer's cache: sink and window in full precision (self.keys / self.values hold the
    window), the body quantized."""

    def __init__(self, sink: int = 4, window: int = 32, scheme: str = "int8", key_granularity: str = "token",
                 value_granularity: str = "token"):
        super().__init__()
        if sink < 0 or window < 1:
            raise ValueError(f"sink must be >= 0 and window >= 1, got sink={sink}, window={window}")
        self.sink, self.window, self.scheme = sink, window, scheme
        self.key_granularity, self.value_granularity = key_granularity, value_granularity
        self.cumulative_length = 0
        self._reset_storage()

    def _reset_storage(self):
        self.sink_keys = self.sink_values = None
        self.body_keys = _QuantizedRun(self.scheme, self.key_granularity)
        self.body_values = _QuantizedRun(self.scheme, self.value_granularity)

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor | None = None, *args,
                            **kwargs) -> None:
        value_states = key_states if value_states is None else value_states
        self.dtype, self.device = key_states.dtype, key_states.device
        self.keys = key_states.new_empty((*key_states.shape[:-2], 0, key_states.shape[-1]))
        self.values = value_states.new_empty((*value_states.shape[:-2], 0, value_states.shape[-1]))
        self.sink_keys, self.sink_values = self.keys, self.values
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        self.cumulative_length += key_states.shape[-2]

        # What attention reads: sink, dequantized body, window, new tokens (in sequence order).
        body_k = self.body_keys.read(key_states.dtype, key_states.shape[-1])
        body_v = self.body_values.read(value_states.dtype, value_states.shape[-1])
        keys = torch.cat([t for t in (self.sink_keys, body_k, self.keys, key_states) if t is not None], dim=-2)
        values = torch.cat([t for t in (self.sink_values, body_v, self.values, value_states) if t is not None], dim=-2)

        # New tokens fill the sink first, then the window; what leaves the window is quantized.
        pending_k = torch.cat([self.keys, key_states], dim=-2)
        pending_v = torch.cat([self.values, value_states], dim=-2)
        need = self.sink - self.sink_keys.shape[-2]
        if need > 0:
            self.sink_keys = torch.cat([self.sink_keys, pending_k[..., :need, :]], dim=-2)
            self.sink_values = torch.cat([self.sink_values, pending_v[..., :need, :]], dim=-2)
            pending_k, pending_v = pending_k[..., need:, :], pending_v[..., need:, :]
        leaving = pending_k.shape[-2] - self.window
        if "channel" in (self.key_granularity, self.value_granularity):
            leaving = (leaving // self.window) * self.window if leaving >= self.window else 0
        if leaving > 0:
            self.body_keys.append(pending_k[..., :leaving, :])
            self.body_values.append(pending_v[..., :leaving, :])
            pending_k, pending_v = pending_k[..., leaving:, :], pending_v[..., leaving:, :]
        # Own the window's memory (a slice would keep the whole concatenation alive).
        self.keys, self.values = pending_k.clone(), pending_v.clone()
        return keys, values

    def get_seq_length(self) -> int:
        return self.cumulative_length

    def get_max_cache_shape(self) -> int:
        return -1

    def quantized_tokens(self) -> int:
        return self.body_keys.tokens

    def kv_bytes(self) -> int:
        """Bytes held: full-precision sink and window, quantized codes, scales and mins."""
        if not self.is_initialized:
            return 0
        full = sum(_nbytes(t) for t in (self.sink_keys, self.sink_values, self.keys, self.values))
        return full + self.body_keys.nbytes() + self.body_values.nbytes()

    def full_precision_bytes(self) -> int:
        """What a full-precision cache of the same tokens would hold."""
        if not self.is_initialized:
            return 0
        per_token = (self.keys[..., :1, :].numel() + self.values[..., :1, :].numel()) * self.keys.element_size()
        return self.cumulative_length * per_token

    def reset(self) -> None:
        self.cumulative_length = 0
        if self.is_initialized:
            self.keys, self.values = self.keys[..., :0, :], self.values[..., :0, :]
        self._reset_storage()
        if self.is_initialized:
            self.sink_keys, self.sink_values = self.keys, self.values

    def _unsupported(self, *args, **kwargs):
        raise NotImplementedError("LowbitQuantizedLayer supports generation (greedy or sampled, batch as given); "
                                  "cropping, beam search and batch reshuffles are not implemented")

    crop = reorder_cache = batch_repeat_interleave = batch_select_indices = _unsupported
    offload = prefetch = _unsupported


class LowbitQuantizedCache(Cache):
    """transformers Cache with one LowbitQuantizedLayer per decoder layer."""

    def __init__(self, config=None, num_layers: int | None = None, sink: int = 4, window: int = 32,
                 scheme: str = "int8", key_granularity: str = "token", value_granularity: str = "token"):
        if num_layers is None:
            if config is None:
                raise ValueError("pass the model's config (or num_layers)")
            text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
            num_layers = text.num_hidden_layers
        layers = [LowbitQuantizedLayer(sink, window, scheme, key_granularity, value_granularity)
                  for _ in range(num_layers)]
        super().__init__(layers=layers)

    def kv_bytes(self) -> int:
        """Bytes of keys and values held over all layers (scales and mins included)."""
        return sum(layer.kv_bytes() for layer in self.layers)

    def full_precision_bytes(self) -> int:
        """Bytes a full-precision cache of the same tokens would hold."""
        return sum(layer.full_precision_bytes() for layer in self.layers)

    def quantized_tokens(self, layer_idx: int = 0) -> int:
        return self.layers[layer_idx].quantized_tokens() if layer_idx < len(self.layers) else 0

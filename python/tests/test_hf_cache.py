"""The transformers cache over lowbit's KV cache op: what each update returns is what the
op's read() gives (decode) or the closest set one set of keys can be (prefill), its byte
counts come from the op's buffers, options the op lacks raise; a tiny random Llama
generates the same greedy tokens with the INT8 selective cache as with the full cache.
On the GPU in FP16, else on the CPU in FP32 (where torch and transformers are installed)."""
import pytest
from conftest import cuda_available, has_module

pytestmark = pytest.mark.skipif(not (has_module("torch") and has_module("transformers")),
                                reason="needs torch and transformers")


def device():
    return "cuda" if cuda_available() else "cpu"


def tiny_llama():
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    # head_dim 64 (the KV cache op's smallest). A random model's greedy choices are often
    # near-ties (top-2 logit margins ~0.001, below the INT8 cache's ~0.002 logit deviation)
    # that flip under any perturbation. With seed 11 the smallest margin over the 32 steps
    # of test_int8_selective_greedy_matches_full is 0.064 (measured on the CPU in FP32 and
    # FP16), ~35x the deviation.
    config = LlamaConfig(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=64, max_position_embeddings=512,
                         initializer_range=0.02)
    torch.manual_seed(11)
    dtype = torch.float16 if cuda_available() else torch.float32
    return LlamaForCausalLM(config).to(device(), dtype).eval()


def test_updates_return_what_the_op_reads():
    """Prefill: the first token as its query reads it, the rest rounded to f16; each decode
    step: exactly a LayerKVCache's read() after the same appends, in the model's dtype; the
    byte counts are the op's buffers' (FP16 slots in use, then codes + scales + mins)."""
    import torch

    import lowbit
    from lowbit.hf_cache import LowbitQuantizedLayer

    batch, kv_heads, head_dim, sink, window = 2, 2, 64, 2, 3
    g = torch.Generator().manual_seed(3)
    k = torch.randn(batch, kv_heads, 12, head_dim, generator=g).to(device())
    v = torch.randn(batch, kv_heads, 12, head_dim, generator=g).to(device())
    layer = LowbitQuantizedLayer(sink=sink, window=window, scheme="int4", max_tokens=16)
    refs = [lowbit.LayerKVCache("selective", kv_heads, head_dim, 16, sink, window, 4, device=device())
            for _ in range(batch)]
    tokens = lambda b, t: (k[b, :, t].half().contiguous(), v[b, :, t].half().contiguous())  # noqa: E731

    keys, values = layer.update(k[:, :, :7], v[:, :, :7])
    assert keys.shape == values.shape == (batch, kv_heads, 7, head_dim) and keys.dtype == k.dtype
    assert torch.equal(keys, k[:, :, :7].half().to(k.dtype)) and torch.equal(values, v[:, :, :7].half().to(v.dtype))
    for b in range(batch):
        for t in range(7):
            refs[b].append(*tokens(b, t))
    for t in range(7, 12):
        keys, values = layer.update(k[:, :, t:t + 1], v[:, :, t:t + 1])
        assert keys.shape == (batch, kv_heads, t + 1, head_dim)
        for b in range(batch):
            refs[b].append(*tokens(b, t))
            want_k, want_v = refs[b].read()
            assert torch.equal(keys[b], want_k.transpose(0, 1).to(k.dtype))
            assert torch.equal(values[b], want_v.transpose(0, 1).to(v.dtype))
        quantized = t + 1 - sink - window
        assert layer.get_seq_length() == t + 1 and layer.quantized_tokens() == quantized
        assert not torch.equal(keys[:, :, sink:sink + quantized], k[:, :, sink:sink + quantized].half().to(k.dtype))
    # 12 tokens a row: 5 in FP16 slots (2 x 64 x 2 bytes a token), 7 INT4 (2 x (32 + 2 + 2))
    assert layer.kv_bytes() == batch * 2 * (5 * kv_heads * head_dim * 2 + 7 * kv_heads * (32 + 2 + 2))
    assert layer.full_precision_bytes() == batch * 2 * 12 * kv_heads * head_dim * k.element_size()
    assert layer.allocated_bytes() == batch * refs[0].nbytes
    # A later update of several tokens: the cached ones as its first query reads them.
    more_k, more_v = k[:, :, :3] * 2, v[:, :, :3] * 2
    keys, values = layer.update(more_k, more_v)
    assert keys.shape == (batch, kv_heads, 15, head_dim)
    for b in range(batch):
        refs[b].append(more_k[b, :, 0].half().contiguous(), more_v[b, :, 0].half().contiguous())
        want_k, want_v = refs[b].read()
        assert torch.equal(keys[b, :, :13], want_k.transpose(0, 1).to(k.dtype))
        assert torch.equal(values[b, :, :13], want_v.transpose(0, 1).to(v.dtype))
    assert torch.equal(keys[:, :, 13:], more_k[:, :, 1:].half().to(k.dtype))
    with pytest.raises(ValueError, match="20 tokens exceed max_tokens=16"):
        layer.update(k[:, :, :5], v[:, :, :5])
    with pytest.raises(ValueError, match="batch 1, but this cache holds 2 rows"):
        layer.update(k[:1, :, :1], v[:1, :, :1])
    layer.reset()
    assert layer.get_seq_length() == 0 and layer.kv_bytes() == 0
    keys, _ = layer.update(k[:1, :, :1], v[:1, :, :1])  # a new batch after reset()
    assert keys.shape == (1, kv_heads, 1, head_dim)


@pytest.mark.parametrize("kwargs,message", [
    ({"key_granularity": "channel"}, "key_granularity: expected 'token', got 'channel'.*no per-channel form"),
    ({"value_granularity": "block"}, "value_granularity: expected 'token', got 'block'"),
    ({"scheme": "int8_asym"}, "scheme: expected 'int8' or 'int4'.*got 'int8_asym'"),
    ({"scheme": "int4_sym"}, "scheme: expected 'int8' or 'int4'.*got 'int4_sym'"),
    ({"window": 0}, "sink must be >= 0 and window >= 1, got sink=4, window=0"),
])
def test_options_the_op_lacks_raise(kwargs, message):
    from lowbit.hf_cache import LowbitQuantizedCache

    with pytest.raises(ValueError, match=message):
        LowbitQuantizedCache(num_layers=2, **kwargs)


def test_head_dim_the_op_lacks_raises():
    import torch

    import lowbit
    from lowbit.hf_cache import LowbitQuantizedCache

    cache = LowbitQuantizedCache(num_layers=1)
    x = torch.zeros(1, 2, 3, 32)
    with pytest.raises(lowbit.LowbitError, match="head_dim = 32, expected 64 or 128"):
        cache.update(x, x, 0)


def test_int8_selective_greedy_matches_full():
    import torch
    from transformers import DynamicCache

    from lowbit.hf_cache import LowbitQuantizedCache

    model = tiny_llama()
    prompt = torch.randint(0, 512, (1, 48), generator=torch.Generator().manual_seed(1)).to(device())
    kwargs = dict(max_new_tokens=32, min_new_tokens=32, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        full = model.generate(prompt, past_key_values=DynamicCache(), **kwargs)
        cache = LowbitQuantizedCache(model.config, sink=4, window=16, scheme="int8")
        ours = model.generate(prompt, past_key_values=cache, **kwargs)
    assert ours.shape == full.shape == (1, 48 + 32)
    assert cache.quantized_tokens() > 0
    assert torch.equal(ours[:, 48:], full[:, 48:])

    held, dense = cache.kv_bytes(), cache.full_precision_bytes()
    print(f"lowbit INT8 selective: {held} KV bytes vs {dense} full precision ({held / dense:.3f}x) after "
          f"{cache.get_seq_length()} tokens")
    assert 0 < held < dense


def test_int4_body_generates():
    import torch

    from lowbit.hf_cache import LowbitQuantizedCache

    model = tiny_llama()
    prompt = torch.randint(0, 512, (2, 40), generator=torch.Generator().manual_seed(2)).to(device())
    cache = LowbitQuantizedCache(model.config, sink=4, window=8, scheme="int4")
    with torch.no_grad():
        out = model.generate(prompt, past_key_values=cache, max_new_tokens=16, do_sample=False, pad_token_id=0)
    assert out.shape[0] == 2 and cache.quantized_tokens() == 55 - 12
    # 55 cached tokens (40 + the 15 generated tokens fed back): 12 in FP16 (sink 4 + window
    # 8), 43 in INT4 with an f16 scale + min per token per head (head_dim 64: 32 + 4 bytes
    # against 128 in FP16): 12/55 + 43/55 * 0.281 = 0.438 of an FP16 cache (0.219 of FP32).
    ratio = 0.438 * (2 / model.dtype.itemsize)
    assert cache.kv_bytes() == pytest.approx(ratio * cache.full_precision_bytes(), rel=1e-3)


def default_model_path():
    """The engine's default GGUF (scripts/fetch-model.sh), or $LOWBIT_MODEL; None when absent."""
    import os

    cache = os.environ.get("LOWBIT_CACHE") or os.path.expanduser("~/.cache/lowbit")
    path = os.environ.get("LOWBIT_MODEL") or os.path.join(cache, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
    return path if os.path.isfile(path) else None


@pytest.mark.skipif(not has_module("gguf") or default_model_path() is None,
                    reason="needs the gguf package and the default model (scripts/fetch-model.sh)")
def test_default_model_int8_selective_matches_full():
    """SmolLM2-135M-Instruct loaded by transformers from the engine's GGUF file: the INT8
    selective cache (sink 4, window 16: most of the 51 cached tokens quantized) gives the
    full cache's first 32 greedy tokens on the seed's prompt."""
    import os

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache

    from lowbit.hf_cache import LowbitQuantizedCache

    folder, name = os.path.split(default_model_path())
    dtype = torch.float16 if cuda_available() else torch.float32
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=dtype).to(device()).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    prompt = "Once upon a time, in a small village at the edge of a great forest, there lived"
    ids = tokenizer(prompt, return_tensors="pt").input_ids.to(device())
    kwargs = dict(max_new_tokens=32, min_new_tokens=32, do_sample=False, pad_token_id=tokenizer.eos_token_id)
    with torch.no_grad():
        full = model.generate(ids, past_key_values=DynamicCache(), **kwargs)
        cache = LowbitQuantizedCache(model.config, sink=4, window=16, scheme="int8")
        ours = model.generate(ids, past_key_values=cache, **kwargs)
    n = ids.shape[1]
    assert cache.quantized_tokens() >= 25
    assert torch.equal(ours[:, n:], full[:, n:]), (tokenizer.decode(full[0, n:]), tokenizer.decode(ours[0, n:]))
    held, dense = cache.kv_bytes(), cache.full_precision_bytes()
    print(f"default model, lowbit INT8 selective: {held} KV bytes vs {dense} ({held / dense:.3f}x), "
          f"text: {tokenizer.decode(ours[0, n:])!r}")
    assert 0 < held < dense

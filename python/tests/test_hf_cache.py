"""The transformers cache: a tiny random Llama generates the same greedy tokens with lowbit's
INT8 selective cache as with the full cache, and the cache reports its KV bytes. On the GPU
in FP16, else on the CPU in FP32 (where torch and transformers are installed)."""
import pytest
from conftest import cuda_available, has_module

pytestmark = pytest.mark.skipif(not (has_module("torch") and has_module("transformers")),
                                reason="needs torch and transformers")


def device():
    return "cuda" if cuda_available() else "cpu"


def tiny_llama():
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    # transformers' default initializer_range (0.02). With 0.1 the random model's greedy
    # choices are near-ties (top-2 logit margins down to 0.001, below the INT8 cache's
    # 0.07 logit deviation) and flip under any perturbation; at 0.02 the deviation
    # (~0.001) stays well under the smallest margin (~0.009) over these 32 steps.
    config = LlamaConfig(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         initializer_range=0.02)
    torch.manual_seed(0)
    dtype = torch.float16 if cuda_available() else torch.float32
    return LlamaForCausalLM(config).to(device(), dtype).eval()


@pytest.mark.parametrize("key_granularity", ["token", "channel"])
def test_int8_selective_greedy_matches_full(key_granularity):
    import torch
    from transformers import DynamicCache

    from lowbit.hf_cache import LowbitQuantizedCache

    model = tiny_llama()
    prompt = torch.randint(0, 512, (1, 48), generator=torch.Generator().manual_seed(1)).to(device())
    kwargs = dict(max_new_tokens=32, min_new_tokens=32, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        full = model.generate(prompt, past_key_values=DynamicCache(), **kwargs)
        cache = LowbitQuantizedCache(model.config, sink=4, window=16, scheme="int8",
                                     key_granularity=key_granularity)
        ours = model.generate(prompt, past_key_values=cache, **kwargs)
    assert ours.shape == full.shape == (1, 48 + 32)
    assert cache.quantized_tokens() > 0
    assert torch.equal(ours[:, 48:], full[:, 48:])

    held, dense = cache.kv_bytes(), cache.full_precision_bytes()
    print(f"lowbit INT8 selective ({key_granularity} keys): {held} KV bytes vs {dense} full precision "
          f"({held / dense:.3f}x) after {cache.get_seq_length()} tokens")
    assert 0 < held < dense


def test_int4_body_generates():
    import torch

    from lowbit.hf_cache import LowbitQuantizedCache

    model = tiny_llama()
    prompt = torch.randint(0, 512, (2, 40), generator=torch.Generator().manual_seed(2)).to(device())
    cache = LowbitQuantizedCache(model.config, sink=4, window=8, scheme="int4")
    with torch.no_grad():
        out = model.generate(prompt, past_key_values=cache, max_new_tokens=16, do_sample=False, pad_token_id=0)
    assert out.shape[0] == 2 and cache.quantized_tokens() > 0
    # 55 cached tokens (40 + the 15 generated tokens fed back): 12 in FP16 (sink 4 + window
    # 8), 43 in INT4 with an f32 scale + min per token per head (head_dim 32: 16 + 8 bytes
    # against 64): 12/55 + 43/55 * 0.375 = 0.511 (measured on the H100: 28800 / 56320).
    assert cache.kv_bytes() < 0.52 * cache.full_precision_bytes()


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

"""`lowbit model synth` files as llama.cpp's own Python reader (the `gguf` package) reads
them: architecture and hyperparameters, every tensor's name, shape and type, the tokenizer
keys copied from the source file, and weights that decode to finite values of the intended
scale. The tokenizer source is a small GGUF file this test writes with gguf's GGUFWriter."""
import subprocess

import numpy as np
import pytest
from conftest import has_module, lowbit_cli

pytestmark = pytest.mark.skipif(not has_module("gguf"), reason="needs the gguf package (scripts/python-test.sh installs it)")

TINY = dict(arch="llama", d_model=256, layers=2, heads=4, kv_heads=2, head_dim=64, ffn=512)
# 384 wide: not whole K-quant super-blocks, so K-quant files fall back as llama.cpp's do
# (Q2_K / Q3_K to Q4_0, standing in for llama.cpp's IQ4_NL).
TINY_QWEN2 = dict(arch="qwen2", d_model=384, layers=2, heads=6, kv_heads=2, head_dim=64, ffn=512)
FALLBACK = {"Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0", "Q2_K": "Q4_0", "Q3_K": "Q4_0"}
VOCAB = 300


def write_tokenizer_source(path):
    import gguf

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list([f"tok{i}" for i in range(VOCAB)])
    w.add_token_types([1] * VOCAB)
    w.add_token_merges(["t o", "to k"])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_chat_template("{{ messages }}")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def field(reader, key):
    return reader.fields[key].contents()


def expected_tensors(shape, matrix_type):
    """name -> (GGUF dims, type): a matrix whose rows are not whole blocks of the type
    takes its fallback; qwen2 adds F32 Q/K/V biases."""
    d, hd, ffn = shape["d_model"], shape["head_dim"], shape["ffn"]
    q, kv = shape["heads"] * hd, shape["kv_heads"] * hd

    def matrix(rows_of):
        whole = rows_of % (256 if matrix_type in FALLBACK else 32 if matrix_type != "F16" else 1) == 0
        return matrix_type if whole else FALLBACK[matrix_type]

    out = {"token_embd.weight": ([d, VOCAB], "Q8_0"), "output_norm.weight": ([d], "F32")}
    for layer in range(shape["layers"]):
        p = f"blk.{layer}."
        out.update({p + "attn_norm.weight": ([d], "F32"), p + "ffn_norm.weight": ([d], "F32"),
                    p + "attn_q.weight": ([d, q], matrix(d)), p + "attn_k.weight": ([d, kv], matrix(d)),
                    p + "attn_v.weight": ([d, kv], matrix(d)), p + "attn_output.weight": ([q, d], matrix(q)),
                    p + "ffn_gate.weight": ([d, ffn], matrix(d)), p + "ffn_up.weight": ([d, ffn], matrix(d)),
                    p + "ffn_down.weight": ([ffn, d], matrix(ffn))})
        if shape["arch"] == "qwen2":
            out.update({p + "attn_q.bias": ([q], "F32"), p + "attn_k.bias": ([kv], "F32"),
                        p + "attn_v.bias": ([kv], "F32")})
    return out


@pytest.mark.parametrize("preset, shape, matrix_type", [
    *[("tiny", TINY, t) for t in ["Q4_1", "Q4_0", "Q8_0", "F16", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K",
                                  "Q6_K"]],
    *[("tiny-qwen2", TINY_QWEN2, t) for t in ["Q4_1", "Q2_K", "Q4_K", "Q6_K"]],
])
def test_synth_tiny_reads_in_gguf(tmp_path, preset, shape, matrix_type):
    import gguf
    from gguf.quants import dequantize

    cli = lowbit_cli()
    source, out = tmp_path / "tokenizer.gguf", tmp_path / "tiny.gguf"
    write_tokenizer_source(source)
    subprocess.run([cli, "model", "synth", "--preset", preset, "--type", matrix_type, "--out", str(out),
                    "--tokenizer-from", str(source)], check=True, capture_output=True)
    reader = gguf.GGUFReader(str(out))

    arch = shape["arch"]
    assert field(reader, "general.architecture") == arch
    assert field(reader, f"{arch}.block_count") == shape["layers"]
    assert field(reader, f"{arch}.embedding_length") == shape["d_model"]
    assert field(reader, f"{arch}.feed_forward_length") == shape["ffn"]
    assert field(reader, f"{arch}.attention.head_count") == shape["heads"]
    assert field(reader, f"{arch}.attention.head_count_kv") == shape["kv_heads"]
    assert field(reader, f"{arch}.rope.dimension_count") == shape["head_dim"]
    assert field(reader, f"{arch}.vocab_size") == VOCAB

    # The tokenizer: every tokenizer.* key of the source, same type and value.
    src = gguf.GGUFReader(str(source))
    tokenizer_keys = [k for k in src.fields if k.startswith("tokenizer.")]
    assert len(tokenizer_keys) == 8
    for key in tokenizer_keys:
        assert reader.fields[key].types == src.fields[key].types, key
        assert field(reader, key) == field(src, key), key

    want = expected_tensors(shape, matrix_type)
    assert sorted(t.name for t in reader.tensors) == sorted(want)
    for t in reader.tensors:
        shape, type_name = want[t.name]
        assert list(t.shape) == shape, t.name
        assert t.tensor_type.name == type_name, t.name
        values = dequantize(t.data, t.tensor_type)
        assert np.isfinite(values).all(), t.name
        if t.name.endswith("norm.weight"):
            assert abs(values.mean() - 1.0) < 0.02, t.name
        elif t.name.endswith(".bias"):
            assert 0.05 < values.std() < 0.2, t.name
        else:  # matrices 1/sqrt(fan_in); the embedding 1/sqrt(d_model)
            assert abs(values.std() * np.sqrt(shape[0]) - 1.0) < 0.1, t.name

"""The CPU engine's ggml block decoders against gguf's NumPy decoders (gguf.quants, which
follow ggml's reference C decoders operation by operation): random blocks of every type
the engine reads, written into a GGUF file with gguf's GGUFWriter, decoded by
`lowbit model dequant` (ggml's decoder, and, for the types the CPU engine keeps as blocks,
`--form blocks`: repacked into that form and decoded from it), compared bit for bit. The
one stated exception is Q4_1, which lowbit defines as one rounding of q * d + m (its GPU
kernels' definition) where ggml rounds the product first: within one rounding of the
product."""
import subprocess

import numpy as np
import pytest
from conftest import has_module, lowbit_cli

pytestmark = pytest.mark.skipif(not has_module("gguf"), reason="needs the gguf package (scripts/python-test.sh installs it)")

# Byte offsets of each type's f16 scale fields in its block (d, and dmin or m).
HALF_FIELDS = {"Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0], "Q2_K": [80, 82],
               "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208]}
TYPES = ["F32", "F16", "BF16", *HALF_FIELDS]
# (type, form): every type through ggml's decoder; those with a CPU block form through it too.
CASES = [(t, "f32") for t in TYPES] + [(t, "blocks") for t in HALF_FIELDS]


def random_blocks(rng, type_name, rows, blocks_per_row, finite):
    """Random block bytes; with finite, every f16 field a finite half (any exponent but 31)."""
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    qtype = GGMLQuantizationType[type_name]
    block_elements, block_bytes = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(rows * blocks_per_row, block_bytes), dtype=np.uint8)
    if finite:
        fields = HALF_FIELDS.get(type_name, range(0, block_bytes, 2) if type_name == "F16" else [])
        for offset in fields:
            halves = raw[:, offset:offset + 2].copy().view(np.uint16)
            exponent_31 = (halves & 0x7C00) == 0x7C00
            halves[exponent_31] &= 0xFBFF  # exponent 31 (inf, NaN) -> 30
            raw[:, offset:offset + 2] = halves.view(np.uint8)
    return qtype, raw.reshape(rows, blocks_per_row * block_bytes), block_elements


def decode_both(tmp_path, rng, type_name, finite, form="f32", rows=3, blocks_per_row=5):
    import gguf
    from gguf.quants import dequantize

    qtype, raw, block_elements = random_blocks(rng, type_name, rows, blocks_per_row, finite)
    path, out = tmp_path / f"{type_name}.gguf", tmp_path / f"{type_name}.f32"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tensor("t", raw, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    subprocess.run([lowbit_cli(), "model", "dequant", "--model", str(path), "--tensor", "t", "--out", str(out),
                    "--form", form], check=True, capture_output=True)
    ours = np.fromfile(out, dtype=np.float32)
    with np.errstate(invalid="ignore", over="ignore"):  # inf * 0 in blocks of any bits
        reference = dequantize(raw, qtype).astype(np.float32, copy=False).ravel()
    assert ours.size == reference.size == rows * blocks_per_row * block_elements
    return raw, ours, reference


@pytest.mark.parametrize("type_name, form", CASES)
def test_random_blocks_decode_as_ggml(tmp_path, type_name, form):
    rng = np.random.default_rng(sum(map(ord, type_name)))
    raw, ours, reference = decode_both(tmp_path, rng, type_name, finite=True, form=form)
    assert np.isfinite(reference).all()
    if type_name == "Q4_1":
        # |fma(q, d, m) - (q * d + m)| is at most the product's rounding error plus one
        # rounding of the sum: 2^-24 |q d| + 2^-24 |result| (and the subnormal floor).
        blocks = raw.reshape(-1, 20)
        d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)
        q_max = np.float32(15)
        bound = (np.abs(d) * q_max + np.abs(ours.reshape(-1, 32))) * np.float32(2.0**-23) + np.float32(2.0**-140)
        assert (np.abs(ours.reshape(-1, 32) - reference.reshape(-1, 32)) <= bound).all()
        assert (ours == reference).mean() > 0.5  # mostly the same bits: the roundings coincide
    else:
        mismatch = np.flatnonzero(ours.view(np.uint32) != reference.view(np.uint32))
        assert mismatch.size == 0, f"{mismatch.size} values differ, first at {mismatch[:5]}: " \
                                   f"{ours[mismatch[:5]]} vs {reference[mismatch[:5]]}"


@pytest.mark.parametrize("type_name, form", [c for c in CASES if c[0] != "Q4_1"])
def test_any_bytes_decode_as_ggml(tmp_path, type_name, form):
    """Scale fields of any bits, inf and NaN included: the same values, NaN where ggml's is."""
    rng = np.random.default_rng(7 + sum(map(ord, type_name)))
    _, ours, reference = decode_both(tmp_path, rng, type_name, finite=False, form=form)
    nan = np.isnan(reference)
    assert (np.isnan(ours) == nan).all()
    assert (ours[~nan].view(np.uint32) == reference[~nan].view(np.uint32)).all()


def test_real_q4_k_m_file_decodes_as_ggml(tmp_path):
    """The smallest tensor of each type in Qwen2.5-0.5B's Q4_K_M file (Q5_0, Q8_0, Q4_K, Q6_K,
    F32), where it is fetched (scripts/fetch-model.sh qwen2.5-0.5b)."""
    import os
    import pathlib

    import gguf
    from gguf.quants import dequantize

    cache = pathlib.Path(os.environ.get("LOWBIT_CACHE", pathlib.Path.home() / ".cache" / "lowbit"))
    path = cache / "models" / "Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf"
    if not path.is_file():
        pytest.skip(f"no file at {path} (scripts/fetch-model.sh qwen2.5-0.5b)")
    cli = lowbit_cli()
    smallest = {}
    for t in gguf.GGUFReader(str(path)).tensors:
        name = t.tensor_type.name
        if name not in smallest or t.n_elements < smallest[name].n_elements:
            smallest[name] = t
    assert set(smallest) == {"Q5_0", "Q8_0", "Q4_K", "Q6_K", "F32"}
    for type_name, t in smallest.items():
        out = tmp_path / f"{type_name}.f32"
        subprocess.run([cli, "model", "dequant", "--model", str(path), "--tensor", t.name, "--out", str(out)],
                       check=True, capture_output=True)
        ours = np.fromfile(out, dtype=np.float32)
        reference = dequantize(t.data, t.tensor_type).astype(np.float32, copy=False).ravel()
        assert (ours.view(np.uint32) == reference.view(np.uint32)).all(), f"{t.name} ({type_name})"

"""quantize_tensor / dequantize_tensor on NumPy arrays equal the NumPy reimplementation of
the formulas bit for bit, write into the arrays they return, and take strided inputs."""
import numpy as np
import pytest
from conftest import awkward_matrix

import lowbit
import reference

SHAPES = [(1, 1), (3, 17), (33, 70), (7, 129), (64, 48)]
SCHEMES = ["int8", "int4", "int8_asym", "int4_sym"]
GRANULARITIES = [("tensor", 0), ("channel", 0), ("token", 0), ("group", 16), ("group", 32)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("granularity,group", GRANULARITIES)
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_quantize_matches_reference(rng, shape, scheme, granularity, group, dtype):
    x = awkward_matrix(rng, *shape, dtype=dtype)
    codes, scales, mins = lowbit.quantize_tensor(x, scheme, granularity, group)
    want_codes, want_scales, want_mins = reference.quantize(x, scheme, granularity, group)
    assert codes.dtype == want_codes.dtype and codes.shape == want_codes.shape
    np.testing.assert_array_equal(codes, want_codes)
    np.testing.assert_array_equal(scales.ravel().view(np.uint32), want_scales.view(np.uint32))
    if want_mins is None:
        assert mins is None
    else:
        np.testing.assert_array_equal(mins.ravel().view(np.uint32), want_mins.view(np.uint32))
    if granularity == "group":
        assert scales.shape == (shape[0], -(-shape[1] // group))

    for out_dtype in (np.float32, np.float16):
        got = lowbit.dequantize_tensor(codes, scales, mins, scheme, granularity, group, dtype=out_dtype,
                                       cols=shape[1])
        want = reference.dequantize(want_codes, want_scales, want_mins, scheme, granularity, group, shape[1],
                                    out_dtype)
        assert got.dtype == out_dtype and got.shape == shape
        np.testing.assert_array_equal(got.view(np.uint16 if out_dtype == np.float16 else np.uint32),
                                      want.view(np.uint16 if out_dtype == np.float16 else np.uint32))


def test_outputs_are_written_in_place(rng, monkeypatch):
    """The C++ layer writes into the arrays the Python layer allocates (no copies back)."""
    allocated = []
    real_empty = np.empty

    def recording_empty(*args, **kwargs):
        a = real_empty(*args, **kwargs)
        a.fill(0x5A if a.dtype.kind in "iu" else np.nan)  # poison
        allocated.append(a)
        return a

    monkeypatch.setattr(np, "empty", recording_empty)
    x = awkward_matrix(rng, 9, 40)
    codes, scales, mins = lowbit.quantize_tensor(x, "int4", "group", 16)
    pointers = {a.__array_interface__["data"][0] for a in allocated}
    for out in (codes, scales, mins):
        assert out.__array_interface__["data"][0] in pointers
    want_codes, want_scales, _ = reference.quantize(x, "int4", "group", 16)
    np.testing.assert_array_equal(codes, want_codes)
    np.testing.assert_array_equal(scales.ravel(), want_scales)


def test_padded_rows_are_read_in_place(rng):
    """A view with row stride > cols (a column slice) goes in without a copy."""
    big = awkward_matrix(rng, 12, 64)
    x = big[:, :40]
    assert not x.flags.c_contiguous
    codes, scales, _ = lowbit.quantize_tensor(x, "int8", "token")
    want_codes, want_scales, _ = reference.quantize(np.ascontiguousarray(x), "int8", "token")
    np.testing.assert_array_equal(codes, want_codes)
    np.testing.assert_array_equal(scales, want_scales)


def test_read_only_input(rng):
    x = awkward_matrix(rng, 4, 32)
    x.setflags(write=False)
    codes, _, _ = lowbit.quantize_tensor(x, "int8", "channel")
    np.testing.assert_array_equal(codes, reference.quantize(x, "int8", "channel")[0])


def test_odd_columns_int4_default_cols(rng):
    x = awkward_matrix(rng, 5, 33)
    codes, scales, mins = lowbit.quantize_tensor(x, "int4", "channel")
    # per-channel scales pin D, so cols is not needed
    y = lowbit.dequantize_tensor(codes, scales, mins, "int4", "channel")
    assert y.shape == (5, 33)


def test_roundtrip_error_is_bounded(rng):
    x = rng.standard_normal((16, 64)).astype(np.float32)
    codes, scales, _ = lowbit.quantize_tensor(x, "int8", "token")
    y = lowbit.dequantize_tensor(codes, scales, None, "int8", "token")
    assert np.all(np.abs(y - x) <= scales[:, None] / 2 * 1.0001)


def test_python_scheme_table_is_the_extensions():
    """_ops.quant.SCHEMES (read by torch.compile as a constant) is the C++ table, read at
    import: every scheme, each as _lowbit.scheme_info says; unknown names get the C++ error."""
    from lowbit import _lowbit
    from lowbit._ops.quant import SCHEMES
    from lowbit.quant import scheme_info

    assert set(SCHEMES) == {"int8", "int4", "int8_asym", "int4_sym"}
    for name in SCHEMES:
        assert scheme_info(name) == SCHEMES[name] == tuple(_lowbit.scheme_info(name))
    assert SCHEMES["int8"] == (8, False, "i8") and SCHEMES["int4"] == (4, True, "u8")
    with pytest.raises(lowbit.LowbitError, match="scheme: expected int8, int4, int8_asym or int4_sym, got 'int9'"):
        scheme_info("int9")


@pytest.mark.parametrize("scheme", ["int8", "int4", "int8_asym", "int4_sym"])
@pytest.mark.parametrize("granularity,group", [("tensor", 0), ("channel", 0), ("token", 0), ("group", 16),
                                               ("group", 48), ("group", 0)])
def test_layout_rule_gives_quant_layout(scheme, granularity, group):
    """The C++ layout rule evaluated in Python (what the torch ops' shape functions do on
    symbolic sizes) gives the C++ quant_layout's shapes, which the outputs have."""
    from lowbit import _lowbit
    from lowbit._ops.quant import quant_shapes, scale_shape

    for rows, cols in [(1, 1), (3, 16), (7, 33), (5, 97), (2, 130)]:
        code_cols, scale_rows, scale_cols = _lowbit.quant_layout(scheme, granularity, group, rows, cols)
        assert quant_shapes(scheme, granularity, group, rows, cols) == (
            code_cols, scale_shape(granularity, scale_rows, scale_cols)), (rows, cols)
        if granularity == "group" and group == 0:
            assert scale_cols == 0  # no such spec: the op's checks name it
            continue
        x = np.ones((rows, cols), np.float32)
        codes, scales, mins = lowbit.quantize_tensor(x, scheme, granularity, group)
        assert codes.shape == (rows, code_cols) and scales.shape == scale_shape(granularity, scale_rows, scale_cols)
    with pytest.raises(lowbit.LowbitError, match="granularity: expected tensor, channel, token or group, got 'row'"):
        quant_shapes(scheme, "row", 0, 2, 2)

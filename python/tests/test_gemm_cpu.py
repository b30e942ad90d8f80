"""int8_matmul / int4_matmul on NumPy arrays: exact integer products, and the float
epilogue as the header defines it."""
import numpy as np
import pytest

import lowbit
import reference


def int8(rng, *shape):
    return rng.integers(-128, 128, shape).astype(np.int8)


@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (3, 5, 7), (17, 33, 65), (64, 24, 300)])
@pytest.mark.parametrize("b_layout", ["k_by_n", "n_by_k"])
def test_int8_matmul_exact(rng, m, n, k, b_layout):
    a = int8(rng, m, k)
    b_kn = int8(rng, k, n)
    b = b_kn if b_layout == "k_by_n" else np.ascontiguousarray(b_kn.T)
    c = lowbit.int8_matmul(a, b, b_layout=b_layout)
    assert c.dtype == np.int32 and c.shape == (m, n)
    np.testing.assert_array_equal(c, a.astype(np.int64) @ b_kn.astype(np.int64))


def test_int8_matmul_extremes(rng):
    k = 1000
    a = np.full((2, k), -128, np.int8)
    b = np.full((k, 3), -128, np.int8)
    np.testing.assert_array_equal(lowbit.int8_matmul(a, b), np.full((2, 3), 128 * 128 * k))


def test_int8_matmul_epilogue(rng):
    m, n, k = 9, 13, 40
    a, b = int8(rng, m, k), int8(rng, k, n)
    scale_a = rng.uniform(0.001, 0.1, m).astype(np.float32)
    scale_b = rng.uniform(0.001, 0.1, n).astype(np.float32)
    acc = (a.astype(np.int64) @ b.astype(np.int64)).astype(np.float32)
    v = (acc * scale_a[:, None]) * scale_b[None, :]
    # scale_c with no bias: fma(v, c, 0) is one float multiply
    got = lowbit.int8_matmul(a, b, scale_a, scale_b, scale_c=np.float32(0.75))
    np.testing.assert_array_equal(got, v * np.float32(0.75))
    # bias and relu: fma in double (v * c is exact there), then one rounding to float
    bias = rng.standard_normal(n).astype(np.float32)
    got = lowbit.int8_matmul(a, b, scale_a, scale_b, 0.75, bias, relu=True)
    want = np.maximum((v.astype(np.float64) * 0.75 + bias).astype(np.float32), 0)
    np.testing.assert_array_equal(got, want)
    # scalar scales as Python numbers, float16 out
    got = lowbit.int8_matmul(a, b, 0.5, 0.25, out_dtype="float16")
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, ((acc * np.float32(0.5)) * np.float32(0.25)).astype(np.float16))


@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (5, 7, 9), (16, 8, 64), (3, 11, 129)])
@pytest.mark.parametrize("b_layout", ["k_by_n", "n_by_k"])
def test_int4_matmul_exact(rng, m, n, k, b_layout):
    a = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((n, k)).astype(np.float32)
    a_packed, _, _ = lowbit.quantize_tensor(a, "int4_sym", "token")
    w_packed, _, _ = lowbit.quantize_tensor(w, "int4_sym", "token")  # [N, ceil(K/2)]: n_by_k
    a_vals = reference.unpack_int4_signed(a_packed, k)
    w_vals = reference.unpack_int4_signed(w_packed, k)
    want = a_vals.astype(np.int64) @ w_vals.T.astype(np.int64)
    if b_layout == "n_by_k":
        got = lowbit.int4_matmul(a_packed, w_packed, k, b_layout="n_by_k")
    else:
        # k_by_n: byte (j, n) holds B[2j, n] (low nibble) and B[2j+1, n]
        vals = np.zeros((k + (k % 2), n), np.int32)
        vals[:k] = w_vals.T
        nib = vals & 15
        b_kn = (nib[0::2] | (nib[1::2] << 4)).astype(np.uint8)
        got = lowbit.int4_matmul(a_packed, b_kn, k, b_layout="k_by_n")
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)

"""Weight-only linear on the CPU: pack_weights + weight_only_linear against the dequantized
weight (one rounding of q*s+m to the activation type, as gemm.h defines it)."""
import numpy as np
import pytest

import lowbit
import reference


@pytest.mark.parametrize("n,k,group", [(8, 64, 32), (5, 128, 128), (16, 96, 96), (3, 256, 64)])
@pytest.mark.parametrize("bits,zero_point", [(4, True), (4, False), (8, False)])
def test_weight_only_linear_matches_dequantized_weight(rng, n, k, group, bits, zero_point):
    w = rng.standard_normal((n, k)).astype(np.float32)
    x = rng.standard_normal((7, k)).astype(np.float16)
    packed = lowbit.quantize_weights(w, bits=bits, group_size=group, zero_point=zero_point, act_dtype="f16")
    assert packed.codes.dtype == np.uint8 and packed.n == n and packed.k == k
    y = lowbit.weight_only_linear(x, packed)
    assert y.dtype == np.float16 and y.shape == (7, n)

    # The same weight through quantize_tensor + the reference decode.
    scheme = {(4, True): "int4", (4, False): "int4_sym", (8, False): "int8"}[(bits, zero_point)]
    gran, g = ("token", 0) if group == k else ("group", group)
    codes, scales, mins = reference.quantize(w, scheme, gran, g)
    s16 = scales.astype(np.float16).astype(np.float64)
    m16 = None if mins is None else mins.astype(np.float16).astype(np.float64)
    w_hat = reference.dequantize(codes, s16.astype(np.float32), None if m16 is None else m16.astype(np.float32),
                                 scheme, gran, g, k).astype(np.float16)
    want = x.astype(np.float32) @ w_hat.astype(np.float32).T
    # FP32 accumulation in an order of the kernel's choosing, one rounding to f16.
    np.testing.assert_allclose(y.astype(np.float32), want, rtol=2e-3, atol=2e-3 * np.abs(want).max())


def test_weight_only_rejects_wrong_activation_dtype(rng):
    packed = lowbit.quantize_weights(rng.standard_normal((4, 64)).astype(np.float32), group_size=32)
    with pytest.raises(lowbit.LowbitError, match="expected dtype f16"):
        lowbit.weight_only_linear(np.ones((2, 64), np.float32), packed)

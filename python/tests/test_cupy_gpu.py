"""CuPy arrays on the GPU: quantize_tensor (outputs and status word to _lowbit.quantize
by address) and dequantize_tensor give the bits the NumPy path gives, and a NaN is
reported by check_quantize_status."""
import numpy as np
import pytest
from conftest import cuda_available, has_module

pytestmark = pytest.mark.skipif(not (has_module("cupy") and cuda_available()), reason="needs CuPy and a CUDA GPU")

import lowbit  # noqa: E402


@pytest.mark.parametrize("scheme,granularity,group", [("int8", "token", 0), ("int4", "group", 32),
                                                      ("int8_asym", "channel", 0)])
def test_cupy_equals_numpy(scheme, granularity, group):
    import cupy

    x = np.random.default_rng(5).standard_normal((9, 70)).astype(np.float32)
    got = lowbit.quantize_tensor(cupy.asarray(x), scheme, granularity, group)
    want = lowbit.quantize_tensor(x, scheme, granularity, group)
    lowbit.check_quantize_status()
    for g, w in zip(got, want):
        assert (g is None) == (w is None)
        if w is not None:
            np.testing.assert_array_equal(cupy.asnumpy(g).view(np.uint8), w.view(np.uint8))
    back = lowbit.dequantize_tensor(*got, scheme, granularity, group, cols=70)
    np.testing.assert_array_equal(cupy.asnumpy(back), lowbit.dequantize_tensor(*want, scheme, granularity, group,
                                                                               cols=70))


def test_cupy_nan_is_reported():
    import cupy

    x = cupy.ones((3, 16), dtype=cupy.float32)
    x[2, 5] = cupy.nan
    lowbit.quantize_tensor(x, "int8", "token")
    with pytest.raises(lowbit.LowbitError, match="NaN or Inf"):
        lowbit.check_quantize_status()

"""Arguments the binding's converters refuse, and inputs whose outputs would be huge: the
error is a LowbitError in lowbit's words naming the argument (not nanobind's
"incompatible function arguments" with a private signature, nor NumPy's allocation
failure), raised before any output is allocated."""
import numpy as np
import pytest

import lowbit

BIG = 2**70  # past 64 bits


@pytest.mark.parametrize("call,message", [
    (lambda: lowbit.quantize_tensor(np.ones((4, 8), ">f4")),
     r"x: float32 in big-endian byte order is not one lowbit takes"),
    (lambda: lowbit.quantize_tensor(np.array([[1.0, 2.0]], dtype=object)), r"x: dtype object is not one lowbit takes"),
    (lambda: lowbit.quantize_tensor(np.ones((4, 32), np.float32), "int8", "group", BIG),
     r"group_size: 1180591620717411303424 does not fit in a 64-bit integer"),
    (lambda: lowbit.quantize_tensor(np.ones((4, 32), np.float32), "int8", "group", 16.5),
     r"group_size: expected an integer, got float 16.5"),
    (lambda: lowbit.dequantize_tensor(np.ones((2, 3), np.int8), np.ones(3, np.float32), None, "int8", "channel",
                                      cols=BIG), r"cols: 1180591620717411303424 does not fit"),
    (lambda: lowbit.dequantize_tensor(np.ones((2, 3), ">i1"), np.ones(3, ">f4")), r"scales: float32 in big-endian"),
    (lambda: lowbit.int8_matmul(np.ones((2, 3), np.int8), np.ones((3, 5), ">i4")), r"b: int32 in big-endian"),
    (lambda: lowbit.int8_matmul(np.ones((2, 3), np.int8), np.ones((3, 5), object)), r"b: dtype object"),
    (lambda: lowbit.int4_matmul(np.ones((2, 2), np.uint8), np.ones((2, 5), np.uint8), BIG), r"k: .* does not fit"),
    (lambda: lowbit.block_encode(np.ones((2, 64), np.float64)), r"x: dtype float64 is not one lowbit takes"),
    (lambda: lowbit.packed_weight_sizes(BIG, 128), r"n: .* does not fit in a 64-bit integer"),
    (lambda: lowbit.LayerKVCache("full", kv_heads=BIG), r"kv_heads: .* does not fit in a 64-bit integer"),
])
def test_refused_arguments_are_named(call, message):
    with pytest.raises(lowbit.LowbitError, match=message):
        call()


def test_no_private_signature_in_the_message():
    with pytest.raises(lowbit.LowbitError) as raised:
        lowbit.quantize_tensor(np.ones((4, 8), ">f4"))
    assert "incompatible function arguments" not in str(raised.value)
    assert isinstance(raised.value.__cause__, TypeError)  # nanobind's error stays reachable


@pytest.mark.parametrize("call,message", [
    # A broadcast 2^20 x 2^20 input: 1 TiB of codes if allocated first.
    (lambda: lowbit.quantize_tensor(np.broadcast_to(np.float32(1), (2**20, 2**20))),
     r"x: expected unit column stride, got 0"),
    (lambda: lowbit.int8_matmul(np.broadcast_to(np.ones(64, np.int8), (2**20, 64)),
                                np.broadcast_to(np.ones(2**20, np.int8), (64, 2**20))),
     r"a: row stride 0 is smaller than the row length 64"),
    (lambda: lowbit.block_encode(np.broadcast_to(np.float32(1), (2**20, 2**20))), r"x: expected unit column stride"),
    # cols from the caller that the codes do not hold: checked before the [2 x 2^40] output.
    (lambda: lowbit.dequantize_tensor(np.ones((2, 3), np.int8), np.ones(3, np.float32), None, "int8", "channel",
                                      cols=2**40), r"cols: 1099511627776 columns take 1099511627776 code columns"),
])
def test_bad_inputs_are_named_before_large_outputs_are_allocated(call, message):
    with pytest.raises(lowbit.LowbitError, match=message):
        call()

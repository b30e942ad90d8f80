"""C++ errors arrive as lowbit.LowbitError (a RuntimeError) with the C++ message."""
import numpy as np
import pytest

import lowbit


def test_error_type():
    assert issubclass(lowbit.LowbitError, RuntimeError)


@pytest.mark.parametrize("call,message", [
    (lambda: lowbit.quantize_tensor(np.ones((2, 3), np.float32), "int9"), "scheme: expected int8"),
    (lambda: lowbit.quantize_tensor(np.ones((2, 3), np.float32), "int8", "rows"), "granularity: expected"),
    (lambda: lowbit.quantize_tensor(np.ones((2, 40), np.float32), "int8", "group", 24),
     "group_size: expected a positive multiple of 16"),
    (lambda: lowbit.quantize_tensor(np.ones((2, 3), np.float64)), "dtype float64 is not one lowbit takes"),
    (lambda: lowbit.quantize_tensor(np.ones((2, 3), np.int8)), "x: expected dtype f32, f16 or bf16"),
    (lambda: lowbit.quantize_tensor(np.ones((2, 3, 4), np.float32)), "expected a rank-2 tensor"),
    (lambda: lowbit.quantize_tensor(np.ones((0, 3), np.float32)), "non-empty"),
    (lambda: lowbit.quantize_tensor(np.array([[1.0, np.inf]], np.float32)), "quantization needs finite values"),
    (lambda: lowbit.quantize_tensor(np.ones((4, 6), np.float32)[:, ::2]), "x"),
    (lambda: lowbit.int8_matmul(np.ones((2, 3), np.int8), np.ones((4, 5), np.int8)), "k_by_n layout needs 3 rows"),
    (lambda: lowbit.int8_matmul(np.ones((2, 3), np.int8), np.ones((3, 5), np.float32)), "b: expected dtype i8"),
    (lambda: lowbit.int8_matmul(np.ones((2, 3), np.int8), np.ones((3, 5), np.int8), out_dtype="int32", relu=True),
     "an i32 output takes no scales"),
    (lambda: lowbit.int8_matmul(np.ones((2, 3), np.int8), np.ones((3, 5), np.int8), b_layout="kn"), "b_layout"),
    (lambda: lowbit.int8_matmul(np.ones((2, 3), np.int8), np.ones((3, 5), np.int8), scale_b=np.ones(4, np.float32)),
     "epilogue.scale_b: expected 1 or 5 elements"),
    (lambda: lowbit.dequantize_tensor(np.ones((2, 3), np.int8), np.ones(2, np.float32), None, "int8", "channel"),
     "scales: expected 3 elements"),
])
def test_messages(call, message):
    with pytest.raises(lowbit.LowbitError, match=message):
        call()


def test_message_is_the_cpp_message():
    """The text is lowbit::Error's what(): it ends with the [file:line] of the check."""
    with pytest.raises(lowbit.LowbitError, match=r"spec.group_size: .* got 24 \[quant.cpp:\d+\]$"):
        lowbit.quantize_tensor(np.ones((2, 40), np.float32), "int8", "group", 24)


def test_unsupported_array_type():
    with pytest.raises(TypeError, match="NumPy arrays, torch tensors or CuPy arrays"):
        lowbit.quantize_tensor([[1.0, 2.0]])

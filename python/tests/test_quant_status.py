"""NaN/Inf in quantize_tensor's input: raised at the call on the CPU and with check=True;
on CUDA by default recorded without synchronizing and raised (once) by
lowbit.check_quantize_status(), also after a CUDA graph replay. CPU tests run everywhere;
the CUDA ones skip without a GPU."""
import numpy as np
import pytest
from conftest import cuda_available, has_module

import lowbit

needs_cuda = pytest.mark.skipif(not cuda_available(), reason="needs torch with a CUDA GPU")
if has_module("torch"):
    import torch

    import lowbit.torch_ops  # noqa: F401


def with_nan(rows=8, cols=64, row=3, col=17, device="cuda"):
    x = torch.randn(rows, cols, device=device)
    x[row, col] = float("nan")
    return x


def test_cpu_nan_raises_at_the_call():
    x = np.ones((8, 64), np.float32)
    x[3, 17] = np.inf
    for check in (False, True):
        with pytest.raises(lowbit.LowbitError, match=r"at row 3, column 17; quantization needs finite values"):
            lowbit.quantize_tensor(x, "int8", "token", check=check)
    lowbit.check_quantize_status()  # nothing recorded: CPU errors are never deferred


@pytest.mark.skipif(not has_module("torch"), reason="needs torch")
def test_cpu_torch_nan_raises_at_the_call():
    with pytest.raises(lowbit.LowbitError, match=r"at row 3, column 17; quantization needs finite values"):
        lowbit.quantize_tensor(with_nan(device="cpu"), "int8", "channel")
    lowbit.check_quantize_status("cpu")  # no status word on the CPU: nothing to check


@needs_cuda
def test_default_does_not_wait_for_the_gpu():
    x = torch.randn(64, 128, device="cuda")
    lowbit.quantize_tensor(x, "int8", "token")  # makes the device's status word
    stream = torch.cuda.current_stream()
    torch.cuda._sleep(200_000_000)  # ~0.1 s of GPU work ahead of the call
    lowbit.quantize_tensor(x, "int8", "token")
    assert not stream.query(), "quantize_tensor waited for the stream"
    lowbit.quantize_tensor(x, "int8", "token", check=True)  # reads its status back: waits
    assert stream.query()


@needs_cuda
@pytest.mark.parametrize("scheme,granularity,where", [
    ("int8", "token", "at row 3, column 17"), ("int4", "group", "at row 3, column 17"),
    ("int8", "channel", "in column 17"), ("int8_asym", "tensor", "x: contains NaN or Inf")])
def test_nan_is_raised_by_check_quantize_status(scheme, granularity, where):
    lowbit.check_quantize_status()  # nothing left over from other tests
    lowbit.quantize_tensor(with_nan(), scheme, granularity, 32 if granularity == "group" else 0)  # no raise
    lowbit.quantize_tensor(torch.randn(8, 64, device="cuda"), scheme, "token")  # a clean call keeps the report
    with pytest.raises(lowbit.LowbitError, match=rf"{where} \(reported by a quantize since the status was last "
                                                 r"checked\); quantization needs finite values"):
        lowbit.check_quantize_status()
    lowbit.check_quantize_status()  # raised once
    lowbit.check_quantize_status(torch.device("cuda"))
    lowbit.check_quantize_status(torch.cuda.current_device())


@needs_cuda
def test_check_true_raises_at_the_call():
    lowbit.check_quantize_status()
    with pytest.raises(lowbit.LowbitError, match=r"at row 3, column 17; quantization needs finite values"):
        lowbit.quantize_tensor(with_nan(), "int8", "token", check=True)
    lowbit.check_quantize_status()  # check=True reports into its own workspace, not the status word


@needs_cuda
def test_other_stream_reports_into_the_same_word():
    lowbit.check_quantize_status()
    s = torch.cuda.Stream()
    x = with_nan(row=5, col=2)
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        lowbit.quantize_tensor(x, "int8", "token")
    with pytest.raises(lowbit.LowbitError, match=r"at row 5, column 2 \(reported"):
        lowbit.check_quantize_status("cuda")


@needs_cuda
def test_nan_in_a_cuda_graph_is_raised_after_replay():
    lowbit.check_quantize_status("cuda")  # makes the word before capture
    x = torch.randn(8, 64, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        lowbit.quantize_tensor(x, "int8", "token")  # warm-up outside capture
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        codes, scales, _ = lowbit.quantize_tensor(x, "int8", "token")
        with pytest.raises(lowbit.LowbitError, match="check=True synchronizes, which CUDA graph capture forbids"):
            lowbit.quantize_tensor(x, "int8", "token", check=True)
    graph.replay()
    lowbit.check_quantize_status()
    want = lowbit.quantize_tensor(x, "int8", "token")
    assert torch.equal(codes, want[0]) and torch.equal(scales, want[1])
    x[6, 40] = float("inf")
    graph.replay()
    with pytest.raises(lowbit.LowbitError, match=r"at row 6, column 40 \(reported"):
        lowbit.check_quantize_status()

// Reading and clearing the quantization kernels' status word on the host.
#include "cuda/quant/status.cuh"
#include "lowbit/cuda_check.h"

namespace lowbit::cuda {

QuantStatus read_status(const void* status, cuda_stream_t stream) {
  DeviceStatus host{};
  LOWBIT_CUDA_CHECK(cudaMemcpyAsync(&host, status, sizeof host, cudaMemcpyDeviceToHost, stream));
  LOWBIT_CUDA_CHECK(cudaStreamSynchronize(stream));
  QuantStatus seen;
  seen.non_finite = host.flag != 0;
  seen.row = host.row;
  seen.col = host.col;
  return seen;
}

void clear_status(void* status, cuda_stream_t stream) {
  LOWBIT_CUDA_CHECK(cudaMemsetAsync(status, 0, sizeof(DeviceStatus), stream));
}

}  // namespace lowbit::cuda

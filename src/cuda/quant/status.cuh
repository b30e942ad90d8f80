// The non-finite status word of the quantization kernels: the first NaN / Inf a kernel
// meets (row, column), in a caller's NonFiniteStatus or the head of the workspace.
#pragma once

#include "cuda/quant/quant_cuda.h"

namespace lowbit::cuda {

struct DeviceStatus {
  unsigned flag;
  unsigned unused;
  long long row;
  long long col;
};
static_assert(sizeof(DeviceStatus) <= kStatusBytes);

// The first report wins; later ones are dropped.
__device__ inline void report_non_finite(DeviceStatus* status, long long row, long long col) {
  if (atomicCAS(&status->flag, 0u, 1u) == 0u) {
    status->row = row;
    status->col = col;
  }
}

}  // namespace lowbit::cuda

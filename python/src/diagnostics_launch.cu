// An empty kernel launched in a loop, for _lowbit._time_launches (diagnostics.cpp).
#include <chrono>
#include <cstdint>

#include "lowbit/cuda_check.h"

namespace lowbit::python {
namespace {
__global__ void empty_kernel() {}
}  // namespace

double time_empty_launches(std::uintptr_t stream, int count) {
  auto* s = reinterpret_cast<cudaStream_t>(stream);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < count; ++i) {
    empty_kernel<<<1, 32, 0, s>>>();
    LOWBIT_CUDA_CHECK_LAUNCH();
  }
  const std::chrono::duration<double, std::micro> spent = std::chrono::steady_clock::now() - start;
  return spent.count() / count;
}

}  // namespace lowbit::python

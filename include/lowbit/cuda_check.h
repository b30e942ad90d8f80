// Checked CUDA calls: every runtime call and every launch goes through one of these.
#pragma once

#include <cuda_runtime.h>

#include "lowbit/error.h"

// A failed call also leaves its error as the thread's last error; it is cleared before
// the throw so that it does not resurface at an unrelated later launch check.
#define LOWBIT_CUDA_CHECK(expr)                                                      \
  do {                                                                               \
    const cudaError_t lowbit_status_ = (expr);                                       \
    if (lowbit_status_ != cudaSuccess) {                                             \
      (void)cudaGetLastError();                                                      \
      LOWBIT_FAIL("CUDA call `" #expr "` failed: ", cudaGetErrorName(lowbit_status_), \
                  ": ", cudaGetErrorString(lowbit_status_));                         \
    }                                                                                \
  } while (0)

// After every <<<...>>>: catches bad launch configurations at the launch site.
#define LOWBIT_CUDA_CHECK_LAUNCH() LOWBIT_CUDA_CHECK(cudaGetLastError())

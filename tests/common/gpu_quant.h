// One quantization problem on the GPU: x uploaded, codes / scales / mins / workspace
// allocated and poisoned, and cuda views of them for the public API.
#pragma once

#include <cstdint>
#include <vector>

#include "common/gpu.h"
#include "common/poison.h"
#include "common/specs.h"
#include "core/device_buffer.h"
#include "lowbit/cuda_check.h"
#include "lowbit/quant.h"

namespace lowbit::test {

struct DeviceQuantized {
  QuantSpec spec;
  std::int64_t rows, cols;
  QuantLayout layout;
  core::DeviceBuffer x, codes, scales, mins, workspace;
  TensorView xv;
  QuantizedView q;
  Workspace ws;

  // x_storage: rows x cols dense, stored in dtype.
  DeviceQuantized(const std::vector<std::uint8_t>& x_storage, DType dtype, const QuantSpec& spec_, std::int64_t rows_,
                  std::int64_t cols_)
      : spec(spec_),
        rows(rows_),
        cols(cols_),
        layout(quant_layout(spec_, rows_, cols_)),
        x(x_storage.size()),
        codes(static_cast<std::size_t>(rows_ * layout.code_cols)),
        scales(static_cast<std::size_t>(layout.scale_count()) * 4),
        mins(has_mins(spec_) ? scales.bytes() : 0),
        workspace(quantize_workspace_bytes(spec_, rows_, cols_)) {
    set_x(x_storage);
    LOWBIT_CUDA_CHECK(cudaMemset(codes.data(), kCodePoison, codes.bytes()));
    LOWBIT_CUDA_CHECK(cudaMemset(scales.data(), kFloatPoison, scales.bytes()));
    if (mins.bytes()) LOWBIT_CUDA_CHECK(cudaMemset(mins.data(), kFloatPoison, mins.bytes()));
    xv = TensorView::matrix(x.data(), dtype, Device::cuda, rows, cols);
    q = QuantizedView{TensorView::matrix(codes.data(), code_dtype(spec), Device::cuda, rows, layout.code_cols),
                      TensorView::vector(scales.data(), DType::f32, Device::cuda, layout.scale_count()),
                      has_mins(spec) ? TensorView::vector(mins.data(), DType::f32, Device::cuda, layout.scale_count())
                                    : TensorView{}};
    ws = Workspace{workspace.data(), workspace.bytes()};
  }

  // Then a device-wide sync: a cudaMemcpy from pageable memory may return before its
  // DMA lands, and kernels on a non-blocking stream are not ordered after it (the sticky
  // status test quantizes on one: with four test processes on the H100 it failed in most
  // of 60 runs, alone it passed).
  void set_x(const std::vector<std::uint8_t>& x_storage) {
    LOWBIT_CUDA_CHECK(cudaMemcpy(x.data(), x_storage.data(), x_storage.size(), cudaMemcpyHostToDevice));
    LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
  }
};

}  // namespace lowbit::test

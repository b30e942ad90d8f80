// A HostAttention problem (common/attention_inputs.h) copied to the device, each tensor
// in its own guarded buffer (common/gpu.h), for the GPU attention tests.
#pragma once

#include <cstddef>
#include <vector>

#include "common/attention_inputs.h"
#include "common/gpu.h"
#include "lowbit/quantized_attention.h"

namespace lowbit::test {

// The host problem copied to the device (each tensor in its own guarded buffer).
struct DeviceAttention {
  std::vector<GuardedBuffer> buffers;
  TensorView x;
  AttentionWeights w;

  explicit DeviceAttention(HostAttention& h) {
    buffers.reserve(16);
    auto up = [&](const void* data, std::size_t bytes) {
      buffers.emplace_back(bytes);
      buffers.back().poison(0);
      buffers.back().upload(data, bytes);
      return buffers.back().data();
    };
    const AttentionConfig& c = h.config;
    x = TensorView::matrix(up(h.x.data(), h.x.size() * 2), DType::f16, Device::cuda, c.seq_len, c.d_model);
    auto weight = [&](HostBlockWeight& hw) {
      BlockQuantizedView v = hw.view();
      v.codes.data = up(hw.codes.data(), hw.codes.size());
      v.codes.device = Device::cuda;
      v.scales.data = up(hw.scales.data(), hw.scales.size());
      v.scales.device = Device::cuda;
      if (v.global_scale.data) {
        v.global_scale.data = up(hw.global.data(), 4);
        v.global_scale.device = Device::cuda;
      }
      return v;
    };
    w.wq = weight(h.wq), w.wk = weight(h.wk), w.wv = weight(h.wv);
    auto bias = [&](std::vector<formats::Half>& b) {
      return TensorView::vector(up(b.data(), b.size() * 2), DType::f16, Device::cuda, static_cast<std::int64_t>(b.size()));
    };
    if (!h.bq.empty()) w.bq = bias(h.bq), w.bk = bias(h.bk), w.bv = bias(h.bv);
  }
};

}  // namespace lowbit::test

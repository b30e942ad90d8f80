// The production GPU quantization path behind include/lowbit/quant.h. Arguments
// arrive validated; nothing here synchronizes or allocates.
#pragma once

#include <cstdint>

#include "lowbit/quant.h"

namespace lowbit::cuda {

// What the reduction pass found about non-finite input, as read back from the workspace.
struct QuantStatus {
  bool non_finite = false;
  std::int64_t row = -1;  // -1: not known at this granularity
  std::int64_t col = -1;
};

// The status word's bytes (a NonFiniteStatus, or the head of a workspace).
inline constexpr std::size_t kStatusBytes = 64;

// With status_outside, the workspace holds the reductions only (the status is elsewhere).
std::size_t quantize_workspace_bytes(const QuantSpec& spec, std::int64_t rows, std::int64_t cols,
                                     bool status_outside = false);

// status: nullptr reports into the workspace's status word, cleared first; else into
// that (sticky) word, which is never cleared here.
void compute_scales(const TensorView& x, const QuantSpec& spec, const QuantizedView& out,
                    const Workspace& workspace, void* status, cuda_stream_t stream);
void quantize(const TensorView& x, const QuantSpec& spec, const QuantizedView& out,
              const Workspace& workspace, void* status, cuda_stream_t stream);
void quantize_with_scales(const TensorView& x, const QuantSpec& spec, const QuantizedView& out,
                          cuda_stream_t stream);
void dequantize(const QuantizedView& in, const QuantSpec& spec, const TensorView& out,
                cuda_stream_t stream);

QuantStatus read_status(const void* status, cuda_stream_t stream);  // synchronizes
void clear_status(void* status, cuda_stream_t stream);

}  // namespace lowbit::cuda

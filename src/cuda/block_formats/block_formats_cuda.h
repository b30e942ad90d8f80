// The GPU side of include/lowbit/block_formats.h. Arguments arrive validated
// (shapes, dtypes, devices, non-overlap, device pointers); nothing here allocates.
//
// Workspace contract (kBlockEncodeWorkspaceBytes = 16 bytes, 8-byte aligned):
//   bytes 0..7   u64 key of the first NaN/Inf element, (row << 32) | column, or
//                all ones if none (rows and columns < 2^31: checked by the API)
//   bytes 8..11  u32 max |x| of the tensor as float bits (nvfp4 only)
// block_encode() initializes both on `stream` (two cudaMemsetAsync) before its
// kernels, so a workspace must not be shared by encodes in flight on different
// streams. nvfp4 runs a reduction kernel and then the encode kernel on the same
// stream: stream order is the only synchronization between them. Nothing here
// synchronizes except read_block_status().
#pragma once

#include <cstddef>
#include <cstdint>

#include "lowbit/block_formats.h"

namespace lowbit::cuda {

constexpr std::size_t kBlockEncodeWorkspaceBytes = 16;

struct BlockEncodeWorkspace {
  unsigned long long first_non_finite;  // (row << 32) | col; ~0ull: none
  unsigned int tensor_abs_bits;
  unsigned int unused;
};
static_assert(sizeof(BlockEncodeWorkspace) == kBlockEncodeWorkspaceBytes);

struct BlockStatus {
  bool non_finite = false;
  std::int64_t row = -1;
  std::int64_t col = -1;
};

void block_encode(const TensorView& x, BlockFormat format, const BlockQuantizedView& out,
                  const Workspace& workspace, cuda_stream_t stream);
void block_decode(const BlockQuantizedView& in, BlockFormat format, const TensorView& out,
                  cuda_stream_t stream);

BlockStatus read_block_status(const Workspace& workspace, cuda_stream_t stream);  // synchronizes

}  // namespace lowbit::cuda

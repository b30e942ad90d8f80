// The GPU side of include/lowbit/flash_attention.h: the one launch the API calls.
// Arguments arrive validated; no CUDA headers here.
#pragma once

#include <cstdint>

#include "lowbit/flash_attention.h"

namespace lowbit::cuda::flash {

// Which kernel runs: the wgmma kernel where the device and the operands allow it (else
// the mma.sync kernel), or one of them by name (tests and benchmarks; wgmma throws where
// it cannot run).
enum class FlashKernel { automatic, mma, wgmma };

// Whether the wgmma kernel runs on the current device.
bool flash_wgmma_available();

// The batch's prefix sums are on the device (uploaded by the API into its workspace);
// max_q_len: the longest sequence's queries (the grid's query tiles). cu_q and cu_k null:
// one sequence, q's rows and k's rows (batch 1, max_q_len q.rows()).
void flash_attention(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                     const std::int32_t* cu_q, const std::int32_t* cu_k, std::int64_t batch, std::int64_t max_q_len,
                     const FlashAttentionParams& params, cuda_stream_t stream,
                     FlashKernel kernel = FlashKernel::automatic);

}  // namespace lowbit::cuda::flash

// Token sampling on the device for a batch of rows with per-row parameters: the
// distribution and the draw of formats/sampling.h, the same token as the CPU sampler
// (engine/sampling.h) for the same logits, parameters and seed. Sort-free: top-k and
// top-p thresholds are found by radix selection over the tokens' 64-bit order keys
// (the top-p one weighted by the integer weights, so that its sums are exact).
#pragma once

#include <cstddef>
#include <cstdint>

#include "formats/sampling.h"
#include "lowbit/tensor.h"

namespace lowbit::cuda::model {

// Device pointers, all on one device.
struct SamplingBatch {
  const float* logits = nullptr;  // [rows x logits_stride] f32; row r's first `vocab` are read
  // Or f16 logits, same shape (exactly one of the two is set): the engine's output head
  // writes f16, whose values f32 holds exactly.
  const std::uint16_t* logits_f16 = nullptr;
  std::int64_t rows = 0, vocab = 0, logits_stride = 0;
  const formats::sampling::RowParams* params = nullptr;  // [rows]
  // Row r's penalty window: entries [offsets[r], offsets[r + 1]) of ids / counts, ids
  // sorted and unique within the row, 0 <= id < vocab, counts > 0 (engine/sampling.h's
  // check_penalties on the host). offsets may be null: no penalties anywhere.
  const std::int32_t* penalty_offsets = nullptr;  // [rows + 1]
  const std::int32_t* penalty_ids = nullptr;
  const std::int32_t* penalty_counts = nullptr;
  std::int32_t* tokens = nullptr;  // [rows] out: the drawn token of each row
  // [rows] out, optional: 1 where the row's logits held a NaN or an infinity, else 0 (the
  // draw sanitizes them, formats/sampling.h; the engine refuses such a step).
  std::int32_t* non_finite = nullptr;
};

// Device scratch for sample_rows: the penalized logits, rows x vocab f32.
std::size_t sample_rows_workspace_bytes(std::int64_t rows, std::int64_t vocab);

// One block a row. Throws lowbit::Error naming the field for a bad shape, a null
// pointer or a workspace smaller than sample_rows_workspace_bytes; the device contents
// (parameters, penalty lists) are the caller's to check.
void sample_rows(const SamplingBatch& batch, void* workspace, std::size_t workspace_bytes, cuda_stream_t stream);

}  // namespace lowbit::cuda::model

// The ggml types the CPU engine's blocks form holds as blocks (cpu/weight_blocks.h),
// and their repacking at load: each value is the f32 value ggml's reference decoder
// (gguf/dequant.h) gives, bit for bit, so a block matrix decodes to exactly the f32
// form's matrix.
//
//   Q4_0, Q4_1, Q8_0   as they are
//   Q5_0               q8_0      (q - 16, the same f16 d)
//   Q5_1               q5_f32    (d and m as f32)
//   Q5_K               q5_f32    (each sub-block of 32: d * scale, -(dmin * min); the code
//                                 with its fifth bit a byte)
//   Q4_K               q4_f16    (d, dmin and the sub-block's 6-bit scale and min as the
//                                 file has them; the codes as nibbles)
//   Q6_K               q6_f16x2  (d and the two sub-blocks' signed scales as the file has
//                                 them; the codes' low four bits as nibbles, the top two
//                                 as 2-bit fields)
//   Q2_K               q2_f16x2  (d, dmin and the two sub-blocks' 4-bit scales and mins as
//                                 the file has them; the codes as 2-bit fields)
//   Q3_K               q3_f16x2  (d and the two sub-blocks' 6-bit scales (minus 32) as the
//                                 file has them; the codes as 2-bit fields and third bits)
//
// The float types have no block form.
#pragma once

#include <cstdint>
#include <optional>

#include "cpu/weight_blocks.h"
#include "engine/gguf/ggml_types.h"

namespace lowbit::engine {

// The block type `type` becomes, or nullopt when it has none.
std::optional<cpu::WeightBlockType> cpu_block_type(GgmlType type);

// `count` values of `type` (a whole number of its blocks) at src as count / 32 blocks
// of cpu_block_type(type) at dst. Throws lowbit::Error for a type without a block form
// or a count that is not a whole number of its blocks.
void repack_cpu_blocks(GgmlType type, const std::uint8_t* src, std::int64_t count, std::uint8_t* dst);

}  // namespace lowbit::engine

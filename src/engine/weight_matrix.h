// One weight matrix of the CPU forward pass, [rows x cols] with a row per output
// (each row contiguous over cols, as GGUF stores it), held in one of two forms:
//   f32     decoded once at load: the FP32 reference (any type gguf/dequant.h decodes)
//   blocks  blocks of 32 (cpu/weight_blocks.h) multiplied with 8-bit activations
//           (cpu/block_dot.h): the file's Q4_0 / Q4_1 / Q8_0 blocks as they are, the
//           K-quants and Q5 types repacked exactly (engine/cpu_block_repack.h); the
//           types without a block form (F16, BF16, F32) are decoded to f32 as above
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cpu/block_dot.h"
#include "engine/gguf/reader.h"

namespace lowbit::engine {

enum class WeightForm { f32, blocks };

const char* weight_form_name(WeightForm form);   // "f32" | "blocks"
WeightForm parse_weight_form(const char* name);  // throws naming the value

class WeightMatrix {
 public:
  WeightMatrix() = default;
  // A 1-D tensor is one row. Throws lowbit::Error naming the tensor for a type
  // neither form reads, or weights that are not finite.
  static WeightMatrix load(const GgufTensor& tensor, WeightForm form);

  std::int64_t rows() const { return rows_; }
  std::int64_t cols() const { return cols_; }
  bool holds_blocks() const { return holds_blocks_; }
  cpu::WeightBlockType block_type() const { return block_type_; }

  // The f32 values [rows x cols]; throws when the matrix holds blocks.
  const std::vector<float>& f32() const;
  // Row r's blocks (row_bytes() bytes); only when holds_blocks().
  const std::uint8_t* row_blocks(std::int64_t r) const { return blocks_.data() + r * row_bytes_; }
  std::int64_t row_bytes() const { return row_bytes_; }

  // Row r as f32 values (an embedding lookup), whichever the form.
  void decode_row(std::int64_t r, float* out) const;
  std::size_t bytes() const;  // what the matrix holds in memory

 private:
  std::int64_t rows_ = 0, cols_ = 0, row_bytes_ = 0;
  bool holds_blocks_ = false;
  cpu::WeightBlockType block_type_ = cpu::WeightBlockType::q4_0;
  std::vector<float> f32_;
  std::vector<std::uint8_t> blocks_;
};

}  // namespace lowbit::engine

#include "engine/weight_matrix.h"

#include <algorithm>
#include <cstring>
#include <string_view>

#include "engine/cpu_block_repack.h"
#include "engine/gguf/dequant.h"
#include "lowbit/error.h"

namespace lowbit::engine {
namespace {

// Rows per parallel chunk of a repack: ~64K values each.
std::int64_t rows_per_chunk(std::int64_t cols) {
  return std::max<std::int64_t>(1, 65536 / std::max<std::int64_t>(cols, 1));
}

}  // namespace

const char* weight_form_name(WeightForm form) { return form == WeightForm::f32 ? "f32" : "blocks"; }

WeightForm parse_weight_form(const char* name) {
  const std::string_view n(name);
  if (n == "f32") return WeightForm::f32;
  if (n == "blocks") return WeightForm::blocks;
  LOWBIT_FAIL("weight form: expected f32 or blocks, got '", n, "'");
}

WeightMatrix WeightMatrix::load(const GgufTensor& tensor, WeightForm form) {
  WeightMatrix m;
  m.cols_ = static_cast<std::int64_t>(tensor.dims[0]);
  m.rows_ = static_cast<std::int64_t>(tensor.element_count) / std::max<std::int64_t>(m.cols_, 1);
  const std::optional<cpu::WeightBlockType> block_type = cpu_block_type(tensor.type);
  if (form == WeightForm::blocks && block_type) {
    const GgmlTypeInfo& info = ggml_type_info(tensor.type);
    m.holds_blocks_ = true;
    m.block_type_ = *block_type;
    m.row_bytes_ = m.cols_ / cpu::kValuesPerBlock * cpu::weight_block_bytes(m.block_type_);
    LOWBIT_CHECK(m.cols_ % info.block_elements == 0 &&
                     m.cols_ / info.block_elements * info.block_bytes * m.rows_ ==
                         static_cast<std::int64_t>(tensor.byte_size),
                 "model: tensor '", tensor.name, "' has ", tensor.byte_size, " bytes, expected ", m.rows_,
                 " rows of ", m.cols_, " values in ", info.name, " blocks of ", info.block_elements);
    m.blocks_.resize(static_cast<std::size_t>(m.row_bytes_ * m.rows_));
    const std::int64_t src_row_bytes = m.cols_ / info.block_elements * info.block_bytes;
    const std::int64_t chunk = rows_per_chunk(m.cols_), chunks = (m.rows_ + chunk - 1) / chunk;
    std::int64_t bad_row = m.rows_, bad_block = 0;
    // Nothing below throws (an exception cannot leave the region): the type has a block
    // form and every chunk is whole blocks, both checked above.
#pragma omp parallel for schedule(static)
    for (std::int64_t c = 0; c < chunks; ++c) {
      const std::int64_t r0 = c * chunk, rows = std::min(chunk, m.rows_ - r0);
      std::uint8_t* dst = m.blocks_.data() + r0 * m.row_bytes_;
      repack_cpu_blocks(tensor.type, tensor.data + r0 * src_row_bytes, rows * m.cols_, dst);
      // Checked where the f32 form checks its values: finite parameters, finite values.
      const std::int64_t first = cpu::first_non_finite_block(m.block_type_, dst, rows * m.cols_);
      if (first < rows * m.cols_ / cpu::kValuesPerBlock) {
#pragma omp critical
        if (r0 + first / (m.cols_ / cpu::kValuesPerBlock) < bad_row) {
          bad_row = r0 + first / (m.cols_ / cpu::kValuesPerBlock);
          bad_block = first % (m.cols_ / cpu::kValuesPerBlock);
        }
      }
    }
    LOWBIT_CHECK(bad_row == m.rows_, "tensor '", tensor.name, "': row ", bad_row, ", columns ",
                 bad_block * cpu::kValuesPerBlock, "..", bad_block * cpu::kValuesPerBlock + 31,
                 ": a scale or offset is NaN or Inf; the weights must be finite");
    return m;
  }
  m.f32_ = dequantize_tensor(tensor);
  return m;
}

const std::vector<float>& WeightMatrix::f32() const {
  LOWBIT_CHECK(!holds_blocks_, "weight matrix: holds quantized blocks, not f32 values");
  return f32_;
}

void WeightMatrix::decode_row(std::int64_t r, float* out) const {
  LOWBIT_CHECK(r >= 0 && r < rows_, "weight matrix: row ", r, " outside 0..", rows_ - 1);
  if (!holds_blocks_) {
    std::memcpy(out, f32_.data() + r * cols_, static_cast<std::size_t>(cols_) * sizeof(float));
    return;
  }
  cpu::decode_weight_blocks(block_type_, row_blocks(r), cols_, out);
}

std::size_t WeightMatrix::bytes() const { return f32_.size() * sizeof(float) + blocks_.size(); }

}  // namespace lowbit::engine

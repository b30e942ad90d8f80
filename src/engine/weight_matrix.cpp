#include "engine/weight_matrix.h"

#include <cstring>
#include <string_view>

#include "engine/gguf/dequant.h"
#include "lowbit/error.h"

namespace lowbit::engine {
namespace {

bool block_type_of(GgmlType type, cpu::WeightBlockType* out) {
  switch (type) {
    case GgmlType::q4_0: *out = cpu::WeightBlockType::q4_0; return true;
    case GgmlType::q4_1: *out = cpu::WeightBlockType::q4_1; return true;
    case GgmlType::q8_0: *out = cpu::WeightBlockType::q8_0; return true;
    default: return false;
  }
}

GgmlType ggml_type_of(cpu::WeightBlockType type) {
  switch (type) {
    case cpu::WeightBlockType::q4_0: return GgmlType::q4_0;
    case cpu::WeightBlockType::q4_1: return GgmlType::q4_1;
    case cpu::WeightBlockType::q8_0: return GgmlType::q8_0;
  }
  return GgmlType::f32;
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
  if (form == WeightForm::blocks && block_type_of(tensor.type, &m.block_type_)) {
    m.holds_blocks_ = true;
    m.row_bytes_ = m.cols_ / cpu::kValuesPerBlock * cpu::weight_block_bytes(m.block_type_);
    LOWBIT_CHECK(m.cols_ % cpu::kValuesPerBlock == 0 &&
                     m.row_bytes_ * m.rows_ == static_cast<std::int64_t>(tensor.byte_size),
                 "model: tensor '", tensor.name, "' has ", tensor.byte_size, " bytes, expected ", m.rows_, " rows of ",
                 m.cols_ / cpu::kValuesPerBlock, " blocks");
    m.blocks_.assign(tensor.data, tensor.data + tensor.byte_size);
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
  dequantize_row(ggml_type_of(block_type_), row_blocks(r), out, cols_);
}

std::size_t WeightMatrix::bytes() const { return f32_.size() * sizeof(float) + blocks_.size(); }

}  // namespace lowbit::engine

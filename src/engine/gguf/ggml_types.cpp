#include "engine/gguf/ggml_types.h"

#include <array>

#include "lowbit/error.h"

namespace lowbit::engine {
namespace {

// Block sizes are those of ggml's block structs: e.g. Q4_1 = fp16 scale + fp16 min +
// 32 nibbles = 20 bytes per 32 elements; the K-quants use super-blocks of 256.
constexpr std::uint32_t k_super = 256;

constexpr std::array<GgmlTypeInfo, 32> k_types{{
    {GgmlType::f32, "F32", 1, 4},
    {GgmlType::f16, "F16", 1, 2},
    {GgmlType::q4_0, "Q4_0", 32, 2 + 16},
    {GgmlType::q4_1, "Q4_1", 32, 2 + 2 + 16},
    {GgmlType::q5_0, "Q5_0", 32, 2 + 4 + 16},
    {GgmlType::q5_1, "Q5_1", 32, 2 + 2 + 4 + 16},
    {GgmlType::q8_0, "Q8_0", 32, 2 + 32},
    {GgmlType::q8_1, "Q8_1", 32, 2 + 2 + 32},
    {GgmlType::q2_k, "Q2_K", k_super, k_super / 16 + k_super / 4 + 2 + 2},
    {GgmlType::q3_k, "Q3_K", k_super, k_super / 8 + k_super / 4 + 12 + 2},
    {GgmlType::q4_k, "Q4_K", k_super, 2 + 2 + 12 + k_super / 2},
    {GgmlType::q5_k, "Q5_K", k_super, 2 + 2 + 12 + k_super / 8 + k_super / 2},
    {GgmlType::q6_k, "Q6_K", k_super, k_super / 2 + k_super / 4 + k_super / 16 + 2},
    {GgmlType::q8_k, "Q8_K", k_super, 4 + k_super + k_super / 16 * 2},
    {GgmlType::iq2_xxs, "IQ2_XXS", k_super, 2 + k_super / 8 * 2},
    {GgmlType::iq2_xs, "IQ2_XS", k_super, 2 + k_super / 8 * 2 + k_super / 32},
    {GgmlType::iq3_xxs, "IQ3_XXS", k_super, 2 + 3 * (k_super / 8)},
    {GgmlType::iq1_s, "IQ1_S", k_super, 2 + k_super / 8 + k_super / 16},
    {GgmlType::iq4_nl, "IQ4_NL", 32, 2 + 16},
    {GgmlType::iq3_s, "IQ3_S", k_super, 2 + k_super / 4 + k_super / 32 + k_super / 8 + k_super / 64},
    {GgmlType::iq2_s, "IQ2_S", k_super, 2 + k_super / 4 + k_super / 32 + k_super / 32},
    {GgmlType::iq4_xs, "IQ4_XS", k_super, 2 + 2 + k_super / 64 + k_super / 2},
    {GgmlType::i8, "I8", 1, 1},
    {GgmlType::i16, "I16", 1, 2},
    {GgmlType::i32, "I32", 1, 4},
    {GgmlType::i64, "I64", 1, 8},
    {GgmlType::f64, "F64", 1, 8},
    {GgmlType::iq1_m, "IQ1_M", k_super, k_super / 8 + k_super / 16 + k_super / 32},
    {GgmlType::bf16, "BF16", 1, 2},
    {GgmlType::tq1_0, "TQ1_0", k_super, (k_super - 4 * k_super / 64) / 5 + k_super / 64 + 2},
    {GgmlType::tq2_0, "TQ2_0", k_super, k_super / 4 + 2},
    {GgmlType::mxfp4, "MXFP4", 32, 1 + 16},
}};

}  // namespace

const GgmlTypeInfo* find_ggml_type(std::uint32_t id) {
  for (const GgmlTypeInfo& info : k_types) {
    if (static_cast<std::uint32_t>(info.type) == id) return &info;
  }
  return nullptr;
}

const GgmlTypeInfo& ggml_type_info(GgmlType type) {
  const GgmlTypeInfo* info = find_ggml_type(static_cast<std::uint32_t>(type));
  LOWBIT_CHECK(info != nullptr, "ggml type: id ", static_cast<std::uint32_t>(type), " is not in the type table");
  return *info;
}

std::string_view ggml_type_name(GgmlType type) { return ggml_type_info(type).name; }

std::string ggml_type_id_name(std::uint32_t id) {
  const GgmlTypeInfo* info = find_ggml_type(id);
  return info ? std::string(info->name) : "unknown ggml type " + std::to_string(id);
}

}  // namespace lowbit::engine

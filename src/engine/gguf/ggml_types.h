// The ggml tensor types that GGUF files name by id: each type's name, how many
// elements one block holds and how many bytes it takes. One table
// (ggml_types.cpp) answers every question about a type's storage.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace lowbit::engine {

// Ids as stored in GGUF tensor infos. Gaps (4, 5, 31-33, 36-38) are ids that ggml
// retired; files never hold them.
enum class GgmlType : std::uint32_t {
  f32 = 0,
  f16 = 1,
  q4_0 = 2,
  q4_1 = 3,
  q5_0 = 6,
  q5_1 = 7,
  q8_0 = 8,
  q8_1 = 9,
  q2_k = 10,
  q3_k = 11,
  q4_k = 12,
  q5_k = 13,
  q6_k = 14,
  q8_k = 15,
  iq2_xxs = 16,
  iq2_xs = 17,
  iq3_xxs = 18,
  iq1_s = 19,
  iq4_nl = 20,
  iq3_s = 21,
  iq2_s = 22,
  iq4_xs = 23,
  i8 = 24,
  i16 = 25,
  i32 = 26,
  i64 = 27,
  f64 = 28,
  iq1_m = 29,
  bf16 = 30,
  tq1_0 = 34,
  tq2_0 = 35,
  mxfp4 = 39,
};

struct GgmlTypeInfo {
  GgmlType type;
  std::string_view name;            // as ggml spells it: "F32", "Q4_1", "Q6_K"
  std::uint32_t block_elements;     // elements per block (1 for plain scalars)
  std::uint32_t block_bytes;        // bytes per block
};

// The table entry of a raw id read from a file, or nullptr if the id is unknown.
const GgmlTypeInfo* find_ggml_type(std::uint32_t id);

// The table entry of a known type (every GgmlType enumerator has one).
const GgmlTypeInfo& ggml_type_info(GgmlType type);

std::string_view ggml_type_name(GgmlType type);

// "Q4_1" for a known id, "unknown ggml type 4" otherwise (for error messages).
std::string ggml_type_id_name(std::uint32_t id);

}  // namespace lowbit::engine

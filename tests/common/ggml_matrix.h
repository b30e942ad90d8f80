// A random N x K weight matrix in a ggml block type, as a GGUF tensor (random_blocks.h:
// uniform codes, jittered scales), and its ggml values (engine/gguf/dequant): the input of
// the weight-only block-form tests on the CPU and the GPU.
#pragma once

#include <cstdint>
#include <vector>

#include "common/gguf_writer.h"
#include "engine/gguf/dequant.h"
#include "engine/gguf/reader.h"
#include "engine/synth/random_blocks.h"

namespace lowbit::test {

struct GgmlMatrix {
  engine::GgufFile file;
  const engine::GgufTensor& tensor() const { return *file.find_tensor("w"); }
  // ggml's f32 values, [N x K] row-major.
  std::vector<float> values() const { return engine::dequantize_tensor(tensor()); }
};

// Random blocks of an N x K matrix in the type, as bytes (`edit` may change them first).
inline std::vector<std::uint8_t> random_ggml_blocks(std::uint32_t type, std::int64_t n, std::int64_t k,
                                                    std::uint64_t seed, float stddev = 0.05f) {
  const auto ggml_type = static_cast<engine::GgmlType>(type);
  const engine::GgmlTypeInfo& info = engine::ggml_type_info(ggml_type);
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(n * k / info.block_elements) * info.block_bytes);
  engine::fill_random_blocks(ggml_type, 0.0f, stddev, seed, bytes);
  return bytes;
}

inline GgmlMatrix ggml_matrix(std::uint32_t type, std::int64_t n, std::int64_t k, const std::vector<std::uint8_t>& bytes) {
  GgufWriter w;
  w.add_tensor("w", {static_cast<std::uint64_t>(k), static_cast<std::uint64_t>(n)}, type, bytes);
  return GgmlMatrix{engine::GgufFile::from_bytes(w.bytes())};
}

inline GgmlMatrix random_ggml_matrix(std::uint32_t type, std::int64_t n, std::int64_t k, std::uint64_t seed,
                                     float stddev = 0.05f) {
  return ggml_matrix(type, n, k, random_ggml_blocks(type, n, k, seed, stddev));
}

}  // namespace lowbit::test

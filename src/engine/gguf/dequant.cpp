#include "engine/gguf/dequant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "formats/float16.h"
#include "engine/gguf/finite_values.h"
#include "lowbit/error.h"

namespace lowbit::engine {
namespace {

float f16_at(const std::uint8_t* p) {
  std::uint16_t bits;
  std::memcpy(&bits, p, 2);  // blocks are only 2-byte packed: no aligned loads
  return formats::half_to_float(formats::Half{bits});
}

// Blocks of 32: a f16 scale d (and, for Q4_1, a f16 min m) then the codes. In the
// 4-bit types byte j holds element j (low nibble) and element j + 16 (high nibble).
void q8_0(const std::uint8_t* src, float* dst, std::int64_t blocks) {
  for (std::int64_t b = 0; b < blocks; ++b, src += 34, dst += 32) {
    const float d = f16_at(src);
    for (int j = 0; j < 32; ++j) dst[j] = static_cast<float>(static_cast<std::int8_t>(src[2 + j])) * d;
  }
}

void q4_0(const std::uint8_t* src, float* dst, std::int64_t blocks) {
  for (std::int64_t b = 0; b < blocks; ++b, src += 18, dst += 32) {
    const float d = f16_at(src);
    const std::uint8_t* qs = src + 2;
    for (int j = 0; j < 16; ++j) {
      dst[j] = static_cast<float>((qs[j] & 15) - 8) * d;
      dst[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
    }
  }
}

void q4_1(const std::uint8_t* src, float* dst, std::int64_t blocks) {
  for (std::int64_t b = 0; b < blocks; ++b, src += 20, dst += 32) {
    const float d = f16_at(src);
    const float m = f16_at(src + 2);
    const std::uint8_t* qs = src + 4;
    for (int j = 0; j < 16; ++j) {
      // One rounding of the exact q * d + m, as the GPU's weight-only kernels define it.
      dst[j] = std::fma(static_cast<float>(qs[j] & 15), d, m);
      dst[j + 16] = std::fma(static_cast<float>(qs[j] >> 4), d, m);
    }
  }
}

}  // namespace

bool can_dequantize(GgmlType type) {
  switch (type) {
    case GgmlType::f32:
    case GgmlType::f16:
    case GgmlType::bf16:
    case GgmlType::q8_0:
    case GgmlType::q4_0:
    case GgmlType::q4_1: return true;
    default: return false;
  }
}

void dequantize_row(GgmlType type, const std::uint8_t* src, float* dst, std::int64_t count, std::string_view what) {
  LOWBIT_CHECK(can_dequantize(type), what, ": type ", ggml_type_id_name(static_cast<std::uint32_t>(type)),
               " is not supported (expected F32, F16, BF16, Q8_0, Q4_0 or Q4_1)");
  const GgmlTypeInfo& info = ggml_type_info(type);
  LOWBIT_CHECK(count >= 0 && count % info.block_elements == 0, what, ": ", count,
               " elements is not a whole number of ", info.name, " blocks of ", info.block_elements);
  const std::int64_t blocks = count / info.block_elements;
  switch (type) {
    case GgmlType::f32: std::memcpy(dst, src, static_cast<std::size_t>(count) * 4); return;
    case GgmlType::f16:
      for (std::int64_t i = 0; i < count; ++i) dst[i] = f16_at(src + 2 * i);
      return;
    case GgmlType::bf16:
      for (std::int64_t i = 0; i < count; ++i) {
        std::uint16_t bits;
        std::memcpy(&bits, src + 2 * i, 2);
        dst[i] = formats::bf16_to_float(formats::BFloat16{bits});
      }
      return;
    case GgmlType::q8_0: q8_0(src, dst, blocks); return;
    case GgmlType::q4_0: q4_0(src, dst, blocks); return;
    case GgmlType::q4_1: q4_1(src, dst, blocks); return;
    default: break;
  }
  LOWBIT_FAIL(what, ": unreachable type");
}

std::vector<float> dequantize_tensor(const GgufTensor& tensor) {
  const std::string what = "tensor '" + std::string(tensor.name) + "'";
  LOWBIT_CHECK(can_dequantize(tensor.type), what, ": type ", ggml_type_name(tensor.type),
               " is not supported (expected F32, F16, BF16, Q8_0, Q4_0 or Q4_1)");
  std::vector<float> out(static_cast<std::size_t>(tensor.element_count));
  const GgmlTypeInfo& info = ggml_type_info(tensor.type);
  const auto count = static_cast<std::int64_t>(tensor.element_count);
  LOWBIT_CHECK(count % info.block_elements == 0, what, ": ", count, " elements is not a whole number of ",
               info.name, " blocks");
  // Rows along dims[0] decode independently: split the work over threads in blocks.
  const std::int64_t blocks = count / info.block_elements;
  const std::int64_t chunk_blocks = 4096;
  const std::int64_t chunks = (blocks + chunk_blocks - 1) / chunk_blocks;
  // Each chunk is checked for NaN and Inf while it is still in cache.
  std::int64_t bad = count;
#pragma omp parallel for schedule(static) reduction(min : bad)
  for (std::int64_t c = 0; c < chunks; ++c) {
    const std::int64_t b0 = c * chunk_blocks;
    const std::int64_t nb = std::min(chunk_blocks, blocks - b0);
    float* chunk = out.data() + b0 * info.block_elements;
    dequantize_row(tensor.type, tensor.data + b0 * info.block_bytes, chunk, nb * info.block_elements, what);
    const std::int64_t first = first_non_finite(std::span<const float>(chunk, nb * info.block_elements));
    if (first < nb * info.block_elements) bad = std::min(bad, b0 * info.block_elements + first);
  }
  if (bad < count) {
    const auto cols = static_cast<std::int64_t>(tensor.dims[0]);
    LOWBIT_FAIL(what, ": element ", bad, " (row ", bad / cols, ", column ", bad % cols, ") is ",
                out[static_cast<std::size_t>(bad)], "; the weights must be finite");
  }
  return out;
}

}  // namespace lowbit::engine

#include "engine/gguf/dequant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/gguf/ggml_codes.h"
#include "engine/gguf/k_scales.h"
#include "formats/float16.h"
#include "engine/gguf/finite_values.h"
#include "lowbit/error.h"

namespace lowbit::engine {
namespace {

constexpr const char* k_supported =
    "expected F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K or Q6_K";

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

// Q5_0 / Q5_1: as Q4_0 / Q4_1 with a fifth bit per element (ggml_codes.h). Q5_1 is
// q * d + m in two roundings, as ggml's reference and gguf's NumPy decoder compute it.
void q5_0(const std::uint8_t* src, float* dst, std::int64_t blocks) {
  for (std::int64_t b = 0; b < blocks; ++b, src += 22, dst += 32) {
    const float d = f16_at(src);
    std::uint8_t q[32];
    q5_codes(src + 2, src + 6, q);
    for (int j = 0; j < 32; ++j) dst[j] = static_cast<float>(q[j] - 16) * d;
  }
}

void q5_1(const std::uint8_t* src, float* dst, std::int64_t blocks) {
  for (std::int64_t b = 0; b < blocks; ++b, src += 24, dst += 32) {
    const float d = f16_at(src);
    const float m = f16_at(src + 2);
    std::uint8_t q[32];
    q5_codes(src + 4, src + 8, q);
    for (int j = 0; j < 32; ++j) dst[j] = static_cast<float>(q[j]) * d + m;
  }
}

// The K-quants: super-blocks of 256 in sub-blocks of 16 or 32, each sub-block's scale
// (and min) a small integer times the super-block's f16 d (and dmin). Each value is
// computed as ggml's reference decoder does, one f32 rounding per operation in its
// order: (d * scale) * q, minus (dmin * min).
//
// Q2_K: the codes and 4-bit scales and mins of sixteen sub-blocks of 16 (ggml_codes.h),
// d, dmin.
void q2_k(const std::uint8_t* src, float* dst, std::int64_t blocks) {
  std::uint8_t q[256];
  for (std::int64_t b = 0; b < blocks; ++b, src += 84) {
    const float d = f16_at(src + kQ2kD);
    const float dmin = f16_at(src + kQ2kDmin);
    q2_k_codes(src, q);
    for (int sub = 0; sub < 16; ++sub) {
      const Q2kScaleMin sm = q2_k_scale_min(src, sub);
      const float dl = d * static_cast<float>(sm.scale);
      const float ml = dmin * static_cast<float>(sm.min);
      for (int l = 0; l < 16; ++l) *dst++ = dl * static_cast<float>(q[16 * sub + l]) - ml;
    }
  }
}

// Q3_K: the codes and 6-bit signed scales of sixteen sub-blocks of 16 (ggml_codes.h), d.
void q3_k(const std::uint8_t* src, float* dst, std::int64_t blocks) {
  std::uint8_t q[256];
  for (std::int64_t b = 0; b < blocks; ++b, src += 110) {
    const float d = f16_at(src + kQ3kD);
    q3_k_codes(src, q);
    for (int sub = 0; sub < 16; ++sub) {
      const float dl = d * static_cast<float>(q3_k_scale(src, sub));
      for (int l = 0; l < 16; ++l) *dst++ = dl * static_cast<float>(q[16 * sub + l] - 4);
    }
  }
}

// Q4_K / Q5_K: d, dmin, scales[12] (k_scales.h), the codes (ggml_codes.h) of eight
// sub-blocks of 32. Q6_K: the codes, scales[16] (int8) for sub-blocks of 16, d.
template <bool five_bits>
void q4_k_or_q5_k(const std::uint8_t* src, float* dst, std::int64_t blocks) {
  constexpr int block_bytes = five_bits ? 176 : 144;
  std::uint8_t q[256];
  for (std::int64_t b = 0; b < blocks; ++b, src += block_bytes) {
    const float d = f16_at(src + kQ4kD);
    const float dmin = f16_at(src + kQ4kDmin);
    q4_k_codes(src, five_bits, q);
    for (int sub = 0; sub < 8; ++sub) {
      const KScaleMin sm = unpack_k_scale_min(src + kQ4kScales, sub);
      const float dl = d * static_cast<float>(sm.scale);
      const float ml = dmin * static_cast<float>(sm.min);
      for (int l = 0; l < 32; ++l) *dst++ = dl * static_cast<float>(q[32 * sub + l]) - ml;
    }
  }
}

void q6_k(const std::uint8_t* src, float* dst, std::int64_t blocks) {
  std::uint8_t q[256];
  for (std::int64_t b = 0; b < blocks; ++b, src += 210, dst += 256) {
    const float d = f16_at(src + kQ6kD);
    q6_k_codes(src, q);
    for (int j = 0; j < 256; ++j) {
      dst[j] = d * static_cast<float>(q6_k_scale(src, j / 16)) * static_cast<float>(q[j] - 32);
    }
  }
}

}  // namespace

const char* dequantizable_types() { return k_supported; }

bool can_dequantize(GgmlType type) {
  switch (type) {
    case GgmlType::f32:
    case GgmlType::f16:
    case GgmlType::bf16:
    case GgmlType::q8_0:
    case GgmlType::q4_0:
    case GgmlType::q4_1:
    case GgmlType::q5_0:
    case GgmlType::q5_1:
    case GgmlType::q2_k:
    case GgmlType::q3_k:
    case GgmlType::q4_k:
    case GgmlType::q5_k:
    case GgmlType::q6_k: return true;
    default: return false;
  }
}

void dequantize_row(GgmlType type, const std::uint8_t* src, float* dst, std::int64_t count, std::string_view what) {
  LOWBIT_CHECK(can_dequantize(type), what, ": type ", ggml_type_id_name(static_cast<std::uint32_t>(type)),
               " is not supported (", k_supported, ")");
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
    case GgmlType::q5_0: q5_0(src, dst, blocks); return;
    case GgmlType::q5_1: q5_1(src, dst, blocks); return;
    case GgmlType::q2_k: q2_k(src, dst, blocks); return;
    case GgmlType::q3_k: q3_k(src, dst, blocks); return;
    case GgmlType::q4_k: q4_k_or_q5_k<false>(src, dst, blocks); return;
    case GgmlType::q5_k: q4_k_or_q5_k<true>(src, dst, blocks); return;
    case GgmlType::q6_k: q6_k(src, dst, blocks); return;
    default: break;
  }
  LOWBIT_FAIL(what, ": unreachable type");
}

std::vector<float> dequantize_tensor(const GgufTensor& tensor, NonFinite non_finite) {
  const std::string what = "tensor '" + std::string(tensor.name) + "'";
  LOWBIT_CHECK(can_dequantize(tensor.type), what, ": type ", ggml_type_name(tensor.type),
               " is not supported (", k_supported, ")");
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
    if (non_finite == NonFinite::keep) continue;
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

#include "engine/synth/random_blocks.h"

#include <cmath>
#include <cstring>

#include "engine/gguf/ggml_codes.h"
#include "engine/gguf/k_scales.h"
#include "formats/float16.h"
#include "lowbit/error.h"

namespace lowbit::engine {
namespace {

// splitmix64: a counter-based stream, so block b's stream is a function of (seed, b).
constexpr std::uint64_t k_gamma = 0x9e3779b97f4a7c15ull;

std::uint64_t mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

class BlockRng {
 public:
  BlockRng(std::uint64_t seed, std::uint64_t block) : state_(mix(seed ^ mix(block * k_gamma + 1))) {}
  std::uint64_t next() { return mix(state_ += k_gamma); }
  float unit() { return static_cast<float>(next() >> 40) * 0x1p-24f; }  // [0, 1)
  float jitter() { return 0.75f + 0.5f * unit(); }                     // mean 1, mean square ~1.02
  float sign() { return (next() & 1) != 0 ? -1.0f : 1.0f; }
  void fill(std::uint8_t* out, std::size_t n) {
    for (std::size_t i = 0; i < n; i += 8) {
      const std::uint64_t word = next();
      std::memcpy(out + i, &word, n - i < 8 ? n - i : 8);
    }
  }

 private:
  std::uint64_t state_;
};

void put_half(std::uint8_t* p, float value) {
  const std::uint16_t bits = formats::float_to_half(value).bits;
  std::memcpy(p, &bits, 2);
}

float half_value(float value) { return formats::half_to_float(formats::float_to_half(value)); }

// Root mean square of the integer factor each type multiplies its block scale by,
// with codes uniform over the type's range: so that scale = stddev / rms.
// Uniform integers over n values have variance (n^2 - 1) / 12.
double uniform_variance(double n) { return (n * n - 1.0) / 12.0; }
// K-quant sub-block scales are uniform in 32..63: mean 47.5, mean square 47.5^2 + var(32 values).
const double k_sub_scale_square = 47.5 * 47.5 + uniform_variance(32);

// Mean 0: value = (q - 7.5) d from q * d + m with m = -7.5 d; likewise with 15.5 for 5 bits.
void q4_1_block(BlockRng& rng, float d, std::uint8_t* b) {
  const float dd = half_value(d);
  put_half(b, dd);
  put_half(b + 2, -7.5f * dd);
  rng.fill(b + 4, 16);
}

void q5_1_block(BlockRng& rng, float d, std::uint8_t* b) {
  const float dd = half_value(d);
  put_half(b, dd);
  put_half(b + 2, -15.5f * dd);
  rng.fill(b + 4, 4 + 16);
}

// Q4_K / Q5_K: scale s_j in 32..63, min m_j = s_j and dmin = (2^bits - 1) / 2 * d, so
// each value is d * s_j * (q - 7.5) (4 bits) or d * s_j * (q - 15.5) (5 bits).
void k_scales_block(BlockRng& rng, float d, float center, std::uint8_t* b) {
  const float dd = half_value(d);
  put_half(b + kQ4kD, dd);
  put_half(b + kQ4kDmin, center * dd);
  KScaleMin values[8];
  const std::uint64_t r = rng.next();
  for (int j = 0; j < 8; ++j) {
    const auto s = static_cast<std::uint8_t>(32 + ((r >> (5 * j)) & 31));
    values[j] = {s, s};
  }
  pack_k_scale_mins(values, b + kQ4kScales);
}

// Sub-block scales +-(32..63), the sign random: (q - 32) has mean -0.5, which the signs cancel.
void q6_k_block(BlockRng& rng, float d, std::uint8_t* b) {
  rng.fill(b + kQ6kLow, kQ6kScales - kQ6kLow);  // ql, qh
  const std::uint64_t r[2] = {rng.next(), rng.next()};
  for (int j = 0; j < 16; ++j) {
    const std::uint64_t bits = r[j / 8] >> (6 * (j % 8));
    const int scale = 32 + static_cast<int>(bits & 31);
    b[kQ6kScales + j] = static_cast<std::uint8_t>(static_cast<std::int8_t>((bits & 32) != 0 ? -scale : scale));
  }
  put_half(b + kQ6kD, d);
}

// Q2_K: scale s_j in 8..15, min m_j = s_j and dmin = 1.5 d, so each value is
// d * s_j * (q - 1.5) (q in 0..3).
const double k_q2_sub_scale_square = 11.5 * 11.5 + uniform_variance(8);

void q2_k_block(BlockRng& rng, float d, std::uint8_t* b) {
  rng.fill(b + kQ2kCodes, 64);
  const std::uint64_t r = rng.next();
  for (int j = 0; j < 16; ++j) {
    const int s = 8 + static_cast<int>((r >> (3 * j)) & 7);
    b[j] = static_cast<std::uint8_t>(s | (s << 4));
  }
  const float dd = half_value(d);
  put_half(b + kQ2kD, dd);
  put_half(b + kQ2kDmin, 1.5f * dd);
}

// Q3_K: sub-block scales +-(16..31), the sign random, as Q6_K's (q - 4 has mean -0.5).
const double k_q3_sub_scale_square = 23.5 * 23.5 + uniform_variance(16);

void q3_k_block(BlockRng& rng, float d, std::uint8_t* b) {
  rng.fill(b, 32 + 64);  // hmask, qs
  const std::uint64_t r[2] = {rng.next(), rng.next()};
  int scales[16];
  for (int j = 0; j < 16; ++j) {
    const std::uint64_t bits = r[j / 8] >> (5 * (j % 8));
    const int scale = 16 + static_cast<int>(bits & 15);
    scales[j] = (bits & 16) != 0 ? -scale : scale;
  }
  pack_q3_k_scales(scales, b);
  put_half(b + kQ3kD, d);
}

// One block of `type` at `b` from its own stream.
void random_block(GgmlType type, float mean, float stddev, BlockRng& rng, std::uint8_t* b) {
  const auto scale = [&](double code_mean_square) {
    return static_cast<float>(stddev / std::sqrt(code_mean_square)) * rng.jitter();
  };
  const float spread = stddev * std::sqrt(3.0f);  // uniform in +-spread has this stddev
  switch (type) {
    case GgmlType::f32:
      for (int i = 0; i < 64; ++i) {
        const float v = mean + spread * (2.0f * rng.unit() - 1.0f);
        std::memcpy(b + 4 * i, &v, 4);
      }
      return;
    case GgmlType::f16:
      for (int i = 0; i < 64; ++i) put_half(b + 2 * i, mean + spread * (2.0f * rng.unit() - 1.0f));
      return;
    case GgmlType::q8_0:
      put_half(b, scale(uniform_variance(255)));
      rng.fill(b + 2, 32);
      for (int i = 0; i < 32; ++i) b[2 + i] = b[2 + i] == 0x80 ? 0x81 : b[2 + i];  // -128 -> -127: ggml's range
      return;
    case GgmlType::q4_0: {  // (q - 8) has mean -0.5: a random sign of d cancels it, as ggml's signed d does
      const float d = scale(uniform_variance(16) + 0.25);
      put_half(b, rng.sign() * d);
      rng.fill(b + 2, 16);
      return;
    }
    case GgmlType::q4_1: q4_1_block(rng, scale(uniform_variance(16)), b); return;
    case GgmlType::q5_0: {  // (q - 16): as Q4_0
      const float d = scale(uniform_variance(32) + 0.25);
      put_half(b, rng.sign() * d);
      rng.fill(b + 2, 4 + 16);
      return;
    }
    case GgmlType::q5_1: q5_1_block(rng, scale(uniform_variance(32)), b); return;
    case GgmlType::q4_k:
      k_scales_block(rng, scale(k_sub_scale_square * uniform_variance(16)), 7.5f, b);
      rng.fill(b + kQ4kCodes, 128);
      return;
    case GgmlType::q5_k:
      k_scales_block(rng, scale(k_sub_scale_square * uniform_variance(32)), 15.5f, b);
      rng.fill(b + kQ5kHigh, 32 + 128);
      return;
    case GgmlType::q6_k: q6_k_block(rng, scale(k_sub_scale_square * (uniform_variance(64) + 0.25)), b); return;
    case GgmlType::q2_k: q2_k_block(rng, scale(k_q2_sub_scale_square * uniform_variance(4)), b); return;
    case GgmlType::q3_k: q3_k_block(rng, scale(k_q3_sub_scale_square * (uniform_variance(8) + 0.25)), b); return;
    default: break;
  }
  LOWBIT_FAIL("random blocks: type ", ggml_type_name(type), " is not written");
}

}  // namespace

bool can_fill_random(GgmlType type) {
  switch (type) {
    case GgmlType::f32:
    case GgmlType::f16:
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

void fill_random_blocks(GgmlType type, float mean, float stddev, std::uint64_t seed, std::span<std::uint8_t> out) {
  LOWBIT_CHECK(can_fill_random(type), "random blocks: type ", ggml_type_name(type),
               " is not written (F32, F16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K are)");
  const bool plain = type == GgmlType::f32 || type == GgmlType::f16;
  LOWBIT_CHECK(plain || mean == 0.0f, "random blocks: ", ggml_type_name(type), " blocks take mean 0, not ", mean);
  LOWBIT_CHECK(std::isfinite(stddev) && stddev >= 0.0f, "random blocks: stddev ", stddev, " is not a finite value >= 0");
  const GgmlTypeInfo& info = ggml_type_info(type);
  // Plain types are drawn 64 values per stream: a "block" of 64 elements here.
  const std::size_t unit_bytes = plain ? 64 * info.block_bytes : info.block_bytes;
  const std::size_t units = out.size() / unit_bytes;
  LOWBIT_CHECK(out.size() % (plain ? info.block_bytes : unit_bytes) == 0, "random blocks: ", out.size(),
               " bytes is not a whole number of ", info.name, " blocks");
#pragma omp parallel for schedule(static)
  for (std::size_t u = 0; u < units; ++u) {
    BlockRng rng(seed, u);
    random_block(type, mean, stddev, rng, out.data() + u * unit_bytes);
  }
  const std::size_t tail = out.size() - units * unit_bytes;  // plain types: < 64 values
  if (tail > 0) {
    std::uint8_t last[64 * 4];
    BlockRng rng(seed, units);
    random_block(type, mean, stddev, rng, last);
    std::memcpy(out.data() + units * unit_bytes, last, tail);
  }
}

}  // namespace lowbit::engine

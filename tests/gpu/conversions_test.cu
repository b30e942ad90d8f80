// The device side of the formats layer (CUDA intrinsics) against its host side
// (software), bit for bit: FP16/BF16 narrowing of every 16-bit value, of every tie
// between neighbours and its float neighbours, and of random floats; widening of every
// 16-bit pattern; INT8/INT4 element encoding and decoding. NaN results excepted
// (both sides must give NaN, payloads may differ).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/gpu.h"
#include "common/random.h"
#include "formats/float16.h"
#include "formats/int4.h"
#include "formats/int8.h"

namespace lowbit::test {
namespace {

struct Converted {
  std::uint16_t half, bf16;
  std::int8_t int8;
  std::uint8_t int4;
  float int8_value, int4_value;
};

struct Params {
  float scale, min;
};

__global__ void narrow_kernel(const float* in, const Params* params, Converted* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float v = in[i];
  const Params p = params[i];
  Converted c;
  c.half = formats::float_to_half(v).bits;
  c.bf16 = formats::float_to_bf16(v).bits;
  c.int8 = formats::int8_encode(v, formats::inverse_scale(p.scale));
  c.int4 = formats::int4_encode(v, p.min, formats::inverse_scale(p.scale));
  c.int8_value = formats::int8_decode(c.int8, p.scale);
  c.int4_value = formats::int4_decode(c.int4, p.scale, p.min);
  out[i] = c;
}

__global__ void widen_kernel(float* from_half, float* from_bf16) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i > 0xffff) return;
  from_half[i] = formats::half_to_float(formats::Half{static_cast<std::uint16_t>(i)});
  from_bf16[i] = formats::bf16_to_float(formats::BFloat16{static_cast<std::uint16_t>(i)});
}

// Equal bits, or both NaN.
bool same_float(float a, float b) { return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b) || (std::isnan(a) && std::isnan(b)); }
bool same_half(std::uint16_t a, std::uint16_t b) {
  return a == b || (std::isnan(formats::half_to_float(formats::Half{a})) && std::isnan(formats::half_to_float(formats::Half{b})));
}
bool same_bf16(std::uint16_t a, std::uint16_t b) {
  return a == b || (std::isnan(formats::bf16_to_float(formats::BFloat16{a})) && std::isnan(formats::bf16_to_float(formats::BFloat16{b})));
}

// Every value and tie that decides a rounding, plus random floats.
std::vector<float> narrowing_inputs(Rng& rng) {
  std::vector<float> values;
  for (std::uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const float h = formats::half_to_float(formats::Half{static_cast<std::uint16_t>(bits)});
    values.push_back(h);
    if ((bits & 0x7fff) < 0x7c00) {  // finite: the tie above it (away from zero) and its neighbours
      const double next = (bits & 0x7fff) == 0x7bff ? std::copysign(65536.0, h)
                                                     : formats::half_to_float(formats::Half{static_cast<std::uint16_t>(bits + 1)});
      const auto mid = static_cast<float>((static_cast<double>(h) + next) / 2);
      values.insert(values.end(), {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 2 * mid)});
    }
    const float b = std::bit_cast<float>(bits << 16);
    values.insert(values.end(), {b, std::bit_cast<float>((bits << 16) | 0x8000u), std::bit_cast<float>((bits << 16) | 0x7fffu),
                                 std::bit_cast<float>((bits << 16) | 0x8001u)});
  }
  std::uniform_int_distribution<std::uint32_t> any_bits;
  std::normal_distribution<float> normal(0.0f, 100.0f);
  for (int i = 0; i < (1 << 18); ++i) values.push_back(std::bit_cast<float>(any_bits(rng)));
  for (int i = 0; i < (1 << 18); ++i) values.push_back(normal(rng));
  return values;
}

class Conversions : public GpuTest {};

TEST_F(Conversions, DeviceNarrowingAndEncodingEqualHost) {
  LOWBIT_TEST_RNG(rng);
  const std::vector<float> values = narrowing_inputs(rng);
  const int n = static_cast<int>(values.size());
  // Quantization parameters per value: mostly ones that make x * inv land near
  // code boundaries, some degenerate (zero, denormal, NaN scales).
  std::vector<Params> params(values.size());
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  for (std::size_t i = 0; i < values.size(); ++i) {
    const float magnitude = std::fabs(values[i]);
    float scale = std::isfinite(magnitude) && magnitude > 0 ? magnitude / (1.0f + 126.0f * unit(rng)) : unit(rng);
    if (i % 97 == 0) scale = 0.0f;
    if (i % 101 == 0) scale = std::numeric_limits<float>::denorm_min();
    if (i % 103 == 0) scale = std::numeric_limits<float>::quiet_NaN();
    params[i] = Params{scale, std::isfinite(values[i]) ? values[i] - 7.0f * scale * unit(rng) : -1.0f};
  }
  core::DeviceBuffer in(values.size() * sizeof(float)), par(params.size() * sizeof(Params)), out(values.size() * sizeof(Converted));
  LOWBIT_CUDA_CHECK(cudaMemcpy(in.data(), values.data(), in.bytes(), cudaMemcpyHostToDevice));
  LOWBIT_CUDA_CHECK(cudaMemcpy(par.data(), params.data(), par.bytes(), cudaMemcpyHostToDevice));
  narrow_kernel<<<(n + 255) / 256, 256>>>(in.as<float>(), par.as<Params>(), out.as<Converted>(), n);
  LOWBIT_CUDA_CHECK_LAUNCH();
  const std::vector<Converted> got = download<Converted>(out.data(), values.size());
  int failures = 0;
  for (std::size_t i = 0; i < values.size() && failures < 10; ++i) {
    const float v = values[i];
    const Params p = params[i];
    const std::uint8_t int4 = formats::int4_encode(v, p.min, formats::inverse_scale(p.scale));
    const std::int8_t int8 = formats::int8_encode(v, formats::inverse_scale(p.scale));
    const bool ok = same_half(got[i].half, formats::float_to_half(v).bits) && same_bf16(got[i].bf16, formats::float_to_bf16(v).bits) &&
                    got[i].int8 == int8 && got[i].int4 == int4 &&
                    same_float(got[i].int8_value, formats::int8_decode(int8, p.scale)) &&
                    same_float(got[i].int4_value, formats::int4_decode(int4, p.scale, p.min));
    if (!ok) {
      ++failures;
      ADD_FAILURE() << "input " << v << " (bits 0x" << std::hex << std::bit_cast<std::uint32_t>(v) << std::dec << "), scale "
                    << p.scale << ", min " << p.min << ": device half 0x" << std::hex << got[i].half << " host 0x"
                    << formats::float_to_half(v).bits << "; device bf16 0x" << got[i].bf16 << " host 0x"
                    << formats::float_to_bf16(v).bits << std::dec << "; device int8 " << int{got[i].int8} << " host "
                    << int{int8} << "; device int4 " << int{got[i].int4} << " host " << int{int4} << "; decoded "
                    << got[i].int8_value << " / " << got[i].int4_value;
    }
  }
}

TEST_F(Conversions, DeviceWideningEqualsHostForEveryPattern) {
  core::DeviceBuffer from_half(0x10000 * sizeof(float)), from_bf16(0x10000 * sizeof(float));
  widen_kernel<<<0x10000 / 256, 256>>>(from_half.as<float>(), from_bf16.as<float>());
  LOWBIT_CUDA_CHECK_LAUNCH();
  const std::vector<float> half = download<float>(from_half.data(), 0x10000);
  const std::vector<float> bf16 = download<float>(from_bf16.data(), 0x10000);
  for (std::uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const auto b16 = static_cast<std::uint16_t>(bits);
    ASSERT_TRUE(same_float(half[bits], formats::half_to_float(formats::Half{b16}))) << "half 0x" << std::hex << bits;
    ASSERT_TRUE(same_float(bf16[bits], formats::bf16_to_float(formats::BFloat16{b16}))) << "bf16 0x" << std::hex << bits;
  }
}

}  // namespace
}  // namespace lowbit::test

// The device side of the formats layer (CUDA intrinsics) against its host side
// (software), bit for bit: FP16/BF16 narrowing of random and edge floats, widening of
// every 16-bit pattern, and INT8/INT4 element encoding.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "common/gpu.h"
#include "common/random.h"
#include "formats/float16.h"
#include "formats/int4.h"
#include "formats/int8.h"

namespace lowbit::test {
namespace {

struct Converted {
  std::uint16_t half, bf16;
  float from_half, from_bf16;
  std::int8_t int8;
  std::uint8_t int4;
};

__global__ void convert_kernel(const float* in, const std::uint16_t* patterns, Converted* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float v = in[i];
  out[i].half = formats::float_to_half(v).bits;
  out[i].bf16 = formats::float_to_bf16(v).bits;
  out[i].from_half = formats::half_to_float(formats::Half{patterns[i]});
  out[i].from_bf16 = formats::bf16_to_float(formats::BFloat16{patterns[i]});
  out[i].int8 = formats::int8_encode(v, 37.5f);
  out[i].int4 = formats::int4_encode(v, -0.75f, 5.25f);
}

class Conversions : public GpuTest {};

TEST_F(Conversions, DeviceEqualsHost) {
  LOWBIT_TEST_RNG(rng);
  const int n = 1 << 16;
  std::vector<float> values(n);
  std::vector<std::uint16_t> patterns(n);
  std::uniform_int_distribution<std::uint32_t> bits;
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (int i = 0; i < n; ++i) {
    // A third random bit patterns (all exponents), a third normal, a third near ties.
    const std::uint32_t b = bits(rng);
    float v;
    std::memcpy(&v, &b, 4);
    if (i % 3 == 1) v = normal(rng);
    if (i % 3 == 2) v = std::ldexp(static_cast<float>(i % 2048) + 0.5f, -(i % 30));
    values[i] = v;
    patterns[i] = static_cast<std::uint16_t>(i);
  }
  const cuda::DeviceBuffer in = upload(values), pat = upload(patterns);
  cuda::DeviceBuffer out(n * sizeof(Converted));
  convert_kernel<<<(n + 255) / 256, 256>>>(in.as<float>(), pat.as<std::uint16_t>(), out.as<Converted>(), n);
  LOWBIT_CUDA_CHECK_LAUNCH();
  const auto got = download<Converted>(out.data(), n);
  for (int i = 0; i < n; ++i) {
    const float v = values[i];
    SCOPED_TRACE("value " + std::to_string(v) + " pattern " + std::to_string(i));
    if (!std::isnan(v)) {
      ASSERT_EQ(got[i].half, formats::float_to_half(v).bits);
      ASSERT_EQ(got[i].bf16, formats::float_to_bf16(v).bits);
    }
    const float h = formats::half_to_float(formats::Half{patterns[i]});
    const float b = formats::bf16_to_float(formats::BFloat16{patterns[i]});
    if (!std::isnan(h)) ASSERT_EQ(std::memcmp(&got[i].from_half, &h, 4), 0);
    if (!std::isnan(b)) ASSERT_EQ(std::memcmp(&got[i].from_bf16, &b, 4), 0);
    ASSERT_EQ(got[i].int8, formats::int8_encode(v, 37.5f));
    ASSERT_EQ(got[i].int4, formats::int4_encode(v, -0.75f, 5.25f));
  }
}

}  // namespace
}  // namespace lowbit::test

// The block formats on the CPU: every element/scale code against hand-checked values
// (E2M1, E8M0, E4M3, the NF4 table and bitsandbytes' pivots), brute-force nearest-even
// searches, hand-checked blocks through the API, zero blocks, round trips on random
// data within each format's error bound, memory for 4096 x 4096, and bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <limits>
#include <random>
#include <vector>

#include "common/expect_error.h"
#include "common/random.h"
#include "common/storage.h"
#include "formats/minifloat.h"
#include "formats/mxfp4.h"
#include "formats/nf4.h"
#include "formats/nvfp4.h"
#include "lowbit/block_formats.h"

namespace lowbit {
namespace {

using namespace formats;
using test::to_storage;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr BlockFormat kFormats[] = {BlockFormat::nf4, BlockFormat::mxfp4, BlockFormat::nvfp4};

float up(float v) { return std::nextafter(v, kInf); }
float down(float v) { return std::nextafter(v, -kInf); }

// ---- E2M1 ---------------------------------------------------------------------------

TEST(E2M1, EveryCode) {
  const float magnitudes[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (unsigned c = 0; c < 16; ++c) {
    const float want = (c & 8) ? -magnitudes[c & 7] : magnitudes[c & 7];
    EXPECT_EQ(e2m1_decode(c), want) << "code " << c;
    EXPECT_EQ(std::signbit(e2m1_decode(c)), (c & 8) != 0) << "code " << c;
    EXPECT_EQ(e2m1_encode(want), c) << "value " << want;  // -0.0 encodes to 0x8
  }
  EXPECT_EQ(e2m1_decode(0x17), 6.0f);  // higher bits ignored
}

TEST(E2M1, TiesToEvenAndSaturation) {
  // Midpoints: the neighbour with mantissa bit 0 wins.
  EXPECT_EQ(e2m1_encode(0.25f), 0u);
  EXPECT_EQ(e2m1_encode(up(0.25f)), 1u);
  EXPECT_EQ(e2m1_encode(0.75f), 2u);
  EXPECT_EQ(e2m1_encode(down(0.75f)), 1u);
  EXPECT_EQ(e2m1_encode(1.25f), 2u);
  EXPECT_EQ(e2m1_encode(up(1.25f)), 3u);
  EXPECT_EQ(e2m1_encode(1.75f), 4u);
  EXPECT_EQ(e2m1_encode(down(1.75f)), 3u);
  EXPECT_EQ(e2m1_encode(2.5f), 4u);
  EXPECT_EQ(e2m1_encode(up(2.5f)), 5u);
  EXPECT_EQ(e2m1_encode(3.5f), 6u);
  EXPECT_EQ(e2m1_encode(down(3.5f)), 5u);
  EXPECT_EQ(e2m1_encode(5.0f), 6u);
  EXPECT_EQ(e2m1_encode(up(5.0f)), 7u);
  EXPECT_EQ(e2m1_encode(-5.0f), 0xeu);
  EXPECT_EQ(e2m1_encode(-3.5f), 0xeu);
  // Saturation, Inf, sign of values that round to zero, NaN.
  EXPECT_EQ(e2m1_encode(7.99f), 7u);
  EXPECT_EQ(e2m1_encode(1e30f), 7u);
  EXPECT_EQ(e2m1_encode(kInf), 7u);
  EXPECT_EQ(e2m1_encode(-kInf), 0xfu);
  EXPECT_EQ(e2m1_encode(-0.1f), 0x8u);
  EXPECT_EQ(e2m1_encode(1e-40f), 0u);
  EXPECT_EQ(e2m1_encode(kNaN), 0u);
  EXPECT_EQ(e2m1_encode(-kNaN), 0u);
}

// The comparison encoder against a search for the nearest value (ties: even code).
TEST(E2M1, MatchesNearestEvenSearch) {
  LOWBIT_TEST_RNG(rng);
  std::uniform_real_distribution<float> dist(-7.0f, 7.0f);
  std::vector<float> inputs;
  for (int i = 0; i < 20000; ++i) inputs.push_back(dist(rng));
  for (float v : {0.0f, 0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f}) {
    for (float s : {v, up(v), down(v)}) inputs.push_back(s), inputs.push_back(-s);
  }
  for (float x : inputs) {
    unsigned best = 0;
    float best_err = kInf;
    for (unsigned c = 0; c < 8; ++c) {
      const float err = std::fabs(std::fabs(x) - e2m1_decode(c));
      if (err < best_err || (err == best_err && (c & 1) == 0)) best = c, best_err = err;
    }
    if (std::fabs(x) > 6.0f) best = 7;
    if (std::signbit(x)) best |= 8;
    ASSERT_EQ(e2m1_encode(x), best) << "x = " << x;
  }
}

// ---- E8M0 ---------------------------------------------------------------------------

TEST(E8M0, EdgeValues) {
  EXPECT_EQ(e8m0_decode(0x00), std::ldexp(1.0f, -127));
  EXPECT_EQ(e8m0_decode(0x01), std::ldexp(1.0f, -126));
  EXPECT_EQ(e8m0_decode(0x7d), 0.25f);
  EXPECT_EQ(e8m0_decode(0x7f), 1.0f);
  EXPECT_EQ(e8m0_decode(0x80), 2.0f);
  EXPECT_EQ(e8m0_decode(0xfe), std::ldexp(1.0f, 127));
  EXPECT_TRUE(std::isnan(e8m0_decode(0xff)));
  for (int e = -127; e <= 127; ++e) EXPECT_EQ(e8m0_decode(e8m0_from_exponent(e)), std::ldexp(1.0f, e)) << e;
}

TEST(FloorLog2, ExactOnPowersAndNeighbours) {
  for (int e = -149; e <= 127; ++e) {
    const float p = std::ldexp(1.0f, e);
    EXPECT_EQ(floor_log2(p), e);
    if (e > -149) {
      EXPECT_EQ(floor_log2(down(p)), e - 1);
      EXPECT_EQ(floor_log2(up(p)), e);
    }
  }
  EXPECT_EQ(floor_log2(std::numeric_limits<float>::max()), 127);
  EXPECT_EQ(floor_log2(std::numeric_limits<float>::denorm_min()), -149);
}

// ---- E4M3 ---------------------------------------------------------------------------

TEST(E4M3, EdgeValues) {
  EXPECT_EQ(e4m3_decode(0x00), 0.0f);
  EXPECT_TRUE(std::signbit(e4m3_decode(0x80)));
  EXPECT_EQ(e4m3_decode(0x01), std::ldexp(1.0f, -9));  // min subnormal
  EXPECT_EQ(e4m3_decode(0x07), 7.0f * std::ldexp(1.0f, -9));
  EXPECT_EQ(e4m3_decode(0x08), std::ldexp(1.0f, -6));  // min normal
  EXPECT_EQ(e4m3_decode(0x38), 1.0f);
  EXPECT_EQ(e4m3_decode(0x39), 1.125f);
  EXPECT_EQ(e4m3_decode(0x7e), 448.0f);  // max normal
  EXPECT_EQ(e4m3_decode(0xfe), -448.0f);
  EXPECT_EQ(e4m3_decode(0x78), 256.0f);
  EXPECT_TRUE(std::isnan(e4m3_decode(0x7f)));
  EXPECT_TRUE(std::isnan(e4m3_decode(0xff)));

  EXPECT_EQ(e4m3_encode(0.0f), 0x00);
  EXPECT_EQ(e4m3_encode(-0.0f), 0x80);
  EXPECT_EQ(e4m3_encode(1.0f), 0x38);
  EXPECT_EQ(e4m3_encode(448.0f), 0x7e);
  EXPECT_EQ(e4m3_encode(-448.0f), 0xfe);
  EXPECT_EQ(e4m3_encode(464.0f), 0x7e);  // beyond max: saturates
  EXPECT_EQ(e4m3_encode(1e9f), 0x7e);
  EXPECT_EQ(e4m3_encode(kInf), 0x7e);
  EXPECT_EQ(e4m3_encode(-kInf), 0xfe);
  EXPECT_EQ(e4m3_encode(kNaN), 0x7f);
  EXPECT_EQ(e4m3_encode(-kNaN), 0xff);
  // Subnormal rounding, ties to even.
  EXPECT_EQ(e4m3_encode(std::ldexp(1.0f, -9)), 0x01);
  EXPECT_EQ(e4m3_encode(std::ldexp(1.0f, -10)), 0x00);        // tie 0 / 1: even
  EXPECT_EQ(e4m3_encode(up(std::ldexp(1.0f, -10))), 0x01);
  EXPECT_EQ(e4m3_encode(1.5f * std::ldexp(1.0f, -9)), 0x02);  // tie 1 / 2: even
  EXPECT_EQ(e4m3_encode(2.5f * std::ldexp(1.0f, -9)), 0x02);  // tie 2 / 3: even
  EXPECT_EQ(e4m3_encode(7.5f * std::ldexp(1.0f, -9)), 0x08);  // tie 7 / min normal: even (8)
  EXPECT_EQ(e4m3_encode(1e-30f), 0x00);
  // Normal ties.
  EXPECT_EQ(e4m3_encode(1.0625f), 0x38);  // between 1 and 1.125: even (1)
  EXPECT_EQ(e4m3_encode(1.1875f), 0x3a);  // between 1.125 and 1.25: even (1.25)
  EXPECT_EQ(e4m3_encode(up(1.0625f)), 0x39);
  EXPECT_EQ(e4m3_decode(0x57), 15.0f);
  EXPECT_EQ(e4m3_encode(15.5f), 0x58);    // between 15 (0x57) and 16 (0x58): even, carries into the exponent
}

TEST(E4M3, EveryCodeRoundTripsAndMatchesNearestEvenSearch) {
  for (unsigned c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;
    EXPECT_EQ(e4m3_encode(e4m3_decode(static_cast<std::uint8_t>(c))), c) << "code " << c;
  }
  LOWBIT_TEST_RNG(rng);
  std::vector<float> inputs;
  std::uniform_real_distribution<float> exponent(-14.0f, 9.5f);
  for (int i = 0; i < 20000; ++i) inputs.push_back(std::exp2(exponent(rng)) * (i % 2 ? -1.0f : 1.0f));
  for (unsigned c = 0; c < 0x7e; ++c) {  // every midpoint and its neighbours
    const float mid = (e4m3_decode(static_cast<std::uint8_t>(c)) + e4m3_decode(static_cast<std::uint8_t>(c + 1))) / 2;
    for (float s : {mid, up(mid), down(mid)}) inputs.push_back(s), inputs.push_back(-s);
  }
  for (float x : inputs) {
    unsigned best = 0;
    float best_err = kInf;
    for (unsigned c = 0; c <= 0x7e; ++c) {
      const float err = std::fabs(std::fabs(x) - e4m3_decode(static_cast<std::uint8_t>(c)));
      if (err < best_err || (err == best_err && (c & 1) == 0)) best = c, best_err = err;
    }
    if (std::signbit(x)) best |= 0x80;
    ASSERT_EQ(e4m3_encode(x), best) << "x = " << x;
  }
}

// ---- NF4 ----------------------------------------------------------------------------

TEST(Nf4, TableAndBitsandbytesPivots) {
  const float levels[16] = {-1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f,
                            -0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f, 0.0f,
                            0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f, 0.33791524171829224f,
                            0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f, 1.0f};
  // The pivots of bitsandbytes' dQuantizeNF4 (csrc/kernels.cu), as float literals.
  const float pivots[15] = {-0.8480964004993439f, -0.6106329262256622f, -0.4599952697753906f, -0.33967943489551544f,
                            -0.23460740596055984f, -0.13791173323988914f, -0.045525018125772476f, 0.03979014977812767f,
                            0.1202552504837513f, 0.2035212516784668f, 0.2920137718319893f, 0.3893125355243683f,
                            0.5016634166240692f, 0.6427869200706482f, 0.8614784181118011f};
  for (unsigned c = 0; c < 16; ++c) {
    EXPECT_EQ(nf4_level(c), levels[c]) << c;
    EXPECT_EQ(nf4_encode_normalized(levels[c]), c) << c;
    EXPECT_EQ(nf4_decode(c, 2.0f), 2.0f * levels[c]);
  }
  EXPECT_EQ(nf4_level(0x17), 0.0f);  // higher bits ignored
  int ties = 0, differs = 0;
  for (int i = 0; i < 15; ++i) {
    EXPECT_EQ(nf4_threshold(i), pivots[i]) << i;
    // Each pivot is the exact midpoint (in double) rounded to one of its float neighbours.
    const double mid = (double(levels[i]) + double(levels[i + 1])) / 2;
    const float nearest = static_cast<float>(mid);
    const bool tie = double(std::nextafter(nearest, kInf)) - mid == mid - double(nearest) ||
                     double(nearest) - mid == mid - double(std::nextafter(nearest, -kInf));
    ties += tie;
    if (tie) {
      EXPECT_EQ(std::fabs(double(pivots[i]) - mid), std::fabs(double(nearest) - mid)) << i;
      differs += pivots[i] != nearest;
    } else {
      EXPECT_EQ(pivots[i], nearest) << i;
    }
    EXPECT_EQ(nf4_encode_normalized(pivots[i]), static_cast<unsigned>(i)) << "a midpoint takes the lower index";
    EXPECT_EQ(nf4_encode_normalized(up(pivots[i])), static_cast<unsigned>(i + 1));
  }
  EXPECT_EQ(ties, 7) << "midpoints exactly halfway between two floats";
  EXPECT_EQ(differs, 4) << "ties where the literal rounds away from double -> float's choice";
  EXPECT_EQ(nf4_encode_normalized(1.5f), 15u);
  EXPECT_EQ(nf4_encode_normalized(-1.5f), 0u);
  EXPECT_EQ(nf4_encode_normalized(kNaN), 0u);
  EXPECT_EQ(nf4_inverse(0.0f), 0.0f);
  EXPECT_EQ(nf4_encode(5.0f, nf4_inverse(0.0f)), 7u);
}

// ---- Block scales -------------------------------------------------------------------

TEST(Mxfp4, SharedScale) {
  EXPECT_EQ(mxfp4_scale(abs_bits(0.0f)), 0x00);                     // log2(0) = -inf: clamps to -127
  EXPECT_EQ(mxfp4_scale(abs_bits(1.0f)), 127 - 2);                  // 2^0 / 2^2
  EXPECT_EQ(mxfp4_scale(abs_bits(6.0f)), 127);                      // floor(log2 6) = 2: X = 1
  EXPECT_EQ(mxfp4_scale(abs_bits(down(8.0f))), 127);
  EXPECT_EQ(mxfp4_scale(abs_bits(8.0f)), 128);
  EXPECT_EQ(mxfp4_scale(abs_bits(std::ldexp(1.0f, -125))), 0x00);  // -127 exactly
  EXPECT_EQ(mxfp4_scale(abs_bits(std::ldexp(1.0f, -124))), 0x01);
  EXPECT_EQ(mxfp4_scale(abs_bits(std::numeric_limits<float>::denorm_min())), 0x00);  // -151 clamps
  EXPECT_EQ(mxfp4_scale(abs_bits(std::numeric_limits<float>::max())), 127 + 125);
  EXPECT_EQ(mxfp4_scale(abs_bits(kInf)), 0xff);
  EXPECT_EQ(mxfp4_scale(abs_bits(kNaN)), 0xff);
  for (int s = 0; s < 255; ++s) {
    const auto scale = static_cast<std::uint8_t>(s);
    EXPECT_EQ(mxfp4_multiplier(scale) * e8m0_decode(scale), 1.0f) << s;
  }
  EXPECT_EQ(mxfp4_multiplier(0xff), 0.0f);
  EXPECT_TRUE(std::isnan(mxfp4_decode(0, 0xff)));
}

TEST(Nvfp4, Scales) {
  EXPECT_EQ(nvfp4_global_scale(2688.0f), 1.0f);
  EXPECT_EQ(nvfp4_global_scale(0.0f), 0.0f);
  EXPECT_EQ(nvfp4_block_scale(6.0f, 1.0f), 0x38);       // 6 / 6 = 1
  EXPECT_EQ(nvfp4_block_scale(2688.0f, 1.0f), 0x7e);    // 448
  EXPECT_EQ(nvfp4_block_scale(1e-3f, 1.0f), 0x00);      // 1.7e-4 < 2^-10: rounds to 0
  EXPECT_EQ(nvfp4_block_scale(5.0f, 0.0f), 0x00);       // zero tensor
  EXPECT_EQ(nvfp4_divisor(0x00, 1.0f), 0.0f);
  EXPECT_EQ(nvfp4_encode(3.0f, 0.0f), 0u);              // d = 0: everything is 0
  EXPECT_EQ(nvfp4_divisor(0x7e, 2.0f), 896.0f);
  EXPECT_EQ(nvfp4_decode(7, 0x7e, 2.0f), 6.0f * 896.0f);
}

// ---- Through the API ----------------------------------------------------------------

// Host storage for one encoded tensor.
struct Encoded {
  BlockLayout layout;
  std::vector<std::uint8_t> codes;
  std::vector<std::uint8_t> scales;  // raw bytes (f32 for nf4)
  float global = -1.0f;
  BlockQuantizedView view;

  Encoded(BlockFormat format, std::int64_t rows, std::int64_t cols)
      : layout(block_layout(format, rows, cols)),
        codes(static_cast<std::size_t>(rows * layout.code_cols), 0x5a),
        scales(static_cast<std::size_t>(layout.scale_count) * layout.scale_bytes, 0x5a) {
    view.codes = TensorView::matrix(codes.data(), DType::u8, Device::cpu, rows, layout.code_cols);
    view.scales = TensorView::vector(scales.data(), layout.scale_dtype, Device::cpu, layout.scale_count);
    if (layout.has_global_scale) view.global_scale = TensorView::vector(&global, DType::f32, Device::cpu, 1);
  }
  float f32_scale(std::size_t i) const {
    float v;
    std::memcpy(&v, scales.data() + 4 * i, 4);
    return v;
  }
  unsigned code(std::int64_t row, std::int64_t col) const {
    const std::uint8_t byte = codes[static_cast<std::size_t>(row * layout.code_cols + col / 2)];
    return col % 2 ? byte >> 4 : byte & 15u;
  }
};

void encode(const std::vector<float>& x, std::int64_t rows, std::int64_t cols, BlockFormat format, Encoded& e) {
  block_encode(TensorView::matrix(const_cast<float*>(x.data()), DType::f32, Device::cpu, rows, cols), format, e.view,
               Workspace{}, nullptr);
}

std::vector<float> decode(const Encoded& e, std::int64_t rows, std::int64_t cols, BlockFormat format) {
  std::vector<float> out(static_cast<std::size_t>(rows * cols), kNaN);
  block_decode(e.view, format, TensorView::matrix(out.data(), DType::f32, Device::cpu, rows, cols), nullptr);
  return out;
}

TEST(BlockFormatsCpu, HandCheckedNf4Block) {
  std::vector<float> x(64, 0.0f);
  // absmax 2, inv 0.5: x[3] * 0.5 is exactly the pivot between levels 12 and 13.
  x[0] = 2.0f, x[1] = -2.0f, x[2] = 1.0f, x[3] = 2.0f * 0.5016634166240692f, x[4] = -0.2f;
  Encoded e(BlockFormat::nf4, 1, 64);
  encode(x, 1, 64, BlockFormat::nf4, e);
  EXPECT_EQ(e.f32_scale(0), 2.0f);
  EXPECT_EQ(e.codes[0], 0x0f);  // 15 (low nibble), 0 (high nibble)
  EXPECT_EQ(e.code(0, 2), 12u);  // 0.5 lies below the pivot 0.5017: level 0.4407
  EXPECT_EQ(e.code(0, 3), 12u);  // exactly on the pivot (x * 0.5 == pivot): the lower index
  EXPECT_EQ(e.code(0, 4), 6u);   // -0.1: between the pivots -0.1379 and -0.0455: level -0.0911
  EXPECT_EQ(e.code(0, 5), 7u);
  const std::vector<float> y = decode(e, 1, 64, BlockFormat::nf4);
  EXPECT_EQ(y[0], 2.0f);
  EXPECT_EQ(y[1], -2.0f);
  EXPECT_EQ(y[2], 0.44070982933044434f * 2.0f);
  EXPECT_EQ(y[5], 0.0f);
}

TEST(BlockFormatsCpu, HandCheckedMxfp4Blocks) {
  std::vector<float> x(64, 0.0f);
  // Block 0: absmax 5 -> floor(log2 5) = 2 -> shared exponent 0, X = 1.
  x[0] = 5.0f, x[1] = 0.25f, x[2] = -0.75f, x[3] = 2.6f, x[4] = -0.01f;
  // Block 1: absmax 12 -> floor 3 -> X = 2: 12 / 2 = 6; 11 / 2 = 5.5 -> 6; 1 / 2 = 0.5.
  x[32] = 12.0f, x[33] = 11.0f, x[34] = 1.0f, x[35] = -7.0f;
  Encoded e(BlockFormat::mxfp4, 1, 64);
  encode(x, 1, 64, BlockFormat::mxfp4, e);
  EXPECT_EQ(e.scales[0], 127);
  EXPECT_EQ(e.scales[1], 128);
  EXPECT_EQ(e.code(0, 0), 6u);    // 5 is the 4 / 6 tie: 4
  EXPECT_EQ(e.code(0, 1), 0u);    // 0.25: tie 0 / 0.5 -> 0
  EXPECT_EQ(e.code(0, 2), 0xau);  // -0.75 -> -1
  EXPECT_EQ(e.code(0, 3), 5u);    // 2.6 -> 3
  EXPECT_EQ(e.code(0, 4), 0x8u);  // -0.01 -> -0
  EXPECT_EQ(e.code(0, 5), 0u);
  EXPECT_EQ(e.code(0, 32), 7u);
  EXPECT_EQ(e.code(0, 33), 7u);
  EXPECT_EQ(e.code(0, 34), 1u);
  EXPECT_EQ(e.code(0, 35), 0xeu);  // -3.5: tie 3 / 4 -> -4
  const std::vector<float> y = decode(e, 1, 64, BlockFormat::mxfp4);
  EXPECT_EQ(y[0], 4.0f);
  EXPECT_EQ(y[2], -1.0f);
  EXPECT_EQ(y[3], 3.0f);
  EXPECT_TRUE(std::signbit(y[4]) && y[4] == 0.0f);
  EXPECT_EQ(y[32], 12.0f);
  EXPECT_EQ(y[33], 12.0f);
  EXPECT_EQ(y[34], 1.0f);
  EXPECT_EQ(y[35], -8.0f);
}

TEST(BlockFormatsCpu, HandCheckedNvfp4Blocks) {
  std::vector<float> x(48, 0.0f);
  x[0] = 6.0f, x[1] = -2.9f;                 // block 0: absmax 6, s = E4M3(1) = 0x38, d = 1
  x[16] = 2688.0f, x[17] = 1000.0f;          // block 1: absmax 2688 (the tensor's): s = 448, d = 448
  x[32] = 1e-3f, x[33] = -5e-4f;             // block 2: s rounds to 0: all codes 0
  Encoded e(BlockFormat::nvfp4, 1, 48);
  encode(x, 1, 48, BlockFormat::nvfp4, e);
  EXPECT_EQ(e.global, 1.0f);
  EXPECT_EQ(e.scales[0], 0x38);
  EXPECT_EQ(e.scales[1], 0x7e);
  EXPECT_EQ(e.scales[2], 0x00);
  EXPECT_EQ(e.code(0, 0), 7u);
  EXPECT_EQ(e.code(0, 1), 0xdu);  // -2.9 -> -3
  EXPECT_EQ(e.code(0, 16), 7u);
  EXPECT_EQ(e.code(0, 17), 4u);   // 1000 / 448 = 2.23 -> 2
  EXPECT_EQ(e.code(0, 32), 0u);
  EXPECT_EQ(e.code(0, 33), 0u);
  const std::vector<float> y = decode(e, 1, 48, BlockFormat::nvfp4);
  EXPECT_EQ(y[0], 6.0f);
  EXPECT_EQ(y[1], -3.0f);
  EXPECT_EQ(y[16], 2688.0f);
  EXPECT_EQ(y[17], 896.0f);
  EXPECT_EQ(y[32], 0.0f);
}

TEST(BlockFormatsCpu, ZeroTensorsEncodeToZeros) {
  for (BlockFormat format : kFormats) {
    SCOPED_TRACE(block_format_name(format));
    const std::int64_t rows = 3, cols = 128;
    std::vector<float> x(rows * cols, 0.0f);
    Encoded e(format, rows, cols);
    encode(x, rows, cols, format, e);
    for (std::uint8_t c : e.codes) ASSERT_EQ(c, format == BlockFormat::nf4 ? 0x77 : 0x00);
    for (std::uint8_t s : e.scales) ASSERT_EQ(s, 0x00);  // nf4: absmax +0.0f; E8M0 2^-127; E4M3 0
    if (format == BlockFormat::nvfp4) {
      EXPECT_EQ(e.global, 0.0f);
    }
    for (float v : decode(e, rows, cols, format)) ASSERT_EQ(v, 0.0f);
  }
}

// Worst-case |x - decode(encode(x))| of one element, from the format's definition.
float error_bound(BlockFormat format, float x, float block_absmax, float global) {
  const float a = std::fabs(x);
  const auto e2m1_bound = [](float q) {  // in units of the block scale
    if (q > 6.0f) return q - 6.0f;        // saturated
    return q < 1.0f ? 0.25f : q / 4.0f;   // half the gap between E2M1 neighbours at q
  };
  switch (format) {
    case BlockFormat::nf4:  // half the widest gap between levels (-1.0 .. -0.6962)
      return block_absmax * 0.5f * (1.0f - 0.6961928009986877f) * 1.0001f;
    case BlockFormat::mxfp4: {
      const float X = e8m0_decode(mxfp4_scale(abs_bits(block_absmax)));
      return X * e2m1_bound(a / X);
    }
    case BlockFormat::nvfp4: {
      const float d = nvfp4_divisor(nvfp4_block_scale(block_absmax, global), global);
      if (d == 0.0f) return a;
      // a / d is rounded, so q - 6 of a saturated value carries its absolute error: slack of 1e-6 |x|.
      return d * e2m1_bound(a / d) * 1.0001f + a * 1e-6f + 1e-30f;
    }
  }
  return 0.0f;
}

TEST(BlockFormatsCpu, RandomRoundTripsStayWithinTheFormatBound) {
  LOWBIT_TEST_RNG(rng);
  const std::int64_t rows = 37, cols = 256;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> log_scale(-6.0f, 6.0f);
  std::vector<float> x(static_cast<std::size_t>(rows * cols));
  for (std::int64_t r = 0; r < rows; ++r) {
    const float row_scale = std::exp2(log_scale(rng));  // rows of very different magnitudes
    for (std::int64_t c = 0; c < cols; ++c) x[r * cols + c] = normal(rng) * row_scale;
  }
  for (BlockFormat format : kFormats) {
    SCOPED_TRACE(block_format_name(format));
    Encoded e(format, rows, cols);
    encode(x, rows, cols, format, e);
    const std::vector<float> y = decode(e, rows, cols, format);
    const std::int64_t block = block_size(format);
    double err2 = 0.0, ref2 = 0.0;
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t b = 0; b < cols / block; ++b) {
        float absmax = 0.0f;
        for (std::int64_t i = 0; i < block; ++i) absmax = std::max(absmax, std::fabs(x[r * cols + b * block + i]));
        for (std::int64_t i = 0; i < block; ++i) {
          const std::size_t k = static_cast<std::size_t>(r * cols + b * block + i);
          const float bound = error_bound(format, x[k], absmax, e.global);
          ASSERT_LE(std::fabs(x[k] - y[k]), bound) << "row " << r << ", column " << b * block + i << ": x = " << x[k]
                                                   << ", decoded " << y[k];
          err2 += double(x[k] - y[k]) * double(x[k] - y[k]);
          ref2 += double(x[k]) * double(x[k]);
        }
      }
    }
    // Reported, not asserted beyond a sanity ceiling: relative RMS error of N(0,1) rows.
    const double rel_rms = std::sqrt(err2 / ref2);
    std::cout << "[ round trip ] " << block_format_name(format) << ": relative RMS error " << rel_rms << "\n";
    EXPECT_LT(rel_rms, 0.2);
  }
}

TEST(BlockFormatsCpu, HalfInputsAndOutputsAndPaddedRows) {
  // f16 / bf16 inputs encode as their float values; outputs are the f32 values rounded once.
  LOWBIT_TEST_RNG(rng);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const std::int64_t rows = 5, cols = 64, stride = 80, code_stride = 40;
  for (DType dtype : {DType::f16, DType::bf16}) {
    for (BlockFormat format : kFormats) {
      SCOPED_TRACE(std::string(block_format_name(format)) + " " + dtype_name(dtype));
      std::vector<float> values(static_cast<std::size_t>(rows * stride));
      for (float& v : values) v = test::round_to(dtype, normal(rng));
      std::vector<std::uint8_t> x = to_storage(values, dtype);
      std::vector<float> dense(static_cast<std::size_t>(rows * cols));
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t c = 0; c < cols; ++c) dense[r * cols + c] = values[r * stride + c];
      Encoded want(format, rows, cols);
      encode(dense, rows, cols, format, want);

      const BlockLayout layout = block_layout(format, rows, cols);
      std::vector<std::uint8_t> codes(static_cast<std::size_t>(rows * code_stride), 0x5a);
      std::vector<std::uint8_t> scales(want.scales.size(), 0x5a);
      float global = -1.0f;
      BlockQuantizedView q{TensorView::matrix(codes.data(), DType::u8, Device::cpu, rows, layout.code_cols, code_stride),
                           TensorView::vector(scales.data(), layout.scale_dtype, Device::cpu, layout.scale_count),
                           layout.has_global_scale ? TensorView::vector(&global, DType::f32, Device::cpu, 1) : TensorView{}};
      block_encode(TensorView::matrix(x.data(), dtype, Device::cpu, rows, cols, stride), format, q, Workspace{}, nullptr);
      for (std::int64_t r = 0; r < rows; ++r) {
        ASSERT_EQ(std::memcmp(codes.data() + r * code_stride, want.codes.data() + r * layout.code_cols,
                              static_cast<std::size_t>(layout.code_cols)), 0) << "row " << r;
        for (std::int64_t c = layout.code_cols; c < code_stride; ++c) ASSERT_EQ(codes[r * code_stride + c], 0x5a);
      }
      EXPECT_EQ(scales, want.scales);
      if (layout.has_global_scale) {
        EXPECT_EQ(global, want.global);
      }

      const std::vector<float> y = decode(want, rows, cols, format);
      std::vector<std::uint8_t> out(static_cast<std::size_t>(rows * stride) * dtype_size(dtype), 0xff);
      block_decode(q, format, TensorView::matrix(out.data(), dtype, Device::cpu, rows, cols, stride), nullptr);
      for (std::int64_t r = 0; r < rows; ++r) {
        for (std::int64_t c = 0; c < cols; ++c) {
          ASSERT_EQ(test::read_bits(out.data(), static_cast<std::size_t>(r * stride + c), dtype),
                    test::storage_bits(dtype, y[r * cols + c]));
        }
      }
    }
  }
}

TEST(BlockFormatsCpu, MemoryFor4096x4096) {
  const double fp32 = 4096.0 * 4096.0 * 4.0, fp16 = fp32 / 2;
  // nf4: 8 MiB of codes + 262144 f32 absmax (1 MiB).
  EXPECT_EQ(block_memory_bytes(BlockFormat::nf4, 4096, 4096), 8388608u + 1048576u);
  // mxfp4: 8 MiB of codes + 524288 E8M0 bytes.
  EXPECT_EQ(block_memory_bytes(BlockFormat::mxfp4, 4096, 4096), 8388608u + 524288u);
  // nvfp4: 8 MiB of codes + 1048576 E4M3 bytes + one f32.
  EXPECT_EQ(block_memory_bytes(BlockFormat::nvfp4, 4096, 4096), 8388608u + 1048576u + 4u);
  // Ratios: 256/36 = 7.111 (nf4, 4.5 bits), 128/17 = 7.529 (mxfp4, 4.25 bits), ~7.111 (nvfp4).
  EXPECT_NEAR(fp32 / double(block_memory_bytes(BlockFormat::nf4, 4096, 4096)), 256.0 / 36.0, 1e-12);
  EXPECT_NEAR(fp16 / double(block_memory_bytes(BlockFormat::nf4, 4096, 4096)), 128.0 / 36.0, 1e-12);
  EXPECT_NEAR(fp32 / double(block_memory_bytes(BlockFormat::mxfp4, 4096, 4096)), 128.0 / 17.0, 1e-12);
  EXPECT_NEAR(fp16 / double(block_memory_bytes(BlockFormat::mxfp4, 4096, 4096)), 64.0 / 17.0, 1e-12);
  EXPECT_NEAR(fp32 / double(block_memory_bytes(BlockFormat::nvfp4, 4096, 4096)), 7.11110810, 1e-7);
  EXPECT_NEAR(fp16 / double(block_memory_bytes(BlockFormat::nvfp4, 4096, 4096)), 3.55555405, 1e-7);
  for (BlockFormat format : kFormats) {
    const double r = fp32 / double(block_memory_bytes(format, 4096, 4096));
    std::cout << "[ memory ] " << block_format_name(format) << " 4096x4096: "
              << block_memory_bytes(format, 4096, 4096) << " bytes, " << r << "x vs FP32, " << r / 2 << "x vs FP16\n";
  }
}

TEST(BlockFormatsCpu, LayoutAndNames) {
  EXPECT_EQ(block_size(BlockFormat::nf4), 64);
  EXPECT_EQ(block_size(BlockFormat::mxfp4), 32);
  EXPECT_EQ(block_size(BlockFormat::nvfp4), 16);
  const BlockLayout l = block_layout(BlockFormat::mxfp4, 3, 96);
  EXPECT_EQ(l.code_cols, 48);
  EXPECT_EQ(l.blocks_per_row, 3);
  EXPECT_EQ(l.scale_count, 9);
  EXPECT_EQ(l.scale_dtype, DType::u8);
  EXPECT_EQ(l.total_bytes(), 3u * 48u + 9u);
  for (BlockFormat f : kFormats) EXPECT_EQ(parse_block_format(block_format_name(f)), f);
  EXPECT_LOWBIT_ERROR(parse_block_format("fp4"), "format: expected nf4, mxfp4 or nvfp4, got 'fp4'");
  EXPECT_LOWBIT_ERROR(block_layout(BlockFormat::nf4, 4, 96), "cols: 96 is not a multiple of the nf4 block size 64");
  EXPECT_LOWBIT_ERROR(block_layout(BlockFormat::nvfp4, 0, 16), "rows: expected >= 1, got 0");
  EXPECT_LOWBIT_ERROR(block_layout(static_cast<BlockFormat>(7), 1, 64), "format: unknown value 7");
}

TEST(BlockFormatsCpu, NonFiniteInputIsRejected) {
  for (BlockFormat format : kFormats) {
    SCOPED_TRACE(block_format_name(format));
    for (float bad : {kNaN, kInf, -kInf}) {
      std::vector<float> x(2 * 64, 1.0f);
      x[64 + 37] = bad;
      x[64 + 50] = bad;
      Encoded e(format, 2, 64);
      EXPECT_LOWBIT_ERROR(encode(x, 2, 64, format, e), "at row 1, column 37; block_encode needs finite values");
    }
  }
}

TEST(BlockFormatsCpu, BadInput) {
  std::vector<float> x(4 * 64, 1.0f);
  std::vector<float> big(4 * 100, 1.0f);
  for (BlockFormat format : kFormats) {
    SCOPED_TRACE(block_format_name(format));
    Encoded e(format, 4, 64);
    const TensorView xv = TensorView::matrix(x.data(), DType::f32, Device::cpu, 4, 64);
    const std::string name = block_format_name(format);
    // cols not a multiple of the block size (100 is not a multiple of 16, 32 or 64).
    EXPECT_LOWBIT_ERROR(block_encode(TensorView::matrix(big.data(), DType::f32, Device::cpu, 4, 100), format, e.view,
                                     Workspace{}, nullptr),
                        "x: 100 columns is not a multiple of the " + name + " block size");
    EXPECT_LOWBIT_ERROR(block_decode(e.view, format, TensorView::matrix(big.data(), DType::f32, Device::cpu, 4, 100),
                                     nullptr),
                        "out: 100 columns is not a multiple of the " + name + " block size");
    // dtypes
    TensorView xi8 = xv;
    xi8.dtype = DType::i8;
    EXPECT_LOWBIT_ERROR(block_encode(xi8, format, e.view, Workspace{}, nullptr), "x: expected dtype f32, f16 or bf16, got i8");
    BlockQuantizedView q = e.view;
    q.codes.dtype = DType::i8;
    EXPECT_LOWBIT_ERROR(block_encode(xv, format, q, Workspace{}, nullptr), "codes: expected dtype u8, got i8");
    q = e.view;
    q.scales.dtype = format == BlockFormat::nf4 ? DType::u8 : DType::f32;
    EXPECT_LOWBIT_ERROR(block_encode(xv, format, q, Workspace{}, nullptr), "scales: expected dtype");
    // shapes
    q = e.view;
    q.codes.shape[1] = 64;
    EXPECT_LOWBIT_ERROR(block_encode(xv, format, q, Workspace{}, nullptr), "codes: expected shape [4, 32], got [4, 64]");
    q = e.view;
    q.scales.shape[0] += 1;
    EXPECT_LOWBIT_ERROR(block_encode(xv, format, q, Workspace{}, nullptr), "scales: expected");
    // null pointers
    q = e.view;
    q.codes.data = nullptr;
    EXPECT_LOWBIT_ERROR(block_encode(xv, format, q, Workspace{}, nullptr), "codes: data pointer is null");
    q = e.view;
    q.scales.data = nullptr;
    EXPECT_LOWBIT_ERROR(block_encode(xv, format, q, Workspace{}, nullptr), "scales: data pointer is null");
    TensorView xnull = xv;
    xnull.data = nullptr;
    EXPECT_LOWBIT_ERROR(block_encode(xnull, format, e.view, Workspace{}, nullptr), "x: data pointer is null");
    // global scale: required by nvfp4 only
    q = e.view;
    float g = 0.0f;
    if (format == BlockFormat::nvfp4) {
      q.global_scale = TensorView{};
      EXPECT_LOWBIT_ERROR(block_encode(xv, format, q, Workspace{}, nullptr), "global_scale: data pointer is null");
    } else {
      q.global_scale = TensorView::vector(&g, DType::f32, Device::cpu, 1);
      EXPECT_LOWBIT_ERROR(block_encode(xv, format, q, Workspace{}, nullptr), "global_scale: " + name + " has no global scale");
    }
    // aliasing
    q = e.view;
    q.scales.data = e.codes.data();
    EXPECT_LOWBIT_ERROR(block_encode(xv, format, q, Workspace{}, nullptr), "codes: overlaps scales");
    EXPECT_LOWBIT_ERROR(block_decode(e.view, format, TensorView::matrix(e.codes.data(), DType::f32, Device::cpu, 4, 64),
                                     nullptr),
                        "out: overlaps codes");
    // misaligned elements
    std::vector<float> wide(4 * 64 + 1, 1.0f);
    EXPECT_LOWBIT_ERROR(block_encode(TensorView::matrix(reinterpret_cast<char*>(wide.data()) + 2, DType::f32,
                                                        Device::cpu, 4, 64),
                                     format, e.view, Workspace{}, nullptr),
                        "x: data pointer");
    // rank and out dtype
    TensorView out = TensorView::matrix(big.data(), DType::u8, Device::cpu, 4, 64);
    EXPECT_LOWBIT_ERROR(block_decode(e.view, format, out, nullptr), "out: expected dtype f32, f16 or bf16, got u8");
    TensorView v1 = TensorView::vector(x.data(), DType::f32, Device::cpu, 64);
    EXPECT_LOWBIT_ERROR(block_encode(v1, format, e.view, Workspace{}, nullptr), "x: expected a rank-2 tensor");
  }
}

}  // namespace
}  // namespace lowbit

// KV-cache policies: what each keeps, in which form, and how many bytes it holds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "common/expect_error.h"
#include "common/random.h"
#include "common/tiny_llama.h"
#include "engine/kv_cache.h"
#include "cpu/kv_cache.h"
#include "formats/float16.h"
#include "lowbit/quant.h"

namespace lowbit::test {
namespace {

using engine::KvCache;
using engine::KvCacheOptions;
using lowbit::KvPolicy;
using engine::KvShape;

KvCacheOptions make(KvPolicy p, std::int64_t sink = 16, std::int64_t window = 32, int bits = 8,
                    std::int64_t group = 0) {
  KvCacheOptions o;
  o.policy = p, o.sink = sink, o.window = window, o.kv_bits = bits, o.kv_group = group;
  return o;
}

// The default model's cache: 30 layers, 3 KV heads of 64, K and V.
const KvShape k_smollm{30, 3, 64};

TEST(KvCache, MemoryAt4096TokensForTheDefaultModel) {
  const std::int64_t t = 4096;
  const std::size_t full = KvCache::bytes_at(k_smollm, make(KvPolicy::full), t);
  EXPECT_EQ(full, 4096u * 192 * 2 * 2 * 30);  // FP16 K and V: 94,371,840 bytes
  // Per token, per layer, K or V: FP16 384 bytes; INT8 per head 3 x (64 codes + 2-byte
  // f16 scale) = 198; INT4 groups of 32: 3 x (32 + 2 x (2 + 2)) = 120; INT4 one group per
  // head: 3 x (32 + 4) = 108; INT4 one group per token (kv_group 192): 96 + 4 = 100.
  // Selective keeps 16 + 32 = 48 tokens in FP16.
  auto ratio = [&](const KvCacheOptions& o) { return static_cast<double>(KvCache::bytes_at(k_smollm, o, t)) / full; };
  const std::size_t sel8 = KvCache::bytes_at(k_smollm, make(KvPolicy::selective), t);
  EXPECT_EQ(sel8, (48u * 384 + 4048u * 198) * 60);
  EXPECT_LE(ratio(make(KvPolicy::selective)), 0.55);  // the INT8 target
  EXPECT_EQ(KvCache::bytes_at(k_smollm, make(KvPolicy::selective, 16, 32, 4, 32), t), (48u * 384 + 4048u * 120) * 60);
  EXPECT_EQ(KvCache::bytes_at(k_smollm, make(KvPolicy::selective, 16, 32, 4), t), (48u * 384 + 4048u * 108) * 60);
  EXPECT_EQ(KvCache::bytes_at(k_smollm, make(KvPolicy::selective, 16, 32, 4, 64), t), (48u * 384 + 4048u * 108) * 60);
  EXPECT_EQ(KvCache::bytes_at(k_smollm, make(KvPolicy::selective, 16, 32, 4, 192), t), (48u * 384 + 4048u * 100) * 60);
  // With f16 scales and mins (f32 ones were 0.5367x for INT8 and 0.3206x for INT4):
  // INT8 0.5213x; INT4 one group per head (the default) 0.2897x, under the 0.32x;
  // groups of 32 0.3206x, one group per token 0.2691x.
  EXPECT_NEAR(ratio(make(KvPolicy::selective)), 819936.0 / 1572864.0, 1e-12);  // 0.52130
  EXPECT_NEAR(ratio(make(KvPolicy::selective, 16, 32, 4)), 455616.0 / 1572864.0, 1e-12);  // 0.28967
  EXPECT_LE(ratio(make(KvPolicy::selective, 16, 32, 4)), 0.32);  // the INT4 target
  EXPECT_NEAR(ratio(make(KvPolicy::selective, 16, 32, 4, 64)), 0.2897, 1e-4);
  EXPECT_NEAR(ratio(make(KvPolicy::selective, 16, 32, 4, 32)), 0.3206, 1e-4);
  EXPECT_NEAR(ratio(make(KvPolicy::selective, 16, 32, 4, 192)), 0.2691, 1e-4);
  // Window holds 48 tokens whatever the length; int8 / int4 quantize everything.
  EXPECT_EQ(KvCache::bytes_at(k_smollm, make(KvPolicy::window), t), 48u * 384 * 60);
  EXPECT_EQ(KvCache::bytes_at(k_smollm, make(KvPolicy::int8), t), 4096u * 198 * 60);
  EXPECT_EQ(KvCache::bytes_at(k_smollm, make(KvPolicy::int4), t), 4096u * 108 * 60);
  // Short sequences: nothing has left the window yet.
  EXPECT_EQ(KvCache::bytes_at(k_smollm, make(KvPolicy::selective), 40), KvCache::bytes_at(k_smollm, make(KvPolicy::full), 40));
}

float f16(float v) { return formats::half_to_float(formats::float_to_half(v)); }

// The KV cache's f16 parameters (cpu/kv_cache.h, formats::HalfParams): the f32 scale
// and min of lowbit's quantize() rounded to the nearest f16, codes chosen for the rounded
// values (each the nearest level q * s16 (+ m16) of the stored parameters, and what
// kv_dequantize gives back), and the round trip within half a step of the f16 scale.
// Inputs are f16 values (the selective body, the GPU append) or f32 ones (the CPU int8 /
// int4 policies): a minimum that is not an f16 value rounds, and the extreme codes clamp
// by up to |m16 - min| + levels |s16 - s32| more.
TEST(KvQuant, F16ParametersDecodeAsTheCodesWereEncoded) {
  LOWBIT_TEST_RNG(rng);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const std::int64_t rows = 24;
  for (int bits : {8, 4}) {
    for (bool f16_inputs : {true, false}) {
      for (std::int64_t d : {64, 128}) {
        for (std::int64_t group : {d, std::int64_t{32}, std::int64_t{16}}) {
          for (float gain : {1e-3f, 1.0f, 300.0f}) {
            SCOPED_TRACE("INT" + std::to_string(bits) + (f16_inputs ? " f16" : " f32") + " inputs, head_dim " +
                         std::to_string(d) + ", group " + std::to_string(group) + ", gain " + std::to_string(gain));
            std::vector<float> x(static_cast<std::size_t>(rows * d));
            std::vector<float> loud(static_cast<std::size_t>(d));
            for (float& l : loud) l = normal(rng) > 1.5f ? 6.0f : 1.0f;
            for (std::size_t i = 0; i < x.size(); ++i) x[i] = gain * loud[i % loud.size()] * normal(rng);
            std::fill(x.begin(), x.begin() + d, 0.75f * gain);  // a constant row
            std::fill(x.begin() + d, x.begin() + 2 * d, 0.0f);   // and a zero one
            if (f16_inputs) {
              for (float& v : x) v = f16(v);
            }
            const std::int64_t groups = d / group, n_params = rows * groups;
            std::vector<std::uint8_t> codes(static_cast<std::size_t>(bits == 8 ? rows * d : rows * d / 2));
            std::vector<std::uint16_t> s16(static_cast<std::size_t>(n_params)), m16(s16.size());
            std::uint16_t* mins = bits == 4 ? m16.data() : nullptr;
            cpu::kv_quantize(bits, x.data(), rows, d, group, codes.data(), s16.data(), mins);
            std::vector<float> back(x.size());
            cpu::kv_dequantize(bits, codes.data(), s16.data(), mins, rows, d, group, back.data());

            // The f32 parameters of lowbit's quantize() over the same groups.
            QuantSpec spec;
            spec.scheme = bits == 8 ? QuantScheme::int8_symmetric : QuantScheme::int4_asymmetric;
            spec.granularity = group == d ? Granularity::per_token : Granularity::per_group;
            spec.group_size = group == d ? 0 : group;
            const QuantLayout layout = quant_layout(spec, rows, d);
            ASSERT_EQ(layout.scale_count(), n_params);
            std::vector<std::uint8_t> codes32(static_cast<std::size_t>(rows * layout.code_cols));
            std::vector<float> s32(static_cast<std::size_t>(n_params)), m32(s32.size());
            QuantizedView q;
            q.codes = TensorView::matrix(codes32.data(), scheme_code_dtype(spec.scheme), Device::cpu, rows,
                                         layout.code_cols);
            q.scales = TensorView::vector(s32.data(), DType::f32, Device::cpu, n_params);
            if (bits == 4) q.mins = TensorView::vector(m32.data(), DType::f32, Device::cpu, n_params);
            quantize(TensorView::matrix(x.data(), DType::f32, Device::cpu, rows, d), spec, q, Workspace{}, nullptr);

            const int lo_code = bits == 8 ? -128 : 0, hi_code = bits == 8 ? 127 : 15;
            for (std::int64_t r = 0; r < rows; ++r) {
              for (std::int64_t g = 0; g < groups; ++g) {
                const std::size_t i = static_cast<std::size_t>(r * groups + g);
                ASSERT_EQ(s16[i], formats::float_to_half(s32[i]).bits) << "scale of row " << r << " group " << g;
                const float s = formats::half_to_float({s16[i]});
                const float m = bits == 4 ? formats::half_to_float({m16[i]}) : 0.0f;
                float slack = 0.0f;  // clamping at the extreme codes (f32 inputs only)
                if (bits == 4) {
                  ASSERT_EQ(m16[i], formats::float_to_half(m32[i]).bits) << "min of row " << r << " group " << g;
                  if (f16_inputs) {
                    ASSERT_EQ(m, m32[i]);  // an f16 minimum is stored exactly
                  }
                  slack = std::fabs(m - m32[i]);
                }
                slack += static_cast<float>(hi_code - lo_code) * std::fabs(s - s32[i]) * (f16_inputs ? 0.0f : 1.0f);
                auto level = [&](int c) {
                  return bits == 8 ? static_cast<float>(c) * s : std::fmaf(static_cast<float>(c), s, m);
                };
                for (std::int64_t c = g * group; c < (g + 1) * group; ++c) {
                  const std::size_t e = static_cast<std::size_t>(r * d + c);
                  const std::uint8_t byte = codes[static_cast<std::size_t>(bits == 8 ? r * d + c : (r * d + c) / 2)];
                  const int code = bits == 8 ? static_cast<std::int8_t>(byte) : (c % 2 ? byte >> 4 : byte & 0xf);
                  ASSERT_EQ(back[e], level(code)) << "row " << r << " column " << c;  // decode = q * s16 (+ m16)
                  const float err = std::fabs(x[e] - level(code));
                  float best = INFINITY;
                  for (int k = lo_code; k <= hi_code; ++k) best = std::min(best, std::fabs(x[e] - level(k)));
                  // The nearest level (float rounding of (x - m) / s aside), and half a step.
                  const float tiny = 1e-6f * (std::fabs(x[e]) + s);
                  ASSERT_LE(err, best + tiny) << "row " << r << " column " << c << ": code " << code;
                  ASSERT_LE(err, 0.5f * s + slack + tiny) << "row " << r << " column " << c << ": code " << code;
                }
              }
            }
          }
        }
      }
    }
  }
}

// Past the f16 range (f32 inputs only), parameters saturate at +-65504: the values
// decode finite.
TEST(KvQuant, ParametersPastTheF16RangeSaturate) {
  std::vector<float> x(64);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = (i % 2 ? 1.0f : -1.0f) * 1e9f * static_cast<float>(i + 1) / 64.0f;
  for (int bits : {8, 4}) {
    std::vector<std::uint8_t> codes(64);
    std::uint16_t s16 = 0, m16 = 0;
    cpu::kv_quantize(bits, x.data(), 1, 64, 64, codes.data(), &s16, bits == 4 ? &m16 : nullptr);
    EXPECT_EQ(s16, 0x7bffu) << bits;  // 65504
    if (bits == 4) {
      EXPECT_EQ(m16, 0xfbffu);  // -65504
    }
    std::vector<float> back(64);
    cpu::kv_dequantize(bits, codes.data(), &s16, bits == 4 ? &m16 : nullptr, 1, 64, 64, back.data());
    for (float v : back) EXPECT_TRUE(std::isfinite(v)) << bits;
  }
}

std::vector<float> random_rows(Rng& rng, std::int64_t n, std::int64_t kv) {
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> x(static_cast<std::size_t>(n * kv));
  for (float& v : x) v = normal(rng);
  return x;
}

std::vector<double> as_double(const float* p, std::int64_t n) { return {p, p + n}; }

// Appends n random tokens to every layer, one at a time or at once, and checks the
// stored form of every visible position against the policy's definition.
void check_policy(const KvCacheOptions& o, std::int64_t n, bool one_at_a_time) {
  LOWBIT_TEST_RNG(rng);
  const KvShape shape{2, 2, 32};
  const std::int64_t kv = shape.kv_dim();
  KvCache cache(shape, o, 64);
  std::vector<std::vector<float>> k(2), v(2);
  for (std::int64_t l = 0; l < 2; ++l) {
    k[l] = random_rows(rng, n, kv), v[l] = random_rows(rng, n, kv);
    if (one_at_a_time) {
      for (std::int64_t t = 0; t < n; ++t) cache.append(l, 1, k[l].data() + t * kv, v[l].data() + t * kv);
    } else {
      cache.append(l, n, k[l].data(), v[l].data());
    }
  }
  EXPECT_EQ(cache.length(), n);
  EXPECT_EQ(cache.bytes(), KvCache::bytes_at(shape, o, n));
  const int bits = o.policy == KvPolicy::int8 ? 8 : o.policy == KvPolicy::int4 ? 4 : o.kv_bits;
  // Every query time `now`, not only the last: a prefill's queries read older tokens
  // in the form they had at their own time.
  for (std::int64_t l = 0; l < 2; ++l) {
    for (std::int64_t now = 0; now < n; ++now) {
      const KvCache::Visible vis = cache.visible(l, now);
      EXPECT_EQ(vis.end, now + 1);
      for (std::int64_t t = 0; t <= now; ++t) {
        const bool recent = t < o.sink || t > now - o.window;
        if (o.policy == KvPolicy::window) {
          EXPECT_EQ(t < vis.sink_end || t >= vis.recent_begin, recent) << "position " << t << " at " << now;
          if (!recent) continue;
        } else {
          EXPECT_EQ(vis.sink_end, 0);
          EXPECT_EQ(vis.recent_begin, 0);
        }
        for (int part = 0; part < 2; ++part) {
          const float* x = (part ? v[l] : k[l]).data() + t * kv;
          const float* stored = part ? cache.value(l, t, now) : cache.key(l, t, now);
          std::vector<double> want(static_cast<std::size_t>(kv));
          for (std::int64_t i = 0; i < kv; ++i) want[i] = f16(x[i]);
          if (o.policy == KvPolicy::int8 || o.policy == KvPolicy::int4) {
            want = naive_quantized(as_double(x, kv), o, shape.kv_heads, shape.head_dim, bits);
          } else if (o.policy == KvPolicy::selective && !recent) {
            want = naive_quantized(want, o, shape.kv_heads, shape.head_dim, bits);  // quantized from FP16
          }
          for (std::int64_t i = 0; i < kv; ++i) {
            ASSERT_EQ(stored[i], static_cast<float>(want[i]))
                << "layer " << l << " position " << t << " seen at " << now << " part " << part << " channel " << i;
          }
        }
      }
    }
  }
}

TEST(KvCache, EveryPolicyStoresWhatItDefines) {
  for (bool single : {true, false}) {
    for (const KvCacheOptions& o :
         {make(KvPolicy::full), make(KvPolicy::window, 4, 8), make(KvPolicy::window, 0, 5),
          make(KvPolicy::selective, 4, 8, 8), make(KvPolicy::selective, 4, 8, 4),
          make(KvPolicy::selective, 4, 8, 4, 16), make(KvPolicy::selective, 2, 3, 8, 64),
          make(KvPolicy::int8), make(KvPolicy::int4), make(KvPolicy::int4, 0, 1, 4, 64)}) {
      SCOPED_TRACE(std::string(kv_policy_name(o.policy)) + " sink " + std::to_string(o.sink) + " window " +
                   std::to_string(o.window) + " bits " + std::to_string(o.kv_bits) + " group " +
                   std::to_string(o.kv_group) + (single ? " one at a time" : " at once"));
      for (std::int64_t n : {1, 7, 12, 30}) check_policy(o, n, single);
    }
  }
}

TEST(KvCache, WindowVisibility) {
  KvCache cache({1, 1, 16}, make(KvPolicy::window, 2, 3), 32);
  std::vector<float> row(16, 1.0f);
  auto append = [&](int n) {
    for (int i = 0; i < n; ++i) cache.append(0, 1, row.data(), row.data());
  };
  append(4);  // 0 1 | 2 3: all visible
  EXPECT_EQ(cache.visible(0, 3).sink_end, 2);
  EXPECT_EQ(cache.visible(0, 3).recent_begin, 2);
  EXPECT_EQ(cache.visible(0, 0).sink_end, 1);  // a query at position 0 sees only itself
  EXPECT_EQ(cache.visible(0, 0).end, 1);
  append(6);  // length 10: sink 0, 1 and the last three 7, 8, 9
  EXPECT_EQ(cache.visible(0, 9).sink_end, 2);
  EXPECT_EQ(cache.visible(0, 9).recent_begin, 7);
  EXPECT_EQ(cache.visible(0, 9).end, 10);
  EXPECT_EQ(cache.visible(0, 6).recent_begin, 4);  // as position 6 saw it
  EXPECT_LOWBIT_ERROR(cache.visible(0, 10), "query position 10 is not below the length 10");
  cache.reset();
  EXPECT_EQ(cache.length(), 0);
  EXPECT_EQ(cache.bytes(), 0u);
}

TEST(KvCache, BadOptionsAndOverflowGetClearErrors) {
  const KvShape shape{1, 2, 64};
  EXPECT_LOWBIT_ERROR(KvCache(shape, make(KvPolicy::window, 16, 0), 8), "window = 0, expected >= 1");
  EXPECT_LOWBIT_ERROR(KvCache(shape, make(KvPolicy::selective, -1, 4), 8), "sink = -1, expected >= 0");
  EXPECT_LOWBIT_ERROR(KvCache(shape, make(KvPolicy::selective, 1, 4, 3), 8), "kv_bits = 3, expected 8 or 4");
  EXPECT_LOWBIT_ERROR(KvCache(shape, make(KvPolicy::int4, 0, 1, 4, 24), 8), "kv_group = 24, expected head_dim (64)");
  EXPECT_LOWBIT_ERROR(KvCache(shape, make(KvPolicy::int8, 0, 1, 8, 96), 8), "kv_group = 96");
  EXPECT_LOWBIT_ERROR(KvCache({0, 2, 64}, make(KvPolicy::full), 8), "must be positive");
  EXPECT_LOWBIT_ERROR(KvCache(shape, make(KvPolicy::full), 0), "max_tokens = 0");
  KvCache cache(shape, make(KvPolicy::int8), 2);
  std::vector<float> rows(3 * 128, 0.5f);
  EXPECT_LOWBIT_ERROR(cache.append(0, 3, rows.data(), rows.data()), "would exceed max_tokens = 2");
  EXPECT_LOWBIT_ERROR(cache.append(1, 1, rows.data(), rows.data()), "layer 1 out of range");
  rows[5] = NAN;
  EXPECT_LOWBIT_ERROR(cache.append(0, 1, rows.data(), rows.data()), "contains nan at row 0, column 5");
  EXPECT_EQ(parse_kv_policy("selective"), KvPolicy::selective);
  EXPECT_LOWBIT_ERROR(parse_kv_policy("fp8"), "got 'fp8'");
}

}  // namespace
}  // namespace lowbit::test

// The decode KV cache's public entry points (include/lowbit/kv_cache.h) on CPU views:
// the buffers after appends equal the twin's, attention is the twin's in double rounded
// once, kv_read returns the visible values, the graph forms equal the host forms, and
// bad arguments are refused with a message naming them.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "common/expect_error.h"
#include "common/kv_twin.h"
#include "common/random.h"
#include "formats/float16.h"
#include "lowbit/kv_cache.h"

namespace lowbit::test {
namespace {

struct Case {
  KvPolicy policy;
  int bits;
};
const Case kCases[] = {{KvPolicy::full, 8},      {KvPolicy::window, 8}, {KvPolicy::selective, 8},
                       {KvPolicy::selective, 4}, {KvPolicy::int8, 8},   {KvPolicy::int4, 4}};

// Host buffers of one layer, sized by kv_cache_sizes and poisoned.
struct HostLayer {
  TwinPart k, v;
  KvLayerViews views;

  explicit HostLayer(const KvCacheSpec& spec) {
    const KvCacheSizes z = kv_cache_sizes(spec);
    for (auto [p, view] : {std::pair{&k, &views.k}, std::pair{&v, &views.v}}) {
      p->f16.assign(static_cast<std::size_t>(z.f16), poison_f16());
      p->codes.assign(static_cast<std::size_t>(z.codes), kCodePoison);
      p->scales.assign(static_cast<std::size_t>(z.scales), poison_f16());
      p->mins.assign(static_cast<std::size_t>(z.mins), poison_f16());
      if (z.f16) view->f16 = TensorView::vector(p->f16.data(), DType::f16, Device::cpu, z.f16);
      if (z.codes) view->codes = TensorView::vector(p->codes.data(), z.code_dtype, Device::cpu, z.codes);
      if (z.scales) view->scales = TensorView::vector(p->scales.data(), DType::f16, Device::cpu, z.scales);
      if (z.mins) view->mins = TensorView::vector(p->mins.data(), DType::f16, Device::cpu, z.mins);
    }
  }
};

TensorView rows_view(std::vector<std::uint16_t>& x, std::int64_t offset, std::int64_t rows, std::int64_t d) {
  return TensorView::matrix(x.data() + offset, DType::f16, Device::cpu, rows, d);
}

TEST(KvCacheApi, AppendAttentionAndReadMatchTheTwin) {
  LOWBIT_TEST_RNG(rng);
  const std::int64_t hkv = 2, heads = 6, sink = 4, window = 8, max_tokens = 40;
  for (const Case& c : kCases) {
    for (const std::int64_t d : {64, 128}) {
      const KvCacheSpec spec{c.policy, hkv, d, sink, window, c.bits, max_tokens};
      SCOPED_TRACE(std::string(kv_policy_name(c.policy)) + " bits " + std::to_string(c.bits) + " D " +
                   std::to_string(d));
      HostLayer host(spec);
      const KvLayer layer(spec, host.views);
      const std::int64_t length = 29;
      auto k = random_f16(rng, length * hkv, d, 1.0f), v = random_f16(rng, length * hkv, d, 1.0f);
      auto q = random_f16(rng, heads, d, 1.0f);
      for (std::int64_t pos = 0; pos < length; ++pos) {
        kv_append(layer, pos, rows_view(k, pos * hkv * d, hkv, d), rows_view(v, pos * hkv * d, hkv, d), nullptr);
      }
      const KvTwin twin = build_kv_twin(kv_shape(c.policy, hkv, d, sink, window, c.bits, max_tokens), length, k, v);
      EXPECT_EQ(host.k.f16, twin.k.f16);
      EXPECT_EQ(host.k.codes, twin.k.codes);
      EXPECT_EQ(host.v.scales, twin.v.scales);
      EXPECT_EQ(host.v.mins, twin.v.mins);

      std::vector<float> out(static_cast<std::size_t>(heads * d), -1.0f);
      kv_attention(layer, length, rows_view(q, 0, heads, d),
                   TensorView::matrix(out.data(), DType::f32, Device::cpu, heads, d), Workspace{}, nullptr);
      const TwinAttention ref = twin_attention(twin, q, heads);
      for (std::size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], static_cast<float>(ref.out[i])) << i;

      // The graph form at the same position gives the same bits.
      std::int32_t pos = static_cast<std::int32_t>(length - 1);
      std::vector<float> at(out.size(), -1.0f);
      kv_attention_at(layer, TensorView::vector(&pos, DType::i32, Device::cpu, 1), max_tokens,
                      rows_view(q, 0, heads, d), TensorView::matrix(at.data(), DType::f32, Device::cpu, heads, d),
                      Workspace{}, nullptr);
      EXPECT_EQ(at, out);

      const std::int64_t visible = kv_visible_count(spec, length);
      std::vector<std::uint16_t> k_out(static_cast<std::size_t>(visible * hkv * d)), v_out(k_out.size());
      kv_read(layer, length, TensorView::vector(k_out.data(), DType::f16, Device::cpu, visible * hkv * d),
              TensorView::vector(v_out.data(), DType::f16, Device::cpu, visible * hkv * d), nullptr);
      for (std::size_t i = 0; i < k_out.size(); ++i) {
        ASSERT_EQ(k_out[i], formats::float_to_half(twin.k.visible[i]).bits) << "k at " << i;
        ASSERT_EQ(v_out[i], formats::float_to_half(twin.v.visible[i]).bits) << "v at " << i;
      }
    }
  }
}

TEST(KvCacheApi, BadArgumentsAreNamed) {
  const std::int64_t hkv = 2, d = 64;
  const KvCacheSpec spec{KvPolicy::selective, hkv, d, 4, 8, 4, 32};
  EXPECT_LOWBIT_ERROR(kv_cache_sizes(KvCacheSpec{KvPolicy::selective, hkv, 96, 4, 8, 4, 32}), "head_dim = 96");
  EXPECT_LOWBIT_ERROR(kv_cache_sizes(KvCacheSpec{KvPolicy::selective, hkv, d, 4, 8, 5, 32}), "kv_bits = 5");
  EXPECT_LOWBIT_ERROR(kv_cache_sizes(KvCacheSpec{KvPolicy::window, hkv, d, 4, 0, 8, 32}), "window 0");
  EXPECT_LOWBIT_ERROR(parse_kv_policy("fp8"), "got 'fp8'");

  HostLayer host(spec);
  KvLayerViews missing = host.views;
  missing.v.mins = TensorView{};
  EXPECT_LOWBIT_ERROR(KvLayer(spec, missing), "v_mins: missing");
  KvLayerViews short_codes = host.views;
  short_codes.k.codes.shape[0] -= 1;
  EXPECT_LOWBIT_ERROR(KvLayer(spec, short_codes), "k_codes: expected");
  KvLayerViews aliased = host.views;
  aliased.v.scales = aliased.k.scales;
  EXPECT_LOWBIT_ERROR(KvLayer(spec, aliased), "overlap");

  const KvLayer layer(spec, host.views);
  std::vector<std::uint16_t> token(static_cast<std::size_t>(hkv * d), 0);
  const TensorView t = rows_view(token, 0, hkv, d);
  EXPECT_LOWBIT_ERROR(kv_append(layer, 32, t, t, nullptr), "position 32 outside the cache");
  EXPECT_LOWBIT_ERROR(kv_append(layer, 0, rows_view(token, 0, 1, d), t, nullptr), "k: expected a contiguous f16 [kv_heads");
  EXPECT_LOWBIT_ERROR(kv_append(layer, 0, t, host.views.k.f16, nullptr), "v: expected a contiguous f16");
  // The token must not live in the cache's buffers.
  const TensorView inside = TensorView::matrix(host.k.f16.data(), DType::f16, Device::cpu, hkv, d);
  EXPECT_LOWBIT_ERROR(kv_append(layer, 0, inside, t, nullptr), "k_f16: overlaps k in memory; an output must not alias an input");
  kv_append(layer, 0, t, t, nullptr);
  // kv_read's outputs must not cover the cache it reads.
  std::vector<std::uint16_t> v_read(static_cast<std::size_t>(hkv * d));
  EXPECT_LOWBIT_ERROR(kv_read(layer, 1, TensorView::vector(host.v.f16.data(), DType::f16, Device::cpu, hkv * d),
                              TensorView::vector(v_read.data(), DType::f16, Device::cpu, hkv * d), nullptr),
                      "k_out: overlaps v_f16");
  std::vector<std::uint16_t> q(static_cast<std::size_t>(3 * d), 0);
  std::vector<float> out(static_cast<std::size_t>(3 * d));
  EXPECT_LOWBIT_ERROR(kv_attention(layer, 1, rows_view(q, 0, 3, d),
                                   TensorView::matrix(out.data(), DType::f32, Device::cpu, 3, d), Workspace{}, nullptr),
                      "q: n_heads = 3 is not a positive multiple of kv_heads = 2");
  EXPECT_LOWBIT_ERROR(kv_attention(layer, 0, rows_view(q, 0, 2, d),
                                   TensorView::matrix(out.data(), DType::f32, Device::cpu, 2, d), Workspace{}, nullptr),
                      "kv_attention: length 0");
}

}  // namespace
}  // namespace lowbit::test

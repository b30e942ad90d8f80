// Key blocks (KIVI) in the decode cache's layout (core/kv_layout.h): the layout twin
// (cpu::kv_append over core::KvLayerBuffers, what the GPU append reproduces byte for
// byte) reads, after every append, exactly the values the engine's KvCache (its
// stage_key: the CPU reference of --kv-key-block) gives the newest query, K and V, for
// every quantizing policy, B = 32 and 64, head_dim 64 and 128, lengths ending mid-block.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/expect_error.h"
#include "common/kv_twin.h"
#include "common/random.h"
#include "core/kv_layout.h"
#include "cpu/kv_cache.h"
#include "engine/kv_cache.h"
#include "formats/float16.h"

namespace lowbit::test {
namespace {

using Policy = QuantizingPolicy;
constexpr const auto& kPolicies = kQuantizingPolicies;

TEST(KvKeyBlockTwin, ReadsWhatTheEngineCacheReads) {
  LOWBIT_TEST_RNG(rng);
  constexpr std::int64_t kSink = 5, kWindow = 11;
  for (const Policy& p : kPolicies) {
    for (const std::int64_t d : {64, 128}) {
      for (const std::int64_t hkv : {1, 3}) {
        for (const std::int64_t b : {32, 64}) {
          // 2.5 blocks of body past the window: the last block open, mid-way.
          const std::int64_t n = kSink + kWindow + 2 * b + b / 2 + 3;
          SCOPED_TRACE(std::string(p.name) + " D " + std::to_string(d) + " kv_heads " + std::to_string(hkv) + " B " +
                       std::to_string(b));
          const KvLayerShape s =
              core::with_key_block(kv_shape(p.policy, hkv, d, kSink, kWindow, p.bits, n), b);
          ASSERT_TRUE(s.key_blocks());
          const std::int64_t row = hkv * d;
          const auto k = random_f16(rng, n * hkv, d, 1.0f), v = random_f16(rng, n * hkv, d, 2.0f);
          KvTwin twin;
          twin.shape = s;
          poison_part(s, twin.k, true);
          poison_part(s, twin.v);
          const core::KvLayerBuffers buffers = twin_buffers(twin);

          engine::KvCacheOptions o;
          o.policy = p.policy;
          o.sink = kSink;
          o.window = kWindow;
          o.kv_bits = p.bits;
          o.kv_key_block = b;
          engine::KvCache cache(engine::KvShape{1, hkv, d}, o, n);
          std::vector<float> kf(static_cast<std::size_t>(row)), vf(kf.size());
          for (std::int64_t pos = 0; pos < n; ++pos) {
            const std::vector<std::uint16_t> scales_before = twin.k.scales;
            cpu::kv_append(s, buffers, pos, k.data() + pos * row, d, v.data() + pos * row, d);
            // A block is quantized exactly by the appends the prefill cuts its chunks after.
            ASSERT_EQ(twin.k.scales != scales_before, s.next_block_completion(pos) == pos) << "position " << pos;
            for (std::int64_t c = 0; c < row; ++c) {
              kf[static_cast<std::size_t>(c)] = formats::half_to_float({k[static_cast<std::size_t>(pos * row + c)]});
              vf[static_cast<std::size_t>(c)] = formats::half_to_float({v[static_cast<std::size_t>(pos * row + c)]});
            }
            cache.append(0, 1, kf.data(), vf.data());
            const std::vector<float> kt = cpu::kv_visible_values(s, buffers.k, pos + 1);
            const std::vector<float> vt = cpu::kv_visible_values(s, buffers.v, pos + 1);
            ASSERT_EQ(kt.size(), static_cast<std::size_t>((pos + 1) * row));  // every position visible
            for (std::int64_t j = 0; j <= pos; ++j) {
              const float* ke = cache.key(0, j);
              const float* ve = cache.value(0, j);
              for (std::int64_t c = 0; c < row; ++c) {
                ASSERT_EQ(kt[static_cast<std::size_t>(j * row + c)], ke[c])
                    << "K of position " << j << " at length " << pos + 1 << ", channel " << c;
                ASSERT_EQ(vt[static_cast<std::size_t>(j * row + c)], ve[c])
                    << "V of position " << j << " at length " << pos + 1 << ", channel " << c;
              }
            }
          }
        }
      }
    }
  }
}

TEST(KvKeyBlockTwin, BadBlockSizesAreNamed) {
  const KvLayerShape s = kv_shape(KvPolicy::int4, 2, 64, 0, 0, 4, 100);
  EXPECT_LOWBIT_ERROR(core::with_key_block(s, 1), "kv_key_block = 1");
  EXPECT_LOWBIT_ERROR(core::with_key_block(s, 33), "kv_key_block = 33");
  EXPECT_LOWBIT_ERROR(core::with_key_block(s, 2048), "kv_key_block = 2048");
  // Policies without a body keep every key FP16.
  EXPECT_FALSE(core::with_key_block(kv_shape(KvPolicy::full, 2, 64, 0, 0, 8, 100), 32).key_blocks());
  // The staging ring and the per-channel parameters of complete blocks only.
  const KvLayerShape b = core::with_key_block(s, 32);
  EXPECT_EQ(b.staged_bytes(), 2u * 32 * 64 * 2);
  EXPECT_EQ(b.key_param_count(), 3u * 2 * 64);  // 100 positions: 3 complete blocks
  EXPECT_EQ(b.param_count(), 100u * 2);         // V: per token
  // The appends that complete a block: int4 at 31, 63, ...; selective (sink 5, window 11)
  // when body token 31 (position 36) leaves the window, at 47.
  EXPECT_EQ(b.next_block_completion(0), 31);
  EXPECT_EQ(b.next_block_completion(32), 63);
  const KvLayerShape sel = core::with_key_block(kv_shape(KvPolicy::selective, 2, 64, 5, 11, 4, 200), 32);
  EXPECT_EQ(sel.next_block_completion(0), 47);
  EXPECT_EQ(sel.next_block_completion(47), 47);
  EXPECT_EQ(sel.next_block_completion(48), 79);
}

}  // namespace
}  // namespace lowbit::test

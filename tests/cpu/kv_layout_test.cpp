// The decode cache's layout (core/kv_layout.h): it holds exactly the engine KvCache's
// bytes, its spans are KvCache::visible's, the CPU twin reads exactly the values the
// engine's KvCache reads, and the split plan covers the sequence within its bounds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "common/kv_twin.h"
#include "common/random.h"
#include "core/fast_divisor.h"
#include "core/kv_layout.h"
#include "engine/kv_cache.h"

namespace lowbit::test {
namespace {

using core::decode_span;
using core::DecodeSplitPlan;
using lowbit::KvPolicy;

struct Case {
  KvPolicy policy;
  int bits;
};
const Case kCases[] = {{KvPolicy::full, 0},      {KvPolicy::window, 0}, {KvPolicy::selective, 8},
                       {KvPolicy::selective, 4}, {KvPolicy::int8, 8},   {KvPolicy::int4, 4}};

engine::KvCacheOptions options(const Case& c, std::int64_t sink, std::int64_t window) {
  engine::KvCacheOptions o;
  o.policy = c.policy;
  o.sink = sink;
  o.window = window;
  o.kv_bits = c.bits == 0 ? 8 : c.bits;
  return o;
}

// The decode kernels' key-block index (body index / key_block) by multiply-high: equal to
// integer division for every divisor a cache can take and more, at the numerators where
// a rounding error would show first (multiples and their neighbours, the top of the range).
TEST(FastDivisor, EqualsIntegerDivision) {
  LOWBIT_TEST_RNG(rng);
  std::vector<std::uint32_t> divisors;
  for (std::uint32_t d = 1; d <= 1100; ++d) divisors.push_back(d);
  for (int b = 11; b < 31; ++b) divisors.insert(divisors.end(), {(1u << b) - 1, 1u << b, (1u << b) + 1});
  divisors.push_back(0x7fffffffu);
  std::uniform_int_distribution<std::uint32_t> any(1, 0x7fffffffu), below(0, 0x7fffffffu);
  for (int i = 0; i < 200; ++i) divisors.push_back(any(rng));
  for (const std::uint32_t d : divisors) {
    const core::FastDivisor div(d);
    std::vector<std::uint32_t> numerators = {0, 1, d - 1, d, d + 1, 0x7fffffffu, 0x7fffffffu - d};
    const std::uint32_t top = 0x7fffffffu / d * d;  // the largest multiple of d below 2^31
    numerators.insert(numerators.end(), {top, top - 1, top - d, top - d + 1});
    for (int k = 0; k < 64; ++k) numerators.push_back(below(rng));
    for (const std::uint32_t n : numerators) {
      if (n > 0x7fffffffu) continue;  // d + 1 past 2^31 - 1 for the largest divisors
      ASSERT_EQ(div.divide(n), n / d) << n << " / " << d;
    }
  }
  EXPECT_THROW(core::FastDivisor(0), Error);
  EXPECT_THROW(core::FastDivisor(std::int64_t{1} << 31), Error);
}

TEST(DecodeCacheLayout, HoldsExactlyKvCacheBytes) {
  for (const Case& c : kCases) {
    for (std::int64_t d : {64, 128}) {
      const std::int64_t h = 3, tokens = 4096;
      const KvLayerShape s = kv_shape(c.policy, h, d, 16, 32, c.bits, tokens);
      // f16 scales (and mins): 2 bytes each
      const std::size_t part = s.f16_bytes() + s.code_bytes_total() + s.param_count() * 2 * (s.has_mins() ? 2 : 1);
      EXPECT_EQ(s.param_bytes_total(), s.param_count() * 2 * (s.has_mins() ? 2 : 1));
      const std::size_t cpu = engine::KvCache::bytes_at({1, h, d}, options(c, 16, 32), tokens);
      EXPECT_EQ(2 * part, cpu) << kv_policy_name(c.policy) << " bits " << c.bits << " D " << d;
    }
  }
}

TEST(DecodeCacheLayout, SpanIsKvCacheVisible) {
  for (const Case& c : kCases) {
    const KvLayerShape s = kv_shape(c.policy, 2, 64, 4, 8, c.bits, 100);
    for (std::int64_t len = 1; len <= 100; ++len) {
      const core::DecodeSpan span = decode_span(s, len);
      EXPECT_EQ(span.end, len);
      EXPECT_LE(span.sink_end, span.recent_begin);
      if (c.policy == KvPolicy::window) {
        EXPECT_EQ(span.sink_end, std::min<std::int64_t>(4, len));
        EXPECT_EQ(span.recent_begin, std::max(span.sink_end, len - 8));
        EXPECT_EQ(span.visible(s), span.sink_end + len - span.recent_begin);
      } else {
        EXPECT_EQ(span.visible(s), len) << kv_policy_name(c.policy);
      }
    }
  }
}

// The twin's decoded values (what the GPU kernel reads) equal KvCache::key / value of
// the newest query, bit for bit, for every visible position.
TEST(DecodeCacheLayout, TwinReadsWhatKvCacheReads) {
  LOWBIT_TEST_RNG(rng);
  const std::int64_t h = 3, sink = 4, window = 8, max_tokens = 64;
  for (const Case& c : kCases) {
    for (std::int64_t d : {64, 128}) {
      for (std::int64_t len : {1, 5, 12, 13, 40, 64}) {
        SCOPED_TRACE(std::string(kv_policy_name(c.policy)) + " bits " + std::to_string(c.bits) + " D " +
                     std::to_string(d) + " length " + std::to_string(len));
        const KvLayerShape s = kv_shape(c.policy, h, d, sink, window, c.bits, max_tokens);
        const auto k = random_f16(rng, len * h, d, 1.0f), v = random_f16(rng, len * h, d, 1.0f);
        const KvTwin twin = build_kv_twin(s, len, k, v);
        engine::KvCache cache({1, h, d}, options(c, sink, window), max_tokens);
        std::vector<float> kf(k.size()), vf(v.size());
        for (std::size_t i = 0; i < k.size(); ++i) {
          kf[i] = formats::half_to_float({k[i]});
          vf[i] = formats::half_to_float({v[i]});
        }
        for (std::int64_t p = 0; p < len; ++p) cache.append(0, 1, kf.data() + p * h * d, vf.data() + p * h * d);
        const std::vector<std::int64_t> pos = visible_positions(twin);
        const engine::KvCache::Visible vis = cache.visible(0, len - 1);
        EXPECT_EQ(static_cast<std::int64_t>(pos.size()), vis.sink_end + vis.end - vis.recent_begin);
        for (std::size_t j = 0; j < pos.size(); ++j) {
          const std::int64_t p = pos[j], at = static_cast<std::int64_t>(j) * h * d;
          EXPECT_EQ(0, std::memcmp(cache.key(0, p), twin.k.visible.data() + at, static_cast<std::size_t>(h * d) * 4))
              << "key at " << p;
          EXPECT_EQ(0, std::memcmp(cache.value(0, p), twin.v.visible.data() + at, static_cast<std::size_t>(h * d) * 4))
              << "value at " << p;
        }
      }
    }
  }
}

TEST(DecodeSplitPlan, CoversTheSequenceWithinBounds) {
  for (std::int64_t visible : {1, 7, 48, 49, 63, 64, 65, 300, 4096, 5000, 100000, 1 << 24}) {
    for (std::int64_t blocks : {1, 3, 8, 32}) {
      for (int sms : {1, 132}) {
        for (const core::DecodeSplitCost& cost :
             {core::kSimtSplitCost, core::kMmaF16SplitCost, core::kMmaQuantSplitCost}) {
          const DecodeSplitPlan p = core::plan_decode_splits(visible, blocks, sms, 2, cost);
          EXPECT_GE(p.splits * p.split_len, visible);
          EXPECT_LT((p.splits - 1) * p.split_len, visible);  // no empty split
          EXPECT_EQ(p.split_len % DecodeSplitPlan::kAlign, 0);
          EXPECT_GE(p.split_len, DecodeSplitPlan::kMinSplit);
          EXPECT_LE(p.split_len, cost.longest);
          // Within what a workspace sized for this length, or any longer one, holds.
          EXPECT_LE(p.splits, core::decode_splits_most(visible, blocks, 2 * sms));
        }
        EXPECT_LE(core::decode_splits_most(visible, blocks, 2 * sms),
                  core::decode_splits_most(visible + 1000, blocks, 2 * sms));
      }
    }
  }
  // 4096 positions, 3 blocks a split, 132 SMs: ~2 blocks per SM.
  const DecodeSplitPlan p = core::plan_decode_splits(4096, 3, 132);
  EXPECT_GE(p.splits * 3, 132);
  // 16 sequences x 8 KV heads after ~2K tokens on 264 slots: 4 splits (512 blocks, 1.94
  // waves), not the 3 that fill the slots once over (384 blocks: 1.45 waves, the second
  // half empty); on 396 slots 3 (0.97 of a wave), not 4 (1.29 waves).
  EXPECT_EQ(core::plan_decode_splits(2176, 16 * 8, 132, 2).splits, 4);
  EXPECT_EQ(core::plan_decode_splits(2176, 16 * 8, 132, 3).splits, 3);
  // Balanced: 3 splits of 2,176 positions are 736, 736, 704, not 1024, 1024, 128.
  EXPECT_EQ(core::plan_decode_splits(2176, 64 * 8, 132, 2).split_len, 736);
  // A kernel that keeps 3 blocks a SM resident: 32768 positions of 8 KV heads fill 3 x 132.
  const DecodeSplitPlan three = core::plan_decode_splits(32768, 8, 132, 3);
  EXPECT_NEAR(static_cast<double>(three.splits * 8), 3 * 132, 0.1 * 3 * 132);  // splits' lengths are rounded up to 32
  EXPECT_THROW(core::plan_decode_splits(32768, 8, 132, 0), lowbit::Error);
  // The tensor-core kernels' costs (fitted to the H200's sweep, bench/notes/decode.md): a full
  // grid takes long splits (64 sequences x 8 KV heads at 8K: 2 of 4096; 16 at 8K: 3 of 2752,
  // one wave), one sequence still fills the 396 slots with the default plan's short ones.
  EXPECT_EQ(core::plan_decode_splits(8192, 64 * 8, 132, 3, core::kMmaQuantSplitCost).split_len, 4096);
  EXPECT_EQ(core::plan_decode_splits(8192, 64 * 8, 132, 2, core::kMmaF16SplitCost).split_len, 4096);
  EXPECT_EQ(core::plan_decode_splits(32768, 8, 132, 3, core::kMmaQuantSplitCost).split_len, 672);
  EXPECT_EQ(core::plan_decode_splits(2048, 16 * 8, 132, 3, core::kMmaQuantSplitCost).split_len, 704);
  EXPECT_EQ(core::plan_decode_splits(8192, 16 * 8, 132, 3, core::kMmaQuantSplitCost).split_len, 2752);
  for (const std::int64_t visible : {2048, 8192}) {
    EXPECT_EQ(core::plan_decode_splits(visible, 8, 132, 3, core::kMmaQuantSplitCost).split_len,
              core::plan_decode_splits(visible, 8, 132, 3).split_len);
  }
  EXPECT_EQ(core::decode_heads_per_block(3), 3);
  EXPECT_EQ(core::decode_heads_per_block(4), 4);
  EXPECT_EQ(core::decode_heads_per_block(8), 4);
  EXPECT_EQ(core::decode_heads_per_block(6), 3);
  EXPECT_EQ(core::decode_heads_per_block(7), 1);
}

// The graph form's split length at each step's own length (core::split_len_at): whole
// rounds of 64 positions, every position in one of the launch's splits, the fewest rounds
// that fit. The 8B decode's grid (33 splits of 8 KV heads, two blocks an SM on 132 SMs)
// at 2,048 of a 2,437-position session: 32 splits of 64; at 2,437, 20 of 128.
TEST(DecodeSplitPlan, SplitLengthFollowsTheStepsLength) {
  for (const std::int64_t splits : {1, 7, 33, 49, 396}) {
    for (std::int64_t visible = 1; visible <= 40000; visible += visible < 300 ? 1 : 97) {
      const std::int64_t len = core::split_len_at(visible, splits);
      EXPECT_EQ(len % DecodeSplitPlan::kMinSplit, 0);
      EXPECT_GE(len, DecodeSplitPlan::kMinSplit);
      EXPECT_GE(len * splits, visible) << "visible " << visible << " splits " << splits;
      if (len > DecodeSplitPlan::kMinSplit) {  // one round less would not fit
        EXPECT_LT((len - DecodeSplitPlan::kMinSplit) * splits, visible) << "visible " << visible;
      }
      EXPECT_LE(len, core::split_len_at(visible + 1, splits));  // grows with the length
    }
  }
  EXPECT_EQ(core::split_len_at(2048, 33), 64);
  EXPECT_EQ(core::split_len_at(2112, 33), 64);
  EXPECT_EQ(core::split_len_at(2113, 33), 128);
  EXPECT_EQ(core::split_len_at(2437, 33), 128);
  EXPECT_EQ(core::split_len_at(8192, 33), 256);
  EXPECT_EQ(core::split_len_at(100, 33), 64);
}

// One sequence's plan: the 8B decode (8 KV heads of 4 query heads, one tensor-core block a
// KV head) on 132 SMs fills two blocks an SM whether its kernel keeps two (FP16) or three
// (quantized) resident: 33 splits, each the step's length in rounds of 64; the default plan
// where the grid passes a wave, the splits would pass the kernel's longest, or two blocks
// an SM hold no split (more blocks a split than twice the SMs).
TEST(DecodeSplitPlan, OneSequenceFillsTwoBlocksAnSm) {
  for (const auto& [per_sm, cost] : {std::pair{2, core::kMmaF16SplitCost}, std::pair{3, core::kMmaQuantSplitCost}}) {
    const core::SequenceSplitPlan p = core::plan_sequence_splits(2437, 8, 132, per_sm, cost);
    EXPECT_EQ(p.fill, 33);
    EXPECT_EQ(p.plan.split_len, 128);
    EXPECT_EQ(p.plan.splits, 20);
    EXPECT_EQ(core::plan_sequence_splits(2048, 8, 132, per_sm, cost).plan.splits, 32);
  }
  // 200,000 positions over 33 splits would take 6,080 a split, past the 4,096 the
  // tensor-core kernels take: the default plan.
  const core::SequenceSplitPlan longest = core::plan_sequence_splits(200000, 8, 132, 2, core::kMmaF16SplitCost);
  EXPECT_EQ(longest.fill, 0);
  EXPECT_EQ(longest.plan.split_len, core::plan_decode_splits(200000, 8, 132, 2, core::kMmaF16SplitCost).split_len);
  // 300 blocks a split on 132 SMs at 3 resident: one split fits a wave, but two blocks an
  // SM (264) hold none.
  const core::SequenceSplitPlan wide = core::plan_sequence_splits(100, 300, 132, 3, core::kMmaQuantSplitCost);
  EXPECT_EQ(wide.fill, 0);
  EXPECT_EQ(wide.plan.splits, 1);
  for (std::int64_t visible : {1, 65, 4097, 40000}) {
    const core::SequenceSplitPlan p = core::plan_sequence_splits(visible, 8, 132, 2, core::kSimtSplitCost);
    EXPECT_GE(p.plan.splits * p.plan.split_len, visible);
    EXPECT_LE(p.plan.split_len, core::kSimtSplitCost.longest);
    if (p.fill > 0) {
      EXPECT_LE(p.plan.splits, p.fill);
    }
  }
}

TEST(DecodeCacheLayout, RejectsBadShapes) {
  EXPECT_THROW(kv_shape(KvPolicy::full, 3, 96, 0, 0, 0, 10), Error);
  EXPECT_THROW(kv_shape(KvPolicy::selective, 3, 64, 4, 8, 6, 10), Error);
  EXPECT_THROW(kv_shape(KvPolicy::window, 3, 64, 4, 0, 0, 10), Error);
  const KvLayerShape s = kv_shape(KvPolicy::full, 3, 64, 0, 0, 0, 10);
  EXPECT_THROW(decode_span(s, 0), Error);
}

TEST(KvPolicyNames, PolicyWithBitsInOneName) {
  const std::vector<std::pair<const char*, KvPolicyBits>> cases = {
      {"full", {KvPolicy::full, 8}},        {"window", {KvPolicy::window, 8}}, {"selective8", {KvPolicy::selective, 8}},
      {"selective4", {KvPolicy::selective, 4}}, {"int8", {KvPolicy::int8, 8}},     {"int4", {KvPolicy::int4, 4}}};
  for (const auto& [name, want] : cases) {
    const KvPolicyBits got = parse_kv_policy_bits(name);
    EXPECT_EQ(got.policy, want.policy) << name;
    EXPECT_EQ(got.bits, want.bits) << name;
  }
  for (const char* bad : {"selective", "selective5", "int2", "", "FULL"}) {
    EXPECT_THROW(parse_kv_policy_bits(bad), lowbit::Error) << bad;
  }
  EXPECT_THROW(parse_kv_policy_bits(nullptr), lowbit::Error);
}

// The prefill rows kernel's forms (KvRowForms) are decode_span's: the row at t sees s in
// FP16 exactly when s < sink_end or s >= recent_begin of the span of t + 1 positions, in
// the body exactly between them (quantizing policies), and nothing else; with key blocks
// the span's body is the body where s's block is complete at t (its last body position
// left the window) and open before. Its block and tile tests (needed, tile_needed) are
// exact, and tile_whole (the kernel then skips the per-element masks) never claims a pair
// that is not in the view: checked exhaustively over small shapes, every block of rows and
// every tile offset, per token and in key blocks of 16, 32 and 48.
TEST(DecodeCacheLayout, RowFormsAreTheDecodeSpans) {
  struct Params {
    std::int64_t sink, window;
  };
  for (const Case& c : kCases) {
    for (Params p : {Params{0, 1}, Params{3, 5}, Params{16, 32}, Params{5, 37}}) {
      const core::KvLayerShape per_token =
          kv_shape(c.policy, 2, 64, p.sink, p.window, c.bits == 0 ? 8 : c.bits, 160);
      for (const std::int64_t key_block : {0, 16, 32, 48}) {
        if (key_block > 0 && per_token.body == core::KvBody::none) continue;
        const core::KvLayerShape s = core::with_key_block(per_token, key_block);
        SCOPED_TRACE(testing::Message() << "policy " << static_cast<int>(c.policy) << " sink " << p.sink << " window "
                                        << p.window << " key block " << key_block);
        const core::KvRowForms f(s);
        ASSERT_EQ(f.views(), key_block > 0 ? 3 : 2);
        const int n = 130;
        for (int t = 0; t < n; ++t) {
          const core::DecodeSpan span = decode_span(s, t + 1);
          for (int q = 0; q <= t; ++q) {
            const bool sink = q < span.sink_end, recent = q >= span.recent_begin;
            const bool body = !sink && !recent && s.body != core::KvBody::none;
            const std::int64_t b = std::max<std::int64_t>(key_block, 1);
            const std::int64_t block_last = s.body_base + ((q - s.body_base) / b + 1) * key_block - 1;
            const bool complete = key_block == 0 || block_last <= t - s.window;
            ASSERT_EQ(f.f16_at(t, q), sink || recent) << "t " << t << " s " << q;
            ASSERT_EQ(f.body_at(t, q), body && complete) << "t " << t << " s " << q;
            ASSERT_EQ(f.open_at(t, q), body && !complete) << "t " << t << " s " << q;
          }
          for (int view = 0; view < f.views(); ++view) ASSERT_FALSE(f.at(view, t, t + 1)) << "a later position";
        }
        for (int tile : {16, 64}) {
          for (int tmin = 0; tmin < n; tmin += 7) {
            for (int tmax : {tmin, tmin + 8, tmin + 63}) {
              for (int view = 0; view < f.views(); ++view) {
                auto some_row = [&](int q) {
                  for (int t = tmin; t <= tmax; ++t) {
                    if (f.at(view, t, q)) return true;
                  }
                  return false;
                };
                for (int q = 0; q < tmax + 2; ++q) {
                  ASSERT_EQ(f.needed(view, tmin, tmax, q), some_row(q))
                      << "view " << view << " rows " << tmin << ".." << tmax << " s " << q;
                }
                for (int n0 = 0; n0 < tmax + tile; n0 += tile) {
                  bool any = false, all = true;
                  for (int q = n0; q < n0 + tile; ++q) {
                    any = any || some_row(q);
                    for (int t = tmin; t <= tmax; ++t) all = all && f.at(view, t, q);
                  }
                  ASSERT_EQ(f.tile_needed(view, tmin, tmax, n0, tile), any)
                      << "view " << view << " rows " << tmin << ".." << tmax << " tile " << n0;
                  if (f.tile_whole(view, tmin, tmax, n0, tile)) {
                    ASSERT_TRUE(all) << "view " << view << " rows " << tmin << ".." << tmax << " tile " << n0;
                  }
                }
              }
            }
          }
        }
      }
    }
  }
}

// The prefill rows kernel's grid and item walk (plan_rows_tiles, next_rows_item): every
// block's splits visit each (tile, view) that some of its rows read exactly once, within
// the split's tiles, so each row at t meets every position it sees (s <= t, in the form
// it sees it) in exactly one item; the plan keeps within the workspace's splits and covers
// the last row's tiles. Every policy, per token and in key blocks of 16 and 48, GQA
// groups 1 .. 64, short and long chunks.
TEST(DecodeCacheLayout, RowsKernelItemsCoverEachRowsPositionsOnce) {
  struct Chunk {
    std::int64_t pos0, rows;
  };
  constexpr int kTile = 64;
  for (const Case& c : kCases) {
    for (auto [sink, window] : {std::pair<std::int64_t, std::int64_t>{16, 32}, {5, 37}}) {
      const core::KvLayerShape per_token = kv_shape(c.policy, 8, 64, sink, window, c.bits == 0 ? 8 : c.bits, 4000);
      for (const std::int64_t key_block : {0, 16, 48}) {
        if (key_block > 0 && per_token.body == core::KvBody::none) continue;
        const core::KvLayerShape s = core::with_key_block(per_token, key_block);
        const core::KvRowForms f(s);
        const int views = f.views();
        for (Chunk ch : {Chunk{0, 1}, Chunk{0, 63}, Chunk{5, 7}, Chunk{40, 100}, Chunk{700, 600}, Chunk{3000, 100},
                         Chunk{2000, 40}}) {
          for (std::int64_t group : {1, 3, 7, 8, 64}) {
            for (std::int64_t max_splits : {0, 1, 4, 1000}) {
              SCOPED_TRACE(testing::Message() << "policy " << static_cast<int>(c.policy) << " key block " << key_block
                                              << " chunk " << ch.pos0 << "+" << ch.rows << " group " << group
                                              << " max splits " << max_splits);
              const core::RowsTilePlan plan =
                  core::plan_rows_tiles(ch.rows, ch.pos0, 2, group, 64, kTile, 264, max_splits);
              ASSERT_EQ(plan.rows_per_block, 64 / group);
              ASSERT_GE(plan.splits, 1);
              ASSERT_LE(plan.splits, std::max<std::int64_t>(1, max_splits));
              ASSERT_GE(plan.splits * plan.split_tiles, plan.tiles);
              ASSERT_LT((plan.splits - 1) * plan.split_tiles, plan.tiles);
              ASSERT_EQ(plan.tiles, (ch.pos0 + ch.rows - 1) / kTile + 1);
              for (std::int64_t r0 = 0; r0 < ch.rows; r0 += plan.rows_per_block) {
                const int tmin = static_cast<int>(ch.pos0 + r0);
                const int tmax = static_cast<int>(ch.pos0 + std::min(r0 + plan.rows_per_block, ch.rows) - 1);
                std::vector<int> visits(static_cast<std::size_t>(views * plan.tiles), 0);
                for (std::int64_t split = 0; split < plan.splits; ++split) {
                  const int first = static_cast<int>(split * plan.split_tiles);
                  const int end = std::min(tmax / kTile + 1, static_cast<int>((split + 1) * plan.split_tiles));
                  for (int item = core::next_rows_item(f, views, views * first - 1, end, tmin, tmax, kTile);
                       item >= 0; item = core::next_rows_item(f, views, item, end, tmin, tmax, kTile)) {
                    ASSERT_GE(item / views, first);
                    ASSERT_LT(item / views, end);
                    ++visits[static_cast<std::size_t>(item)];
                  }
                }
                for (int v : visits) ASSERT_LE(v, 1) << "an item visited twice";
                for (int t : {tmin, (tmin + tmax) / 2, tmax}) {
                  for (int q = 0; q <= t; ++q) {
                    int seen = 0;
                    for (int view = 0; view < views; ++view) {
                      if (!f.at(view, t, q)) continue;
                      ++seen;
                      ASSERT_EQ(visits[static_cast<std::size_t>(views * (q / kTile) + view)], 1)
                          << "row " << t << " position " << q << " view " << view;
                    }
                    ASSERT_LE(seen, 1) << "row " << t << " position " << q << " in two views";
                  }
                }
              }
            }
          }
        }
      }
    }
  }
}

// The flash prefill's segments over a mixed cache (KvFlashSegments, the masks of
// cuda/flash/flash_wgmma_cache.cu): for every block of a chunk's rows (128 and 192 rows:
// head_dim 128 / 64), each row at t meets every position s <= t exactly once over all
// tiles, in the segment of the forms the cache held at t (sink and recent: K and V FP16;
// body: both quantized; open: K FP16 in a key block not yet complete, V quantized), and
// no later position; every position a tile reads (below its segment's end) is where that
// form is held at the chunk's end: the sink below `sink`, the body's K in a block complete
// by the chunk's last row, its V in [body_base, pos0 + rows - 1 - window] (quantized by
// the chunk's appends), K of an open tile in the chunk, the ring's snapshot or the staging
// ring's (the block open at pos0 - 1), the recent positions at or past the sink and inside
// the ring's snapshot (s > pos0 - window) or the chunk (s <= the block's last row); `whole`
// (no mask) only where each of a warp's 16 rows sees the whole tile. Window, selective,
// int8, int4, per token and in key blocks of 16, 32 and 48; small and engine-like sink /
// window; tiles of 128 and 16 keys; chunks at 0, inside the sink + window, across it and far.
TEST(DecodeCacheLayout, FlashSegmentsCoverEachRowsPositionsOnce) {
  using Segments = core::KvFlashSegments;
  struct Chunk {
    int pos0, rows;
  };
  for (const Case& c : kCases) {
    if (c.policy == KvPolicy::full) continue;  // flash_attention_over_cache: every slot FP16
    for (auto [sink, window] : {std::pair<int, int>{16, 32}, {5, 37}, {0, 1}, {3, 5}, {0, 200}}) {
      const core::KvLayerShape s = kv_shape(c.policy, 2, 64, sink, window, c.bits == 0 ? 8 : c.bits, 4000);
      const core::KvRowForms f(s);
      const bool body = s.body != core::KvBody::none;
      for (const int key_block : {0, 16, 32, 48}) {
        if (key_block > 0 && !body) continue;
        const auto base = static_cast<int>(s.body_base), w = static_cast<int>(s.window);
        // Whether the row at t holds q's K quantized: q's block complete (its last body
        // position left the window) with key blocks, else q in the body.
        auto k_quantized = [&](int t, int q) {
          if (!f.body_at(t, q)) return false;
          return key_block == 0 || base + ((q - base) / key_block + 1) * key_block - 1 <= t - w;
        };
        for (Chunk ch : {Chunk{0, 1}, Chunk{0, 17}, Chunk{1, 300}, Chunk{20, 128}, Chunk{40, 128}, Chunk{47, 3},
                         Chunk{130, 300}, Chunk{1000, 17}}) {
          const int last_row = ch.pos0 + ch.rows - 1;
          for (int block_rows : {128, 192}) {
            for (int tile : {128, 16}) {
              for (int r0 = 0; r0 < ch.rows; r0 += block_rows) {
                const int tmin = ch.pos0 + r0, tmax = ch.pos0 + std::min(r0 + block_rows, ch.rows) - 1;
                SCOPED_TRACE(testing::Message() << "policy " << static_cast<int>(c.policy) << " sink " << sink
                                                << " window " << window << " key block " << key_block << " chunk "
                                                << ch.pos0 << "+" << ch.rows << " rows " << tmin << ".." << tmax
                                                << " tile " << tile);
                const Segments k(static_cast<int>(s.sink), w, base, body, tmin, tmax, tile, key_block);
                ASSERT_GE(k.tiles, 1);
                const int n = tmax + 1;
                std::vector<int> seen(static_cast<std::size_t>(4 * n));  // [segment][position]
                for (int t = tmin; t <= tmax; ++t) {
                  std::fill(seen.begin(), seen.end(), 0);
                  for (int i = 0; i < k.tiles; ++i) {
                    const Segments::Tile kt = k.at(i);
                    for (int q = kt.first; q < kt.first + tile && q < kt.end; ++q) {
                      if (t == tmin) {  // where the tile reads q from holds it in this form
                        if (kt.segment == Segments::sink_segment) {
                          ASSERT_LT(q, s.sink) << "sink tile " << i << " position " << q;
                        } else if (kt.segment == Segments::body_segment) {
                          ASSERT_TRUE(k_quantized(last_row, q)) << "body tile " << i << " position " << q;
                        } else if (kt.segment == Segments::open_segment) {
                          ASSERT_TRUE(key_block > 0 && f.body_at(last_row, q) &&
                                      (q >= ch.pos0 || q > ch.pos0 - 1 - w || !k_quantized(ch.pos0 - 1, q)))
                              << "open tile " << i << " position " << q;
                        } else {
                          ASSERT_TRUE(q >= s.sink && q > ch.pos0 - w && q <= tmax && w > 0)
                              << "recent tile " << i << " position " << q;
                        }
                      }
                      if (!k.visible(kt.segment, t, q)) continue;
                      ASSERT_LE(q, t) << "a later position, tile " << i;
                      ++seen[static_cast<std::size_t>(kt.segment * n + q)];
                    }
                  }
                  for (int q = 0; q <= t; ++q) {
                    const int f16_segment = q < s.sink ? Segments::sink_segment : Segments::recent_segment;
                    const int expected = f.f16_at(t, q)       ? f16_segment
                                         : k_quantized(t, q) ? Segments::body_segment
                                         : f.body_at(t, q)   ? Segments::open_segment
                                                             : -1;
                    for (int segment = 0; segment < 4; ++segment) {
                      ASSERT_EQ(seen[static_cast<std::size_t>(segment * n + q)], segment == expected ? 1 : 0)
                          << "row " << t << " s " << q << " segment " << segment;
                    }
                  }
                }
                for (int t_lo = tmin; t_lo <= tmax; t_lo += 16) {  // a warp's 16 rows
                  for (int i = 0; i < k.tiles; ++i) {
                    const Segments::Tile kt = k.at(i);
                    if (!k.whole(kt, t_lo, t_lo + 15)) continue;
                    for (int t = t_lo; t <= t_lo + 15; ++t) {
                      for (int q = kt.first; q < kt.first + tile; ++q) {
                        ASSERT_TRUE(q < kt.end && k.visible(kt.segment, t, q)) << "whole tile " << i << " row " << t;
                      }
                    }
                  }
                }
              }
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace lowbit::test

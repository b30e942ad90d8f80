// The paged KV cache's layout and allocator (core/kv_pages.h): page sizes hold exactly
// the contiguous cache's bytes a token, a position's page and row cover every position
// once, pools are sized from a budget (INT4 selective holds ~3.4x FP16's tokens), the
// allocator hands out each page at most once, returns them all, and refuses clearly.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <vector>

#include "common/expect_error.h"
#include "core/kv_pages.h"

namespace lowbit::test {
namespace {

using core::KvPageAllocator;
using core::KvPageLayout;
using core::KvSeqDesc;

struct Case {
  KvPolicy policy;
  int bits;
};
const Case kCases[] = {{KvPolicy::full, 8},      {KvPolicy::window, 8}, {KvPolicy::selective, 8},
                       {KvPolicy::selective, 4}, {KvPolicy::int8, 8},   {KvPolicy::int4, 4}};

KvCacheSpec spec_of(const Case& c, std::int64_t heads, std::int64_t d, std::int64_t max_tokens) {
  KvCacheSpec s;
  s.policy = c.policy;
  s.kv_heads = heads;
  s.head_dim = d;
  s.sink = 5;  // not a multiple of the page: selective's first body page is partial
  s.window = 37;
  s.kv_bits = c.bits;
  s.max_tokens = max_tokens;
  return s;
}

TEST(KvPages, PagesHoldTheContiguousBytesOfTheirTokens) {
  for (const Case& c : kCases) {
    for (std::int64_t d : {64, 128}) {
      SCOPED_TRACE(std::string(kv_policy_name(c.policy)) + std::to_string(c.bits) + " D " + std::to_string(d));
      const std::int64_t tokens = 4000, heads = 3;
      const KvCacheSpec spec = spec_of(c, heads, d, tokens);
      const KvPageLayout l = core::kv_page_layout(spec, 2, std::size_t{1} << 26, 4, 32);
      const core::KvLayerShape s = l.shape;
      // A page of P tokens holds what P positions take in the contiguous cache.
      const std::int64_t per_token_body = 2 * heads * (s.code_bytes() + 2 * (s.has_mins() ? 2 : 1));
      if (l.paged_f16()) {
        EXPECT_EQ(l.page_bytes(), l.page_tokens * 2 * heads * d * 2);
      }
      if (l.paged_body()) {
        EXPECT_EQ(l.page_bytes(), l.page_tokens * per_token_body);
      }
      if (!l.has_pages()) {
        EXPECT_EQ(l.page_bytes(), 0);
      }
      // The fixed area is the contiguous cache's f16 buffers.
      EXPECT_EQ(static_cast<std::size_t>(l.fixed_bytes()), l.fixed_slots() ? 2 * s.f16_bytes() : 0u);
      // Offsets: 16-byte aligned parts that tile the page.
      if (l.paged_body()) {
        for (bool v : {false, true}) {
          EXPECT_EQ(l.codes_offset(v) % 16, 0);
          EXPECT_EQ(l.scales_offset(v) % 16, 0);
          if (s.has_mins()) {
            EXPECT_EQ(l.mins_offset(v) % 16, 0);
          }
        }
        EXPECT_EQ((s.has_mins() ? l.mins_offset(true) : l.scales_offset(true)) + l.param_part_bytes(),
                  l.page_bytes());
      }
      // Every position that lives in a page has a distinct (logical page, row), and the
      // pages of a length cover its paged positions.
      std::set<std::pair<std::int64_t, std::int64_t>> seen;
      for (std::int64_t length = 1; length <= tokens; ++length) {
        const std::int64_t pos = length - 1;
        // The paged position this length adds: full/int8/int4 the new one, selective the
        // one leaving the window.
        std::int64_t paged = -1;
        if (l.paged_f16() || (l.paged_body() && s.window == 0)) paged = pos;
        if (l.paged_body() && s.window > 0 && pos - s.window >= s.sink) paged = pos - s.window;
        if (paged >= 0) {
          const std::int64_t page = l.logical_page(paged);
          EXPECT_TRUE(seen.insert({page, paged % l.page_tokens}).second) << "position " << paged;
          ASSERT_LT(page, l.pages_for(length)) << "length " << length;
          ASSERT_GE(page, 0);
        } else {
          EXPECT_EQ(l.pages_for(length), l.pages_for(length - 1));
        }
      }
      EXPECT_LE(l.pages_for(tokens), l.table_stride);
      EXPECT_EQ(l.pages_for(tokens), l.table_stride == 1 && !l.has_pages() ? 0 : l.table_stride);
      // Layers and areas of a pool do not overlap and fill it.
      std::vector<std::uint8_t> pool(l.pool_bytes());
      const core::KvPagedLayer last = core::kv_paged_layer(l, pool.data(), l.layers - 1);
      if (l.has_pages()) {
        EXPECT_EQ(last.pages + l.pages * l.page_bytes(), pool.data() + l.pages_bytes());
      }
      if (l.fixed_slots()) {
        EXPECT_EQ(reinterpret_cast<std::uint8_t*>(last.fixed) + l.max_seqs * l.fixed_bytes(),
                  pool.data() + pool.size());
      }
      // A slot's fixed area as the contiguous FP16 buffers: K, then V, inside its area.
      const core::KvLayerBuffers area = core::kv_fixed_area(l, last, l.max_seqs - 1);
      if (l.fixed_slots()) {
        const std::int64_t part = l.shape.kv_heads * l.fixed_slots() * l.shape.head_dim;
        EXPECT_EQ(area.k.f16, last.fixed + (l.max_seqs - 1) * (l.fixed_bytes() / 2));
        EXPECT_EQ(area.v.f16, area.k.f16 + part);
        EXPECT_EQ(reinterpret_cast<std::uint8_t*>(area.v.f16 + part), pool.data() + pool.size());
      } else {
        EXPECT_EQ(area.k.f16, nullptr);
      }
      EXPECT_LOWBIT_ERROR(core::kv_fixed_area(l, last, l.max_seqs), "slot");
    }
  }
}

// Key blocks on pages of B tokens: a body page holds its positions' codes, V's per-token
// parameters and K's per-channel parameters of the one block whose first position it
// holds; the fixed area gains K's staging ring after the FP16 slots.
TEST(KvPages, KeyBlockPagesHoldOneBlocksParameters) {
  const Case cases[] = {{KvPolicy::selective, 8}, {KvPolicy::selective, 4}, {KvPolicy::int8, 8}, {KvPolicy::int4, 4}};
  for (const Case& c : cases) {
    for (std::int64_t d : {64, 128}) {
      SCOPED_TRACE(std::string(kv_policy_name(c.policy)) + std::to_string(c.bits) + " D " + std::to_string(d));
      const std::int64_t tokens = 3000, heads = 3, b = 32;
      const KvCacheSpec spec = spec_of(c, heads, d, tokens);
      const KvPageLayout l = core::kv_page_layout(spec, 2, std::size_t{1} << 26, 4, b, b);
      const core::KvLayerShape s = l.shape;
      ASSERT_TRUE(s.key_blocks());
      const std::int64_t m = s.has_mins() ? 2 : 1;
      EXPECT_EQ(l.page_bytes(), 2 * b * heads * s.code_bytes() + b * heads * 2 * m + heads * d * 2 * m);
      for (bool v : {false, true}) {
        EXPECT_EQ(l.scales_offset(v) % 16, 0);
        if (s.has_mins()) {
          EXPECT_EQ(l.mins_offset(v) % 16, 0);
        }
      }
      EXPECT_EQ(l.scales_offset(false) + l.param_part_bytes(false), l.scales_offset(true));
      EXPECT_EQ((s.has_mins() ? l.mins_offset(true) : l.scales_offset(true)) + l.param_part_bytes(true),
                l.page_bytes());
      // Each block's first position in a page of its own, the blocks' pages in order.
      for (std::int64_t j = 0; l.key_block_page(j) < tokens; ++j) {
        EXPECT_EQ(l.logical_page(l.key_block_page(j)), l.logical_page(l.key_block_page(0)) + j) << "block " << j;
      }
      // The fixed area: the FP16 slots (selective), then the staging ring.
      const std::int64_t ring = heads * b * d * 2;
      EXPECT_EQ(l.fixed_bytes(), (l.fixed_slots() ? static_cast<std::int64_t>(2 * s.f16_bytes()) : 0) + ring);
      std::vector<std::uint8_t> pool(l.pool_bytes());
      const core::KvPagedLayer last = core::kv_paged_layer(l, pool.data(), l.layers - 1);
      ASSERT_NE(last.fixed, nullptr);
      EXPECT_EQ(reinterpret_cast<std::uint8_t*>(last.fixed) + l.max_seqs * l.fixed_bytes(), pool.data() + pool.size());
      const core::KvLayerBuffers area = core::kv_fixed_area(l, last, l.max_seqs - 1);
      EXPECT_EQ(reinterpret_cast<std::uint8_t*>(area.k.staged) + ring, pool.data() + pool.size());
      EXPECT_EQ(area.k.f16 != nullptr, l.fixed_slots() > 0);
    }
  }
  const KvCacheSpec spec = spec_of({KvPolicy::int4, 4}, 2, 64, 1000);
  EXPECT_LOWBIT_ERROR(core::kv_page_layout(spec, 1, std::size_t{1} << 24, 2, 16, 32), "page_tokens 16");
  EXPECT_LOWBIT_ERROR(core::kv_page_layout(spec, 1, std::size_t{1} << 24, 2, 48, 40), "key blocks of 40");
}

// The target: INT4 selective holds ~3.4x the tokens of FP16 in one budget
// (Llama-3-8B's KV shape, 40 GB, 64 sequences: sink 16 + window 32 FP16 each).
TEST(KvPages, SelectiveInt4HoldsOverThreeTimesFp16TokensInABudget) {
  const std::size_t budget = std::size_t{40} << 30;
  auto tokens = [&](const Case& c) {
    KvCacheSpec s = spec_of(c, 8, 128, 131072);
    s.sink = 16;
    s.window = 32;
    return core::kv_page_layout(s, 32, budget, 64).pool_tokens();
  };
  const double full = static_cast<double>(tokens({KvPolicy::full, 8}));
  const double sel4 = static_cast<double>(tokens({KvPolicy::selective, 4}));
  const double sel8 = static_cast<double>(tokens({KvPolicy::selective, 8}));
  EXPECT_NEAR(full, 40.0 * (1 << 30) / (32 * 2 * 8 * 128 * 2), 16);  // 327,680 tokens
  EXPECT_GT(sel4 / full, 3.4);
  EXPECT_LT(sel4 / full, 3.8);  // (D + 8) bytes a token and head against 4 D
  EXPECT_GT(sel8 / full, 1.85);
}

// The serving issue's admission target: in a 40 GB budget at Llama-3-8B's KV shape,
// selective INT4 (sink 16, window 32) admits >= 3x the concurrent 4096-token sequences
// of full. Admitted = sequences the allocator opens and grows to 4096 tokens until it
// refuses, with the slot count that admits the most (each slot's fixed area is budgeted).
TEST(KvPages, SelectiveInt4AdmitsOverThreeTimesTheSequencesOfFp16) {
  const std::size_t budget = std::size_t{40} * 1000 * 1000 * 1000;
  auto admitted = [&](const Case& c, std::int64_t max_seqs) {
    KvCacheSpec s = spec_of(c, 8, 128, 8192);
    s.sink = 16;
    s.window = 32;
    KvPageAllocator a(core::kv_page_layout(s, 32, budget, max_seqs));
    std::int64_t n = 0;
    while (a.open_sequences() < max_seqs) {
      const std::int32_t slot = a.open();
      if (a.pages_needed(slot, 4096) > a.free_pages()) break;
      a.grow(slot, 4096);
      ++n;
    }
    return n;
  };
  auto best = [&](const Case& c) {
    std::int64_t most = 0;
    for (std::int64_t seqs = 16; seqs <= 1024; seqs += 16) most = std::max(most, admitted(c, seqs));
    return most;
  };
  const std::int64_t full = best({KvPolicy::full, 8}), sel8 = best({KvPolicy::selective, 8}),
                     sel4 = best({KvPolicy::selective, 4});
  std::printf("40 GB admits 4096-token sequences: full %lld, selective8 %lld, selective4 %lld\n",
              static_cast<long long>(full), static_cast<long long>(sel8), static_cast<long long>(sel4));
  EXPECT_EQ(full, 74);  // 40e9 / (4096 x 32 layers x 2 x 8 x 128 x 2 bytes) = 74.5
  EXPECT_GE(sel4, 3 * full);
  EXPECT_GE(sel8, 18 * full / 10);
}

TEST(KvPages, BadLayoutsAreRefused) {
  const KvCacheSpec spec = spec_of({KvPolicy::selective, 4}, 8, 128, 4096);
  EXPECT_LOWBIT_ERROR(core::kv_page_layout(spec, 32, std::size_t{1} << 30, 4, 24), "page_tokens = 24");
  EXPECT_LOWBIT_ERROR(core::kv_page_layout(spec, 0, std::size_t{1} << 30, 4), "layers = 0");
  EXPECT_LOWBIT_ERROR(core::kv_page_layout(spec, 32, std::size_t{1} << 30, 0), "max_seqs = 0");
  EXPECT_LOWBIT_ERROR(core::kv_page_layout(spec, 32, 1000, 4), "does not hold the 4 sequences' FP16 sink");
  KvCacheSpec full = spec;
  full.policy = KvPolicy::full;
  EXPECT_LOWBIT_ERROR(core::kv_page_layout(full, 32, 1000, 4), "less than one page");
  KvCacheSpec wide = full;  // 1024 heads x 4096 tokens x 128 x 2 bytes, K and V: 2^31 bytes a page
  wide.kv_heads = 1024;
  EXPECT_LOWBIT_ERROR(core::kv_page_layout(wide, 1, std::size_t{1} << 32, 1, 4096), "past the kernels' 32-bit offsets");
  EXPECT_NO_THROW(core::kv_page_layout(wide, 1, std::size_t{1} << 32, 1, 2048));
  KvCacheSpec bad = spec;
  bad.head_dim = 96;
  EXPECT_LOWBIT_ERROR(core::kv_page_layout(bad, 32, std::size_t{1} << 30, 4), "head_dim = 96");
}

KvPageLayout small_layout(const Case& c, std::int64_t pages_wanted) {
  KvCacheSpec s = spec_of(c, 2, 64, 1000);
  KvPageLayout probe = core::kv_page_layout(s, 3, std::size_t{1} << 30, 4);
  const std::size_t budget = probe.fixed_bytes_total() +
                             static_cast<std::size_t>(pages_wanted * probe.layers * probe.page_bytes());
  return core::kv_page_layout(s, 3, budget, 4);
}

TEST(KvPages, AllocatorHandsOutEachPageOnceAndTakesThemBack) {
  std::mt19937 rng(17);
  for (const Case& c : kCases) {
    if (c.policy == KvPolicy::window) continue;  // no pages
    SCOPED_TRACE(std::string(kv_policy_name(c.policy)) + std::to_string(c.bits));
    const KvPageLayout l = small_layout(c, 100);
    ASSERT_EQ(l.pages, 100);
    for (std::uint64_t seed : {0ull, 5ull}) {
      KvPageAllocator a(l, seed);
      std::vector<std::int32_t> open;
      for (int step = 0; step < 2000; ++step) {
        const int op = static_cast<int>(rng() % 4);
        if (op == 0 && a.open_sequences() < l.max_seqs) {
          open.push_back(a.open());
        } else if (op == 1 && !open.empty()) {
          const std::size_t i = rng() % open.size();
          a.close(open[i]);
          open.erase(open.begin() + static_cast<std::ptrdiff_t>(i));
        } else if (!open.empty()) {
          const std::int32_t slot = open[rng() % open.size()];
          const std::int64_t length = std::min<std::int64_t>(l.max_tokens, a.length(slot) + 1 + rng() % 40);
          if (a.pages_needed(slot, length) <= a.free_pages()) {
            a.grow(slot, length);
            EXPECT_EQ(a.length(slot), length);
          } else {
            const std::int64_t before = a.free_pages();
            EXPECT_LOWBIT_ERROR(a.grow(slot, length), "more pages for length");
            EXPECT_EQ(a.free_pages(), before);  // nothing taken
          }
        }
        // Accounting: the held pages are distinct pool pages, and with the free ones make
        // up the pool.
        std::set<std::int32_t> held;
        std::int64_t count = 0;
        for (std::int32_t slot : open) {
          const std::int32_t* t = a.table(slot);
          ASSERT_EQ(a.pages_held(slot), l.pages_for(a.length(slot)));
          for (std::int64_t i = 0; i < l.table_stride; ++i) {
            if (i < a.pages_held(slot)) {
              ASSERT_TRUE(t[i] >= 0 && t[i] < l.pages);
              held.insert(t[i]);
              ++count;
            } else {
              ASSERT_EQ(t[i], -1);
            }
          }
        }
        ASSERT_EQ(static_cast<std::int64_t>(held.size()), count) << "a page held twice";
        ASSERT_EQ(count, a.used_pages());
      }
      for (std::int32_t slot : open) a.close(slot);
      EXPECT_EQ(a.free_pages(), l.pages);
      EXPECT_EQ(a.open_sequences(), 0);
    }
  }
}

TEST(KvPages, AllocatorRefusesClearly) {
  const KvPageLayout l = small_layout({KvPolicy::int4, 4}, 10);
  KvPageAllocator a(l);
  EXPECT_LOWBIT_ERROR(a.grow(0, 5), "grow of slot 0, which is not open");
  std::vector<std::int32_t> slots;
  for (int i = 0; i < 4; ++i) slots.push_back(a.open());
  EXPECT_LOWBIT_ERROR(a.open(), "all 4 sequence slots are open");
  EXPECT_LOWBIT_ERROR(a.grow(slots[0], 1001), "length 1001 of slot");
  a.grow(slots[0], 160);  // all 10 pages
  EXPECT_EQ(a.free_pages(), 0);
  EXPECT_LOWBIT_ERROR(a.grow(slots[1], 1), "needs 1 more pages for length 1, the pool has 0 free of 10");
  a.close(slots[0]);
  EXPECT_LOWBIT_ERROR(a.close(slots[0]), "close of slot");
  a.grow(slots[1], 1);
  EXPECT_EQ(a.used_pages(), 1);
}

TEST(KvPages, BatchCheckNamesTheBadRow) {
  const KvPageLayout l = small_layout({KvPolicy::selective, 8}, 40);
  KvPageAllocator a(l, 9);
  const std::int32_t s0 = a.open(), s1 = a.open();
  a.grow(s0, 300);
  a.grow(s1, 20);
  std::vector<KvSeqDesc> d = {{299, s0}, {-1, -1}, {19, s1}};
  core::check_paged_batch(l, d.data(), 3, a.tables().data(), 300);
  EXPECT_LOWBIT_ERROR(core::check_paged_batch(l, d.data(), 3, a.tables().data(), 299),
                      "row 0 at position 299 needs length 300 > max_length 299");
  d[2].slot = 4;
  EXPECT_LOWBIT_ERROR(core::check_paged_batch(l, d.data(), 3, a.tables().data(), 300), "row 2 has slot 4");
  d[2].slot = s0;
  EXPECT_LOWBIT_ERROR(core::check_paged_batch(l, d.data(), 3, a.tables().data(), 300), "row 2 repeats slot");
  d[2] = {100, s1};  // s1 holds pages for 20 positions only
  EXPECT_LOWBIT_ERROR(core::check_paged_batch(l, d.data(), 3, a.tables().data(), 300), "row 2 (slot 1) page 0 is -1");
  EXPECT_LOWBIT_ERROR(core::check_paged_batch(l, d.data(), 3, a.tables().data(), 1001), "max_length 1001");
}

}  // namespace
}  // namespace lowbit::test

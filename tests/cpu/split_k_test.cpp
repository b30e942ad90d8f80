// The split-K choice of the wgmma weight-only GEMM (core/split_k.h), against the order
// the H200 measured at 28672 x 8192 (bench/results/weight-only-wgmma-h200.md, cd739bf)
// and the rule's own limits; and the GEMVs' k-slices and cluster parts at M = 9..16
// (core/gemv_split.h) against the H200 sweep of session 27 (bench/notes/weight_only.md).
#include <gtest/gtest.h>

#include <algorithm>

#include "core/gemv_split.h"
#include "core/split_k.h"

namespace {

using lowbit::core::pick_k_splits;
using lowbit::core::split_k_cost;
using lowbit::core::split_k_slots;
using lowbit::core::SplitKProblem;

// 28672 x 8192 on 132 multiprocessors, one 256 x 128 block each: 112 blocks along N,
// 64 steps of 128 along K, M / 128 blocks along M.
SplitKProblem h200_ffn(std::int64_t m) {
  SplitKProblem p;
  p.tiles = 112 * ((m + 127) / 128);
  p.slots = 132;
  p.k_steps = 64;
  return p;
}

TEST(SplitK, FollowsTheMeasuredOrderAtTheFfnShape) {
  EXPECT_EQ(pick_k_splits(h200_ffn(512)), 2);   // measured 0.629 ms at 2 against 0.650 at 1
  EXPECT_EQ(pick_k_splits(h200_ffn(2048)), 1);  // 2.10 ms at 1; 2.51, 3.08 at 2, 4
  EXPECT_EQ(pick_k_splits(h200_ffn(8192)), 1);  // 9.25 ms at 1; 9.80, 11.9 at 2, 4
}

TEST(SplitK, ModelledCostIsWavesTimesFixedPlusSteps) {
  const SplitKProblem p = h200_ffn(2048);                 // 1792 tiles
  EXPECT_DOUBLE_EQ(split_k_cost(p, 1), 14 * (8.0 + 64));  // 14 waves of 132
  EXPECT_DOUBLE_EQ(split_k_cost(p, 2), 28 * (8.0 + 32));
  EXPECT_DOUBLE_EQ(split_k_cost(p, 8), 435 * (8.0 + 8));  // 14336 blocks, 33 resident in clusters of 8
}

// The sweep of every split at 4096 x 4096 and 4096 x 14336 (weight-only-wgmma-h200.md,
// edc621e), Q4_1, median ms at split 1 / 2 / 4 / 8.
TEST(SplitK, FollowsTheMeasuredOrderOfSmallGrids) {
  SplitKProblem p;
  p.slots = 132;  // 256 x 128 blocks (M > 64), one a multiprocessor
  p.tiles = 16;   // M = 128, N = 4096
  p.k_steps = 32;
  EXPECT_EQ(pick_k_splits(p), 4);  // 0.080 / 0.048 / 0.033 / 0.055
  p.k_steps = 112;
  EXPECT_EQ(pick_k_splits(p), 4);  // K = 14336: 0.253 / 0.129 / 0.073 / 0.096
  p.tiles = 32;                    // M = 256
  p.k_steps = 32;
  EXPECT_EQ(pick_k_splits(p), 2);  // 0.077 / 0.048 / 0.063 / 0.081
  p.slots = 264;                   // 128 x 64 blocks (M 33 .. 64), two a multiprocessor
  EXPECT_EQ(pick_k_splits(p), 4);  // M = 64: 0.033 / 0.021 / 0.021 / 0.025
}

TEST(SplitK, ClustersOfFourAndEightKeepAShareOfTheSlots) {
  SplitKProblem p;
  p.slots = 132;
  EXPECT_EQ(split_k_slots(p, 1), 132);
  EXPECT_EQ(split_k_slots(p, 2), 132);
  EXPECT_EQ(split_k_slots(p, 4), 66);
  EXPECT_EQ(split_k_slots(p, 8), 33);
  p.slots = 10;
  EXPECT_EQ(split_k_slots(p, 8), 8);  // never less than one cluster
}

// Three blocks a multiprocessor (32 activation rows): clusters of 8 keep three quarters of
// the slots (the wgmma kernel's choice there), measured on the H200 (78462fd, Q4_1, us at
// split 1 / 2 / 4 / 8).
TEST(SplitK, ClustersOfEightAtThreeBlocksAMultiprocessor) {
  SplitKProblem p;
  p.slots = 396;
  p.cluster_share[3] = 0.75;
  p.tiles = 32;
  p.k_steps = 112;
  EXPECT_EQ(pick_k_splits(p), 8);  // 32 x 4096 x 14336: 67.1 / 37.3 / 35.2 / 29.2
  p.k_steps = 32;
  EXPECT_EQ(pick_k_splits(p), 8);  // 32 x 4096 x 4096: 22.6 / 15.0 / 15.3 / 15.1
  p.tiles = 112;
  EXPECT_EQ(pick_k_splits(p), 2);  // 32 x 14336 x 4096: 23.6 / 23.3 / 26.1 / 34.9
  p.tiles = 224;
  p.k_steps = 64;
  EXPECT_EQ(pick_k_splits(p), 1);  // 32 x 28672 x 8192: 70.8 / 72.2 / 75.1 / 84.1
}

TEST(SplitK, SplitsAGridThatLeavesTheGpuIdle) {
  SplitKProblem p;  // 4096 x 4096 at M = 256: 32 tiles on 132 slots, 32 steps
  p.tiles = 32;
  p.slots = 132;
  p.k_steps = 32;
  EXPECT_EQ(pick_k_splits(p), 2);  // 1 wave of 16 steps; 4 would take 2 waves of its 66 slots
}

TEST(SplitK, KeepsTheStepFloorAndTheCluster) {
  SplitKProblem p;
  p.tiles = 1;
  p.slots = 132;
  p.k_steps = 12;  // 8 splits would leave 1.5 steps each: at most 2 (6 steps each)
  EXPECT_EQ(pick_k_splits(p), 2);
  p.k_steps = 1 << 20;
  EXPECT_EQ(pick_k_splits(p), 8);  // the cluster's largest
  p.max_splits = 4;
  EXPECT_EQ(pick_k_splits(p), 4);
}

TEST(SplitK, TiesAndEmptyGridsTakeOne) {
  SplitKProblem p;
  p.tiles = 132;  // exactly one wave: a split only adds fixed cost
  p.slots = 132;
  p.k_steps = 64;
  EXPECT_EQ(pick_k_splits(p), 1);
  p.fixed_steps = 0.0;  // no fixed cost: 2 waves of half the steps tie with 1; fewest wins
  EXPECT_EQ(pick_k_splits(p), 1);
  p.tiles = 0;
  EXPECT_EQ(pick_k_splits(p), 1);
}

// The staged-activation GEMV at M = 16 on the H200: 4 tiles a warp, 8 warps, two blocks
// a multiprocessor at 1 or 2 k-slices and one at 4 or 8 (80 KB of weight rings and 16 KB
// of activation ring a slice).
lowbit::core::GemvGrid h200_gemv(std::int64_t n, std::int64_t k) {
  lowbit::core::GemvGrid g;
  g.n_tiles = n / 8;
  g.k_steps = k / 128;
  g.tiles_per_warp = 4;
  g.warps = 8;
  g.multiprocessors = 132;
  return g;
}
constexpr std::array<int, 4> kH200PerSm{2, 2, 1, 1};

void expect_split(const lowbit::core::GemvSplit& got, int k_slices, int parts) {
  EXPECT_EQ(got.k_slices, k_slices);
  EXPECT_EQ(got.parts, parts);
}

TEST(GemvSplit, FollowsTheMeasuredChoicesAtThe8BShapes) {
  using lowbit::core::pick_gemv_split;
  // O: 4 slices x 2 parts, 128 blocks, 0.0087 ms (8 x 1: 0.0115; 2 x 4: 0.0107).
  expect_split(pick_gemv_split(h200_gemv(4096, 4096), kH200PerSm, 0, 0), 4, 2);
  // down: 4 x 2, 0.0203 ms (2 x 4: 0.0273; the chunked GEMV 0.0260).
  expect_split(pick_gemv_split(h200_gemv(4096, 14336), kH200PerSm, 0, 0), 4, 2);
  // QKV: 2 x 4 (4 steps a warp), which ran the batch 4% faster than 2 x 2.
  expect_split(pick_gemv_split(h200_gemv(6144, 4096), kH200PerSm, 0, 0), 2, 4);
  // gate|up: 224 blocks fill 85% of the slots without parts (0.0294 ms).
  expect_split(pick_gemv_split(h200_gemv(28672, 4096), kH200PerSm, 0, 0), 2, 1);
  expect_split(pick_gemv_split(h200_gemv(28672, 8192), kH200PerSm, 0, 0), 2, 1);
  // 70B down: 28 steps a warp at 4 parts (0.077 ms), so 2 x 2 (0.0553).
  expect_split(pick_gemv_split(h200_gemv(8192, 28672), kH200PerSm, 0, 0), 2, 2);
}

// The GEMV rule between 4 and 16 tiles an SM at M <= 4 (gemv.cu): the chunked launch (2
// tiles a warp, 3 blocks an SM) where its grid fills the slots at least as well as the wide
// one (4 tiles a warp, 2 blocks an SM), as the H200 measured (M = 1, ms, chunked / wide).
TEST(GemvSplit, FilledSlotsOrderTheChunkedAndTheWideLaunch) {
  auto filled = [](std::int64_t n, std::int64_t k, int tiles_per_warp, int per_sm) {
    lowbit::core::GemvGrid g = h200_gemv(n, k);
    g.tiles_per_warp = tiles_per_warp;
    return lowbit::core::filled_slots(g, [&](int) { return per_sm; });
  };
  auto chunked_first = [&](std::int64_t n, std::int64_t k) { return filled(n, k, 2, 3) >= filled(n, k, 4, 2); };
  EXPECT_TRUE(chunked_first(6144, 4096));    // 8B QKV 0.0084 / 0.0094
  EXPECT_TRUE(chunked_first(10240, 8192));   // 70B QKV 0.0224 / 0.0243
  EXPECT_TRUE(chunked_first(5120, 13824));   // Qwen2.5-14B down 0.0195 / 0.0210
  EXPECT_FALSE(chunked_first(8192, 8192));   // 70B O 0.0207 / 0.0158
  EXPECT_FALSE(chunked_first(8192, 28672));  // 70B down 0.0632 / 0.0429
  EXPECT_FALSE(chunked_first(7168, 5120));   // Qwen2.5-14B QKV 0.0131 / 0.0112
  EXPECT_DOUBLE_EQ(filled(6144, 4096, 2, 3), 384.0 / 396.0);  // 8 slices: 384 blocks in 396 slots
}

TEST(GemvSplit, TakesAVariantsCounts) {
  using lowbit::core::pick_gemv_split;
  const lowbit::core::GemvGrid g = h200_gemv(4096, 4096);
  expect_split(pick_gemv_split(g, kH200PerSm, 0, 1), 2, 1);  // no parts: the slice rule alone
  expect_split(pick_gemv_split(g, kH200PerSm, 0, 8), 2, 8);  // 8 parts: the slices that fill best
  expect_split(pick_gemv_split(g, kH200PerSm, 8, 2), 8, 2);
  // A forced slice count whose ring does not fit is lowered to one that does.
  expect_split(pick_gemv_split(g, {2, 2, 0, 0}, 8, 1), 2, 1);
}

TEST(GemvSplit, ShortKNeverSplitsBelowTwoStepsAWarp) {
  using lowbit::core::pick_gemv_split;
  lowbit::core::GemvGrid g = h200_gemv(4096, 512);  // 4 steps
  const lowbit::core::GemvSplit s = pick_gemv_split(g, kH200PerSm, 0, 0);
  EXPECT_LE(2 * s.k_slices * s.parts, 4);
  g.k_steps = 1;
  expect_split(pick_gemv_split(g, kH200PerSm, 0, 0), 1, 1);
}

// Stream-K against the tiled grid at two m64 blocks a warpgroup (256 x 128 blocks, one an
// SM on 132): core::stream_k_beats_tiled against the H200's rows of session 49
// (bench/results/weight-only-stream-k-128-h200.md, Q4_1, us tiled -> stream-K: the
// GEMMs alone, against main's binary or timed in turns with the tiled grid; the batch
// prefill for 512 x 28672 x 4096).
bool stream_k_chosen(std::int64_t tiles, std::int64_t k_steps) {
  SplitKProblem p;
  p.tiles = tiles;
  p.slots = 132;
  p.k_steps = k_steps;
  return lowbit::core::stream_k_beats_tiled(p, pick_k_splits(p), std::min<std::int64_t>(132, tiles * k_steps / 4));
}

TEST(SplitK, StreamKWhereTheTiledGridLeftSmsIdleAndItWasFaster) {
  EXPECT_TRUE(stream_k_chosen(16, 112));  // 128 x 4096 x 14336 (split 4: 64 blocks): 51.9 -> 45.4
  EXPECT_TRUE(stream_k_chosen(32, 112));  // 256 rows (split 2: 64 blocks): 88.7 -> 63.1
  EXPECT_TRUE(stream_k_chosen(24, 32));   // 128 x 6144 x 4096 (split 2: 48 blocks): 33.1 -> 30.0
}

TEST(SplitK, TiledWhereStreamKWasNotFasterOrTheWavesWereFull) {
  EXPECT_FALSE(stream_k_chosen(16, 32));    // 128 x 4096 x 4096: 24.2 -> 28.2 (4 steps a block)
  EXPECT_FALSE(stream_k_chosen(56, 32));    // 128 x 14336 x 4096: 34.1 -> 39.9
  EXPECT_FALSE(stream_k_chosen(112, 32));   // 256 rows: 53.2 -> 60.0
  EXPECT_FALSE(stream_k_chosen(64, 112));   // 512 x 4096 x 14336: 97.5 -> 107.0
  EXPECT_FALSE(stream_k_chosen(112, 64));   // 128 x 28672 x 8192: 109.6 -> 108.1
  EXPECT_FALSE(stream_k_chosen(1792, 64));  // 2048 rows: 1,508 -> 1,563
  // Full waves at the power limit: 5-9% faster alone in turns, but the batch prefill with
  // 512 x 28672 x 4096 on stream-K ran 2.6% slower.
  EXPECT_FALSE(stream_k_chosen(448, 32));  // 512 x 28672 x 4096
  EXPECT_FALSE(stream_k_chosen(224, 64));  // 256 x 28672 x 8192
  EXPECT_FALSE(stream_k_chosen(448, 64));  // 512 x 28672 x 8192
}

TEST(SplitK, StreamKCostIsStepsAnSmPlusFixedPlusSegments) {
  SplitKProblem p;
  p.tiles = 224;
  p.k_steps = 64;
  // 14336 units on 132 blocks: 108.6 steps each, 2.7 tile parts each.
  EXPECT_NEAR(lowbit::core::stream_k_cost(p, 132), 14336.0 / 132 + 8.0 + 7.0 * (1.0 + 14336.0 / 132 / 64), 1e-9);
  EXPECT_DOUBLE_EQ(lowbit::core::stream_k_cost(p, 0), 0.0);
}

}  // namespace

// The split-K choice of the wgmma weight-only GEMM (core/split_k.h), against the order
// the H200 measured at 28672 x 8192 (bench/results/weight-only-wgmma-h200.md, cd739bf)
// and the rule's own limits.
#include <gtest/gtest.h>

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

}  // namespace

#pragma once
// How many ways to split K over a cluster for a tiled GEMM grid, from a wave model:
// a block's time is a fixed cost (pipeline fill, epilogue, the cluster's reduction) plus
// its K steps, and the grid runs in waves of the resident blocks: `slots`, times the
// share a grid of clusters of that size keeps busy. Fewest splits on a tie: each split
// adds a reduction and an output tile's worth of traffic.
//
// The shares: the H200 sweep of every split at M 64 .. 512 (bench gemm --section
// weight_only_wgmma, edc621e; bench/notes/weight_only.md) ran a grid of clusters of 4 as
// if half the slots were there and one of 8 as if a quarter or less were, at one and two
// blocks a multiprocessor (a cluster is placed whole inside one GPC, and its reduction
// waits for its slowest block): 128 x 4096 x 4096 at split 8, 128 blocks, 0.055 ms; at 4,
// 64 blocks, 0.033. With them the model picks the sweep's fastest split in 61 of its 64
// cases (within 8% in the rest), where the plain slot count picked it in 43 (up to 1.67x
// slower).
//
// Why not "the split whose grid best fills the slots": at 2048 x 28672 x 8192 on the
// H200 that rule took split 8 (99.6% of the last wave filled against 97% at split 1)
// and ran 4.45 ms where split 1 ran 2.10 (bench/notes/weight_only.md): a full grid
// gains nothing from finer waves and pays the fixed cost once a block.
#include <cstdint>

namespace lowbit::core {

struct SplitKProblem {
  std::int64_t tiles = 0;    // output blocks of the grid before splitting
  std::int64_t slots = 0;    // blocks resident at once (blocks a multiprocessor x multiprocessors)
  std::int64_t k_steps = 0;  // K steps of one block without a split
  int min_steps = 4;         // each split takes at least this many steps
  int max_splits = 8;        // powers of two up to this (a cluster's size)
  double fixed_steps = 8.0;  // a block's fixed cost, in K steps
  // The share of `slots` a grid of clusters of 1, 2, 4, 8 blocks keeps resident (above).
  double cluster_share[4] = {1.0, 1.0, 0.5, 0.25};
};

// The blocks of a grid of clusters of `splits` (a power of two up to 8) resident at once.
inline std::int64_t split_k_slots(const SplitKProblem& p, int splits) {
  const int index = splits >= 8 ? 3 : splits >= 4 ? 2 : splits >= 2 ? 1 : 0;
  const auto resident = static_cast<std::int64_t>(static_cast<double>(p.slots) * p.cluster_share[index]);
  return resident > splits ? resident : splits;  // at least one cluster
}

// The share of its waves' block slots a grid of `blocks` fills (1: every wave full): the
// fill rules of the GEMVs (core/gemv_split.h) and of the tiled mma.sync kernel.
inline double wave_fill(std::int64_t blocks, std::int64_t slots) {
  return static_cast<double>(blocks) / static_cast<double>((blocks + slots - 1) / slots * slots);
}

// The modelled time of `splits` in K steps of one block (waves x (fixed + steps a split)).
inline double split_k_cost(const SplitKProblem& p, int splits) {
  const std::int64_t blocks = p.tiles * splits, slots = split_k_slots(p, splits);
  const std::int64_t waves = (blocks + slots - 1) / slots;
  const double steps = static_cast<double>((p.k_steps + splits - 1) / splits);
  return static_cast<double>(waves) * (p.fixed_steps + steps);
}

// Stream-K's modelled time in the same units: `blocks` persistent blocks share the tiles x
// k_steps units evenly, and each pays the fixed cost once and `segment_steps` for each
// part of a tile it holds (a partial's store and flag, or an owner's wait and reads).
// The H200's rows at two m64 blocks a warpgroup (session 49: 28672 x 8192, 14336 x 4096,
// 4096 x 14336, 4096 x 4096 at 128-2048 rows, timed in turns with the tiled grid) fit 5-9
// steps a segment; 7 is the default.
inline double stream_k_cost(const SplitKProblem& p, std::int64_t blocks, double segment_steps = 7.0) {
  if (blocks <= 0 || p.k_steps <= 0) return 0.0;
  const double per_block = static_cast<double>(p.tiles * p.k_steps) / static_cast<double>(blocks);
  return per_block + p.fixed_steps + segment_steps * (1.0 + per_block / static_cast<double>(p.k_steps));
}

// Whether stream-K (`sk_blocks` persistent blocks) replaces the tiled grid split `splits`
// ways: where the tiled grid leaves 40% or more of its slots idle in its last wave and
// stream-K's modelled time is at least 5% under its own. Not where the waves are full or
// nearly (85% and up): there the H200 runs these GEMMs at its power limit, and stream-K's
// even share of the SMs bought nothing (a batch prefill with 512 x 28672 x 4096 on
// stream-K, 5% faster alone, ran 2.6% slower: every kernel of the pass 3-5% slower, the
// clocks; bench/notes/weight_only.md, session 49).
inline bool stream_k_beats_tiled(const SplitKProblem& p, int splits, std::int64_t sk_blocks) {
  return wave_fill(p.tiles * splits, p.slots) < 0.6 && stream_k_cost(p, sk_blocks) < 0.95 * split_k_cost(p, splits);
}

// The power-of-two split (1 .. max_splits, each with >= min_steps steps) of least cost.
inline int pick_k_splits(const SplitKProblem& p) {
  int best_splits = 1;
  if (p.tiles <= 0 || p.slots <= 0) return best_splits;
  double best = split_k_cost(p, 1);
  for (int s = 2; s <= p.max_splits && p.k_steps >= static_cast<std::int64_t>(p.min_steps) * s; s *= 2) {
    const double cost = split_k_cost(p, s);
    if (cost < best * (1.0 - 1e-9)) best = cost, best_splits = s;
  }
  return best_splits;
}

}  // namespace lowbit::core

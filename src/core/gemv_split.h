#pragma once
// How the weight-streaming GEMVs (cuda/weight_only/gemv.cu) split K: k-slices, warps of one
// block that each take a range of K and sum their partials in shared memory, and for the
// staged-activation kernel at M = 9..16 also parts, blocks of one cluster that each take
// a range of K and sum over distributed shared memory. Host code only, so that the rules'
// choices are tested without a GPU (tests/cpu/split_k_test.cpp).
#include <array>
#include <cstdint>

#include "core/split_k.h"

namespace lowbit::core {

struct GemvGrid {
  std::int64_t n_tiles = 0;  // tiles of 8 output rows
  std::int64_t k_steps = 0;  // steps of 128 along K
  int tiles_per_warp = 1;
  int warps = 8;             // a block's warps: columns x k-slices
  int multiprocessors = 1;
};

// Blocks of warps / k_slices columns of tiles_per_warp tiles each.
inline std::int64_t gemv_blocks(const GemvGrid& g, int k_slices) {
  const std::int64_t tiles = static_cast<std::int64_t>(g.warps / k_slices) * g.tiles_per_warp;
  return (g.n_tiles + tiles - 1) / tiles;
}

// The k-slice count whose grid fills the resident block slots (per_sm(k) blocks a
// multiprocessor at k slices, 0 if it does not fit) best, fewest slices on a tie: a
// whole grid resident at once beat 1.7 waves by 10% (28672 x 8192: 2 slices, 224 blocks,
// 86% of copy; 4 slices, 78%).
template <class PerSm>
int fill_k_slices(const GemvGrid& g, PerSm per_sm) {
  int k_slices = 1;
  double best = 0.0;
  for (int slices = 1; slices <= g.warps && (slices == 1 || slices <= g.k_steps); slices *= 2) {
    const std::int64_t slots = static_cast<std::int64_t>(per_sm(slices)) * g.multiprocessors;
    if (slots == 0) continue;
    const double filled = wave_fill(gemv_blocks(g, slices), slots);
    if (filled > best + 1e-9) best = filled, k_slices = slices;
  }
  return k_slices;
}

// How full the fill rule's grid leaves the resident block slots (wave_fill at its k-slices).
template <class PerSm>
double filled_slots(const GemvGrid& g, PerSm per_sm) {
  const int slices = fill_k_slices(g, per_sm);
  return wave_fill(gemv_blocks(g, slices), static_cast<std::int64_t>(per_sm(slices)) * g.multiprocessors);
}

struct GemvSplit {
  int k_slices = 1;
  int parts = 1;
};

// The staged-activation kernel's split. per_sm[i]: its blocks a multiprocessor at 1 << i
// k-slices (0: the activation ring does not fit); forced_slices / forced_parts: a
// variant's counts (0: the rule's).
//
// First the k-slice fill rule among the counts that keep the most blocks a multiprocessor
// (more slices grow the activation ring, and a fuller grid of 1-block SMs lost: 28672 x
// 8192, M = 16: 8 slices, 1 block a SM, 0.114 ms; 2 slices, 2 blocks, 0.059). Where that
// grid fills under 80% of the block slots (a narrow N), K is split over a cluster of 2
// blocks, or 4 where a warp keeps at most 8 steps: the fill rule over (k-slices, parts)
// within one wave, at least two steps a warp, the fewest k-slices on a tie. As measured
// (H200, M = 16, Q4_1, shape 9; bench/notes/weight_only.md): 4096 x 4096 4 slices x 2
// parts 0.0087 ms, 8 x 1 0.0115; 4 parts paid in the engine on the 8B QKV (6144 x 4096,
// 4 steps a warp: bench batch B = 16 +4%) but not on long ranges (8192 x 28672, 28 steps
// a warp: 2 x 4 0.077, 2 x 2 0.0553; split_k.h's cluster shares, clusters of 4 keeping
// about half the slots, would put that grid in two waves); clusters of 5 or 8 and a
// second wave were slower everywhere.
inline GemvSplit pick_gemv_split(const GemvGrid& g, const std::array<int, 4>& per_sm, int forced_slices,
                                 int forced_parts) {
  auto per_sm_of = [&](int slices) { return per_sm[slices == 1 ? 0 : slices == 2 ? 1 : slices == 4 ? 2 : 3]; };
  auto kept = [&](int slices) { return per_sm_of(slices) >= per_sm_of(1) ? per_sm_of(slices) : 0; };
  while (forced_slices > 1 && per_sm_of(forced_slices) == 0) forced_slices /= 2;  // lowered to one that fits
  GemvSplit out;
  out.k_slices = forced_slices > 0 ? forced_slices : fill_k_slices(g, kept);
  const double whole = wave_fill(gemv_blocks(g, out.k_slices),
                                 static_cast<std::int64_t>(per_sm_of(out.k_slices) > 0 ? per_sm_of(out.k_slices) : 1) *
                                     g.multiprocessors);
  if (forced_parts == 1 || (forced_parts == 0 && whole >= 0.8)) return out;
  double best = forced_parts > 1 ? -1.0 : whole;
  for (int slices = 1; slices <= g.warps; slices *= 2) {
    if ((forced_slices > 0 && slices != forced_slices) || per_sm_of(slices) == 0) continue;
    const std::int64_t slots = static_cast<std::int64_t>(per_sm_of(slices)) * g.multiprocessors;
    // The rule's counts 2 and 4 within its limits, or the forced count as it is.
    const int fewest = forced_parts > 1 ? forced_parts : 2, most = forced_parts > 1 ? forced_parts : 4;
    for (int q = fewest; q <= most; q *= 2) {
      const std::int64_t blocks = gemv_blocks(g, slices) * q;
      const bool short_ranges = q == 2 || g.k_steps <= 8 * slices * q;
      if (forced_parts <= 1 && (blocks > slots || 2 * slices * q > g.k_steps || !short_ranges)) continue;
      if (wave_fill(blocks, slots) > best + 1e-9) best = wave_fill(blocks, slots), out = GemvSplit{slices, q};
    }
  }
  return out;
}

}  // namespace lowbit::core

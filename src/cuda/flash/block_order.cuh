// The order in which the flash kernels' blocks take (head, query tile) work. The grid is
// (query tiles, heads, sequences); its blocks start in linear order (x fastest), and the
// linear index walks groups of Args::head_group heads, each group's query tiles longest
// first (the last tile first: under the causal mask its rows see the most keys) with the
// group's heads fastest. One head a group: the blocks resident together share its K and
// V in L2 (all heads at once did not fit, and every block streamed its head's from HBM).
// All heads in one group: the longest tiles of every head start first, leaving short
// ones for the tail (causal balance). The launchers choose (as measured).
#pragma once

#include "cuda/flash/flash_kernels.h"

namespace lowbit::cuda::flash {

struct BlockTile {
  int head;
  int t0;  // the block's first query of its sequence
};

// bm: query rows a block; A: the launch's arguments (Args, or another kernel's with a
// head_group).
template <class A>
__device__ __forceinline__ BlockTile block_tile(const A& a, int bm) {
  const int tiles = static_cast<int>(gridDim.x), heads = static_cast<int>(gridDim.y);
  const int lin = static_cast<int>(blockIdx.x) + tiles * static_cast<int>(blockIdx.y);
  const int span = a.head_group * tiles, group = lin / span, rest = lin - group * span;
  const int width = min(a.head_group, heads - group * a.head_group);  // the last group may be narrower
  const int rank = rest / width;
  return BlockTile{group * a.head_group + rest - rank * width, (tiles - 1 - rank) * bm};
}

}  // namespace lowbit::cuda::flash

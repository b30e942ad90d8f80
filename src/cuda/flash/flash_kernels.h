// The two kernels behind cuda::flash::flash_attention (flash_cuda.h): the mma.sync kernel
// (flash_attention.cu, any NVIDIA GPU this build targets) and the Hopper wgmma kernel
// (flash_wgmma.cu). Host-side declarations shared by the two files; no CUDA headers.
#pragma once

#include <cstdint>

#include "lowbit/tensor.h"

namespace lowbit::cuda::flash {

// One launch's arguments: element pointers and row strides as the API validated them.
struct Args {
  const std::uint16_t* q;
  const std::uint16_t* k;
  const std::uint16_t* v;
  std::uint16_t* out;
  long long ldq, ldk, ldv, ldo;  // elements between rows (K, V: between keys)
  long long kh, vh;  // elements between KV heads of K and V: head_dim in a [keys][kv_heads x D]
                     // matrix, the slots' span in a decode cache's [kv_heads][slots][D]
  const std::int32_t* cu_q;  // null: one sequence of q_len queries and k_len keys
  const std::int32_t* cu_k;
  int q_len, k_len;  // q's and k's rows (all sequences)
  int group;  // query heads a KV head
  bool causal;
  float sl2;  // the softmax scale times log2(e)
  int head_group = 1;  // heads a group of the blocks' order (block_order.cuh), set by the launcher
};

// Checks that the grid's q_tiles x heads blocks fit the order's int index.
void check_block_count(std::int64_t q_tiles, int heads);

// Whether the wgmma kernel runs on the current device (compute capability 9.0, an sm_90a
// image in this build; cuda/sm90_kernel.h), once per device. TMA's encoder is asked at
// each launch (launch_wgmma).
bool wgmma_ready();

// Runs the wgmma kernel; false (nothing launched) where TMA cannot read the operands
// (the driver refused a tensor map), so the caller runs the mma.sync kernel instead.
// Its grid: query tiles of the longest sequence (max_q_len) x heads x sequences, in
// block_order.cuh's order (it sets Args::head_group).
bool launch_wgmma(const Args& a, int heads, int kv_heads, int head_dim, bool bf16, std::int64_t max_q_len,
                  unsigned batch, cuda_stream_t stream);

}  // namespace lowbit::cuda::flash

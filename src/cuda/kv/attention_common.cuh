// What the two decode-attention kernels share (attention.cu: SIMT, every form; 
// attention_mma.cu: tensor cores, the decode forms): their arguments, the span of a
// graph launch, which rows this step's append writes, and the combine of the splits.
#pragma once

#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "core/fast_divisor.h"
#include "cuda/kv/kv_cuda.h"
#include "cuda/kv/paged_address.cuh"

namespace lowbit::cuda::kv {

constexpr int kMaxSplit = static_cast<int>(DecodeSplitPlan::kMaxSplit);

struct SplitArgs {
  KvLayerShape shape;
  KvLayerBuffers layer;
  int sink_end, recent_begin, end, visible, split_len, splits, group, n_heads;
  float q_scale;  // log2(e) / sqrt(D)
  const std::int32_t* device_pos;  // when set, the span is that of *device_pos + 1 positions
  // Rows other than the append's may be read before griddepcontrol.wait: the caller
  // guarantees that they were written by work completed before this step's first kernel.
  bool prefetch;
  const __half* q;
  float* acc;      // [n_heads][splits][D]
  float* max_sum;  // [n_heads][splits][2]
  // Fused combine (graph form): the last block of each head group to finish combines
  // the splits into out; counters (one per block row, zero between calls) count them.
  unsigned* counters;
  void* out;
  bool out_f16;
  // Rows form (prefill; rows_pos0 >= 0, the chunk's first position): blockIdx.z is the
  // chunk's row row0 + z; q (the chunk's first row here) and out and the partials (this
  // launch's first) advance by rows; the ring's FP16 positions come from the chunk
  // (>= rows_pos0) or the snapshot of the ring before it.
  long long rows_pos0 = -1, row0 = 0;
  const __half* chunk_k = nullptr;
  const __half* chunk_v = nullptr;
  long long chunk_ld = 0, q_ld = 0, out_ld = 0;
  const std::uint16_t* snap_k = nullptr;  // [kv_heads][window][D]
  const std::uint16_t* snap_v = nullptr;
  // Paged form (paged.descs set; kernels compiled with Paged): blockIdx.z is the batch
  // row; q, out (q_ld, out_ld apart), the partials and the counters advance by rows.
  PagedArgs paged{};
  const std::int32_t* table = nullptr;  // the row's page table (enter_paged_row; the rows form: the host)
  // Graph form: each step's split length from its own length, in whole rounds of 64
  // positions over `splits` (core::split_len_at, resolve_device_span); split_len is then
  // the capacity's, an upper bound.
  bool balanced = false;
  // Key blocks (the mma_swap KB instance): body index / key_block without a division.
  core::FastDivisor key_block_div{};
};


// The combine of one query head's splits, shared by the fused form and the combine
// kernel so that both give the same bits. One warp turns the splits' (max, sum) into
// weights 2^(m_s - M) in shared memory (`weights`, >= splits floats) and the total
// L = sum l_s w_s (fixed shuffle order); then each channel is sum_s acc_s w_s / L with
// its loads unrolled (the splits' partials are independent L2 reads: one at a time, a
// 33-split combine was ~10 us of round trips). Loads bypass L1: in the fused form other
// blocks wrote the partials.
// A lane's first two (max, sum) pairs are loaded at once and kept in registers: one round
// of L2 loads for up to 64 splits (this runs at the tail of every decode attention).
// stride: the splits of the plan (the partials' layout); splits: those combined.
__device__ __forceinline__ float combine_weights(const float* max_sum, int stride, int splits, int h, float* weights,
                                                 int lane) {
  const float2* ms = reinterpret_cast<const float2*>(max_sum) + static_cast<long long>(h) * stride;
  const float2 none = make_float2(-INFINITY, 0.0f);
  const float2 e0 = lane < splits ? __ldcg(ms + lane) : none;
  const float2 e1 = lane + 32 < splits ? __ldcg(ms + lane + 32) : none;
  float m = fmaxf(e0.x, e1.x);
  for (int s = lane + 64; s < splits; s += 32) m = fmaxf(m, __ldcg(ms + s).x);
#pragma unroll
  for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  float l = 0.0f;
  auto weigh = [&](int s, float2 e) {
    const float w = exp2f(e.x - m);
    weights[s] = w;
    l = fmaf(e.y, w, l);
  };
  if (lane < splits) weigh(lane, e0);
  if (lane + 32 < splits) weigh(lane + 32, e1);
  for (int s = lane + 64; s < splits; s += 32) weigh(s, __ldcg(ms + s));
#pragma unroll
  for (int o = 16; o > 0; o /= 2) l += __shfl_xor_sync(0xffffffffu, l, o);
  return l;
}

__device__ __forceinline__ float combine_channel(const float* acc, const float* weights, float total, int splits, int d,
                                                 int h, int c) {
  const float* a = acc + static_cast<long long>(h) * splits * d + c;
  float o = 0.0f;
#pragma unroll 16
  for (int s = 0; s < splits; ++s) o = fmaf(__ldcg(a + static_cast<long long>(s) * d), weights[s], o);
  return o / total;
}

// The partials of channels c .. c + 3 of head h (acc as SplitArgs lays it out; stride: the
// plan's splits), 16 bytes a split, and one split's term of their weighted sum.
__device__ __forceinline__ const float4* quad_partials(const float* acc, int stride, int d, int h, int c) {
  return reinterpret_cast<const float4*>(acc + static_cast<long long>(h) * stride * d + c);
}
__device__ __forceinline__ void add_quad(float4& o, const float4& x, float w) {
  o.x = fmaf(x.x, w, o.x);
  o.y = fmaf(x.y, w, o.y);
  o.z = fmaf(x.z, w, o.z);
  o.w = fmaf(x.w, w, o.w);
}

// Channels c .. c + 3 (c a multiple of 4) with 16-byte loads: each channel's sum in
// combine_channel's order, so the same bits; a quarter of the threads, so that the fused
// combine of a group of 4 heads at head_dim 128 is one item a thread (128 threads): its
// unrolled loads are the tail's L2 round trips, one set a thread rather than two.
__device__ __forceinline__ float4 combine_quad(const float* acc, const float* weights, float total, int stride,
                                               int splits, int d, int h, int c) {
  const float4* a = quad_partials(acc, stride, d, h, c);
  float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 16
  for (int s = 0; s < splits; ++s) add_quad(o, __ldcg(a + static_cast<long long>(s) * (d / 4)), weights[s]);
  return make_float4(o.x / total, o.y / total, o.z / total, o.w / total);
}

// The fused combine with its first loads early (one quad of channels a thread): the quad's
// partials of the first kEarlySplits splits are loaded before the weights are known, so
// that their L2 round trip overlaps the weights' (combine_weights); then every split is
// summed in combine_quad's order (the same bits).
constexpr int kEarlySplits = 16;
__device__ __forceinline__ void load_early_partials(const float4* a, int splits, int d, float4 (&v)[kEarlySplits]) {
#pragma unroll
  for (int s = 0; s < kEarlySplits; ++s) {
    if (s < splits) v[s] = __ldcg(a + static_cast<long long>(s) * (d / 4));
  }
}
__device__ __forceinline__ float4 combine_quad_early(const float4* a, const float4 (&v)[kEarlySplits],
                                                     const float* weights, float total, int splits, int d) {
  float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
  for (int s = 0; s < kEarlySplits; ++s) {
    if (s < splits) add_quad(o, v[s], weights[s]);
  }
#pragma unroll 16
  for (int s = kEarlySplits; s < splits; ++s) add_quad(o, __ldcg(a + static_cast<long long>(s) * (d / 4)), weights[s]);
  return make_float4(o.x / total, o.y / total, o.z / total, o.w / total);
}

// out[at .. at + 3] = v, as f16 or f32.
__device__ __forceinline__ void store_quad(void* out, bool out_f16, long long at, float4 v) {
  if (out_f16) {
    __half* o = static_cast<__half*>(out) + at;
    o[0] = __float2half_rn(v.x), o[1] = __float2half_rn(v.y), o[2] = __float2half_rn(v.z), o[3] = __float2half_rn(v.w);
  } else {
    float* o = static_cast<float*>(out) + at;
    o[0] = v.x, o[1] = v.y, o[2] = v.z, o[3] = v.w;
  }
}

// The rows this step's append writes: the new token (end - 1) and, under selective, the
// token that left the window for the body (recent_begin - 1).
__device__ __forceinline__ bool appended_now(const SplitArgs& a, int pos) {
  const bool leaves_window = a.shape.body != KvBody::none && a.shape.window > 0 && a.recent_begin > a.sink_end;
  return pos == a.end - 1 || (leaves_window && pos == a.recent_begin - 1);
}

// The span fields of a graph launch (length from the position in device memory) or of a
// row of the rows form.
__device__ __forceinline__ void resolve_span(SplitArgs& a, long long length) {
  const DecodeSpan span = decode_span_unchecked(a.shape, length);
  a.sink_end = static_cast<int>(span.sink_end);
  a.recent_begin = static_cast<int>(span.recent_begin);
  a.end = static_cast<int>(span.end);
  a.visible = static_cast<int>(span.visible(a.shape));
}

// The graph form's span, from the position in device memory, and its split length.
__device__ __forceinline__ void resolve_device_span(SplitArgs& a) {
  resolve_span(a, static_cast<long long>(*a.device_pos) + 1);
  if (a.balanced) a.split_len = static_cast<int>(core::split_len_at(a.visible, a.splits));
}

// The paged form's batch row blockIdx.z: its span, page table and fixed area, and where
// its q, out, partials and counters are; false when the row has nothing to do (idle, or
// bad: flagged in the status).
__device__ __forceinline__ bool enter_paged_row(SplitArgs& a, int d) {
  PagedRow row;
  const long long b = blockIdx.z;
  if (!paged_row(a.paged, static_cast<int>(b), row)) return false;
  a.table = row.table;
  if (row.fixed) enter_fixed_area(a.paged.layout, row.fixed, a.layer);
  a.q += b * a.q_ld;
  a.acc += b * a.n_heads * a.splits * d;
  a.max_sum += b * a.n_heads * a.splits * 2;
  if (a.counters) a.counters += b * gridDim.y;
  a.out = a.out_f16 ? static_cast<void*>(static_cast<__half*>(a.out) + b * a.out_ld)
                    : static_cast<void*>(static_cast<float*>(a.out) + b * a.out_ld);
  resolve_span(a, static_cast<long long>(row.pos) + 1);
  return true;
}

// The splits that hold positions. With the fused combine (graph and paged forms, whose
// plan is that of the longest length) the splits past the length exit at once and the
// combine takes only these; the two-launch forms run every split of their plan.
__device__ __forceinline__ int active_splits(const SplitArgs& a) {
  return a.counters ? (a.visible + a.split_len - 1) / a.split_len : a.splits;
}

// The splits' partials of `rows` rows -> out (f16, a row's n_heads x d at row * out_ld):
// the combine kernel of the two-launch forms (acc [rows][n_heads][splits][d], max_sum
// [rows][n_heads][splits][2], as SplitArgs lays them out).
void launch_combine(const float* acc, const float* max_sum, int splits, int d, __half* out, int n_heads,
                    long long out_ld, long long rows, cudaStream_t stream);

// The rows form (prefill) on tensor cores (attention_rows_mma.cu): a chunk's rows, each at
// its position, over the cache (contiguous, or one sequence's pages when table is set).
struct RowsMmaArgs {
  KvLayerShape shape;
  KvLayerBuffers layer;  // the cache; paged: the sequence's fixed area
  PagedArgs paged{};     // paged: the pool (layout, layer, status)
  const std::int32_t* table = nullptr;  // paged: the sequence's page table
  const __half* chunk = nullptr;        // the chunk's row 0: q at column 0, K at k_col, V at v_col
  long long ld = 0, k_col = 0, v_col = 0;
  int pos0 = 0, rows = 0;
  const std::uint16_t* snap_k = nullptr;  // the ring before the chunk, [kv_heads][window][D]
  const std::uint16_t* snap_v = nullptr;
  const std::uint16_t* snap_staged = nullptr;  // key blocks: K's staging ring before it, [kv_heads][B][D]
  int n_heads = 0;
  float q_scale = 0.0f;  // log2(e) / sqrt(D)
  __half* out = nullptr;
  long long out_ld = 0;
  // Set by launch_rows_mma: the GQA group, rows a block, the split plan and its partials.
  int group = 0, rows_per_block = 0, splits = 1, split_tiles = 0;
  float* acc = nullptr;
  float* max_sum = nullptr;
};
// Launches it (and, when it splits the positions, the combine): split-K only as far as
// the workspace holds the partials, so any workspace (even none) serves.
void launch_rows_mma(RowsMmaArgs a, void* workspace, std::size_t workspace_bytes, cudaStream_t stream);

// The tensor-core kernel's launch (attention_mma.cu): grid (splits, kv_heads); every
// query head of a KV head in one block (group <= kMmaMaxGroup, kv_cuda.h).
// swap: the variant with positions as the mma's M and P in f16 only (AttentionKernel::
// mma_swap; groups of up to kMmaSwapMaxGroup, larger ones take the other).
// paged: the instantiation with the paged address map (a.paged.descs set).
void launch_split_mma(const SplitArgs& a, dim3 grid, cudaStream_t stream, bool swap = false, bool paged = false);
// The blocks a SM the tensor-core kernel of this shape keeps resident.
int mma_blocks_per_sm(const KvLayerShape& shape, bool swap = false, bool paged = false);

}  // namespace lowbit::cuda::kv

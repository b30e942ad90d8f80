// The device sampler (sampling_cuda.h). One block of kThreads threads a row:
//   1. the row's logits sanitized into the workspace, its penalties applied;
//   2. the largest order key (a block max): the greedy token and l_max;
//   3. top-k: the k-th largest key by an 8-pass radix select (256 buckets, counts);
//   4. the top-k set's integer weight sum, then top-p: the largest key whose suffix
//      mass (keys >= it, in the set) reaches the target, by the same radix select over
//      weight sums;
//   5. the draw: each thread sums the draw weights of a contiguous range of ids, an
//      exclusive scan orders the ranges by id, and the thread whose range holds r walks
//      it to the token.
// Every sum is an integer and every float operation is formats/sampling.h's, so the
// token equals the CPU sampler's whatever the order of the reductions.
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/model/sampling_cuda.h"
#include "lowbit/cuda_check.h"
#include "lowbit/error.h"

namespace lowbit::cuda::model {
namespace {

namespace fs = formats::sampling;

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr unsigned kFull = 0xffffffffu;

__device__ __forceinline__ std::uint64_t block_max(std::uint64_t v, std::uint64_t* scratch) {
  for (int o = 16; o > 0; o /= 2) v = max(v, static_cast<std::uint64_t>(__shfl_xor_sync(kFull, v, o)));
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  std::uint64_t out = 0;
  for (int w = 0; w < kWarps; ++w) out = max(out, scratch[w]);
  __syncthreads();  // scratch is reused by the next reduction
  return out;
}

__device__ __forceinline__ std::uint64_t block_sum(std::uint64_t v, std::uint64_t* scratch) {
  for (int o = 16; o > 0; o /= 2) v += static_cast<std::uint64_t>(__shfl_xor_sync(kFull, v, o));
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  std::uint64_t out = 0;
  for (int w = 0; w < kWarps; ++w) out += scratch[w];
  __syncthreads();
  return out;
}

// Exclusive prefix sum over the threads in threadIdx order; *total gets the sum of all.
__device__ __forceinline__ std::uint64_t block_exclusive_scan(std::uint64_t v, std::uint64_t* scratch,
                                                              std::uint64_t* total) {
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  std::uint64_t inclusive = v;
  for (int o = 1; o < 32; o *= 2) {
    const auto up = static_cast<std::uint64_t>(__shfl_up_sync(kFull, inclusive, o));
    if (lane >= o) inclusive += up;
  }
  if (lane == 31) scratch[warp] = inclusive;
  __syncthreads();
  std::uint64_t before = 0, all = 0;
  for (int w = 0; w < kWarps; ++w) {
    if (w < warp) before += scratch[w];
    all += scratch[w];
  }
  __syncthreads();
  *total = all;
  return before + inclusive - v;
}

// Shared state of the radix selection.
struct Radix {
  unsigned long long sums[256];
  unsigned long long prefix, above;
};

// The largest key `kappa` such that the tokens with keys >= max(kappa, floor) weigh at
// least `target` in all (1 <= target <= the weight of the keys >= floor): a most
// significant digit first radix descent over the 64-bit keys, 8 bits a pass, with
// weight sums per bucket. Weight 1 makes it the target-th largest key (top-k); the
// integer weights W make it the top-p cut.
template <class Weight>
__device__ std::uint64_t largest_key_reaching(const float* l, long long vocab, std::uint64_t floor,
                                              std::uint64_t target, Weight weight, Radix& s) {
  std::uint64_t prefix = 0, above = 0;  // above: the weight of the keys beyond prefix's range
  for (int shift = 56; shift >= 0; shift -= 8) {
    const std::uint64_t high = shift == 56 ? 0 : ~std::uint64_t{0} << (shift + 8);
    for (int b = static_cast<int>(threadIdx.x); b < 256; b += kThreads) s.sums[b] = 0;
    __syncthreads();
    for (long long i = threadIdx.x; i < vocab; i += kThreads) {
      const std::uint64_t key = fs::order_key(l[i], static_cast<std::int32_t>(i));
      if (key >= floor && (key & high) == prefix) {
        const std::uint64_t w = weight(i);
        if (w != 0) atomicAdd(&s.sums[(key >> shift) & 255u], static_cast<unsigned long long>(w));
      }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      std::uint64_t cumulative = above;
      int chosen = 0;
      for (int b = 255; b >= 0; --b) {
        if (cumulative + s.sums[b] >= target) {
          chosen = b;
          break;
        }
        cumulative += s.sums[b];
      }
      s.prefix = prefix | (static_cast<std::uint64_t>(chosen) << shift);
      s.above = cumulative;
    }
    __syncthreads();
    prefix = s.prefix;
    above = s.above;
    __syncthreads();
  }
  return prefix;
}

__global__ void __launch_bounds__(kThreads) sample_kernel(SamplingBatch b, float* workspace) {
  __shared__ std::uint64_t scratch[kWarps];
  __shared__ Radix radix;
  const long long row = blockIdx.x, vocab = b.vocab;
  const fs::RowParams p = b.params[row];
  float* l = workspace + row * vocab;

  int bad = 0;
  for (long long i = threadIdx.x; i < vocab; i += kThreads) {
    const float v = b.logits ? b.logits[row * b.logits_stride + i]
                             : __half2float(__ushort_as_half(b.logits_f16[row * b.logits_stride + i]));
    bad |= !isfinite(v);
    l[i] = fs::sanitize(v);
  }
  bad = __syncthreads_or(bad);
  if (b.non_finite && threadIdx.x == 0) b.non_finite[row] = bad;
  if (b.penalty_offsets) {
    const int begin = b.penalty_offsets[row], end = b.penalty_offsets[row + 1];
    for (int j = begin + static_cast<int>(threadIdx.x); j < end; j += kThreads) {
      const std::int32_t id = b.penalty_ids[j];
      l[id] = fs::penalize(l[id], b.penalty_counts[j], p);
    }
    __syncthreads();
  }

  std::uint64_t best = 0;
  for (long long i = threadIdx.x; i < vocab; i += kThreads) {
    best = max(best, fs::order_key(l[i], static_cast<std::int32_t>(i)));
  }
  best = block_max(best, scratch);
  const float max_logit = fs::key_logit(best);
  if (fs::greedy(p) || max_logit == -INFINITY) {
    if (threadIdx.x == 0) b.tokens[row] = fs::key_id(best);
    return;
  }

  std::uint64_t floor = 0;  // the set is the keys >= floor
  if (fs::top_k_active(p, vocab)) {
    floor = largest_key_reaching(l, vocab, 0, static_cast<std::uint64_t>(p.top_k),
                                 [](long long) { return std::uint64_t{1}; }, radix);
  }
  if (fs::top_p_active(p)) {
    auto weight = [&](long long i) { return fs::fixed_weight(fs::relative_probability(l[i], max_logit)); };
    std::uint64_t mass = 0;
    for (long long i = threadIdx.x; i < vocab; i += kThreads) {
      if (fs::order_key(l[i], static_cast<std::int32_t>(i)) >= floor) mass += weight(i);
    }
    mass = block_sum(mass, scratch);
    floor = largest_key_reaching(l, vocab, floor, fs::top_p_target(mass, p.top_p), weight, radix);
  }

  auto draw_weight = [&](long long i) -> std::uint64_t {
    if (fs::order_key(l[i], static_cast<std::int32_t>(i)) < floor) return 0;
    if (fs::min_p_active(p) && !(fs::relative_probability(l[i], max_logit) >= p.min_p)) return 0;
    return fs::draw_weight(l[i], max_logit, p.temperature);
  };
  const long long per_thread = (vocab + kThreads - 1) / kThreads;
  const long long begin = min(vocab, static_cast<long long>(threadIdx.x) * per_thread);
  const long long end = min(vocab, begin + per_thread);
  std::uint64_t local = 0;
  for (long long i = begin; i < end; ++i) local += draw_weight(i);
  std::uint64_t total = 0;
  const std::uint64_t before = block_exclusive_scan(local, scratch, &total);
  const std::uint64_t r = fs::scale_draw(fs::splitmix64(p.seed, p.draw), total);
  if (before <= r && r < before + local) {
    std::uint64_t prefix = before;
    for (long long i = begin; i < end; ++i) {
      prefix += draw_weight(i);
      if (prefix > r) {
        b.tokens[row] = static_cast<std::int32_t>(i);
        break;
      }
    }
  }
}

}  // namespace

std::size_t sample_rows_workspace_bytes(std::int64_t rows, std::int64_t vocab) {
  LOWBIT_CHECK(rows >= 0 && vocab >= 0, "sample_rows_workspace_bytes: rows = ", rows, ", vocab = ", vocab);
  return static_cast<std::size_t>(rows) * static_cast<std::size_t>(vocab) * sizeof(float);
}

void sample_rows(const SamplingBatch& batch, void* workspace, std::size_t workspace_bytes, cuda_stream_t stream) {
  LOWBIT_CHECK(batch.rows >= 0 && batch.rows <= 0x7fffffff, "sample_rows: rows = ", batch.rows,
               ", expected 0 .. 2^31 - 1");
  LOWBIT_CHECK(batch.vocab >= 1 && batch.vocab <= 0x7fffffff, "sample_rows: vocab = ", batch.vocab,
               ", expected 1 .. 2^31 - 1");
  LOWBIT_CHECK(batch.logits_stride >= batch.vocab, "sample_rows: logits_stride = ", batch.logits_stride,
               ", expected >= vocab (", batch.vocab, ")");
  if (batch.rows == 0) return;
  LOWBIT_CHECK((batch.logits != nullptr) != (batch.logits_f16 != nullptr),
               "sample_rows: expected exactly one of logits (f32) and logits_f16");
  LOWBIT_CHECK(batch.params && batch.tokens, "sample_rows: null params or tokens");
  LOWBIT_CHECK(!batch.penalty_offsets || (batch.penalty_ids && batch.penalty_counts),
               "sample_rows: penalty_offsets without penalty_ids / penalty_counts");
  const std::size_t need = sample_rows_workspace_bytes(batch.rows, batch.vocab);
  LOWBIT_CHECK(workspace && workspace_bytes >= need, "sample_rows: workspace of ", workspace_bytes,
               " bytes, expected at least ", need);
  sample_kernel<<<static_cast<unsigned>(batch.rows), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      batch, static_cast<float*>(workspace));
  LOWBIT_CUDA_CHECK_LAUNCH();
}

}  // namespace lowbit::cuda::model

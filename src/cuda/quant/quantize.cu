// Quantization on the GPU (scales and codes): every granularity, scheme and float type.
//
// Work is split into chunks of 16 consecutive elements of a row (tile.cuh). A block of
// 256 threads is a cx x cy grid of chunks: cx (a power of two, up to 256) chunks along
// a row, cy = 256 / cx rows, and each thread handles several rows of its column chunk,
// loading all of them before using any (256 bytes in flight per thread), so that enough
// bytes are in flight to keep HBM busy.
//
//   per_tensor / per_channel: reduce_columns_kernel (one pass over x, partials
//     combined with atomics into kReductionCopies copies in the workspace, so that
//     no address sees more than a few dozen atomics) -> finalize_columns_kernel (scales)
//     -> encode_tile_kernel<kGivenColumns> (second pass over x, codes).
//   per_token / per_group: encode_tile_kernel<kComputeRows>, one pass: each segment
//     (a row or a group) is reduced across the lanes that hold it with shuffles, and
//     encoded from registers. Segments wider than a warp can hold (per_token with
//     more than 512 columns, or group sizes that are not 16 x a power of two up to
//     512) take encode_rows_kernel: one block per row, reduced in shared memory.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/dtype_dispatch.h"
#include "core/device.h"
#include "cuda/quant/quant_cuda.h"
#include "cuda/quant/status.cuh"
#include "cuda/quant/tile.cuh"
#include "formats/code_scheme.h"
#include "lowbit/cuda_check.h"

namespace lowbit::cuda {
namespace {

constexpr int kReductionCopies = 16;

// ---------------------------------------------------------------- workspace

// [status | abs_bits[K][n] | hi[K][n] | lo[K][n]], n = cols (per_channel) or 1
// (per_tensor), K = kReductionCopies: block b of the reduction accumulates into copy
// b % K, and the finalize kernel combines the K copies. With the status outside (a
// NonFiniteStatus), the workspace starts at abs_bits.
struct WorkspaceLayout {
  DeviceStatus* status;
  bool status_outside;  // a sticky word the caller owns: never cleared here
  unsigned* abs_bits;
  unsigned* hi;
  unsigned* lo;
  std::int64_t count;  // n
  std::int64_t slots() const { return count * kReductionCopies; }
};

std::int64_t reduction_slots(const QuantSpec& spec, std::int64_t cols) {
  if (!spans_rows(spec.granularity)) return 0;
  return spec.granularity == Granularity::per_channel ? cols : 1;
}

WorkspaceLayout workspace_layout(const Workspace& workspace, const QuantSpec& spec, std::int64_t cols,
                                 void* status) {
  auto* base = static_cast<char*>(workspace.data);
  const std::int64_t n = reduction_slots(spec, cols);
  auto* abs_bits = reinterpret_cast<unsigned*>(status ? base : base + kStatusBytes);
  const std::int64_t slots = n * kReductionCopies;
  auto* word = static_cast<DeviceStatus*>(status ? status : static_cast<void*>(base));
  return WorkspaceLayout{word, status != nullptr, abs_bits, abs_bits + slots, abs_bits + 2 * slots, n};
}

// ---------------------------------------------------------------- encode, tiled

enum ParamMode : int {
  kGivenColumns,  // per_tensor / per_channel, parameters given
  kGivenRows,     // per_token / per_group, parameters given
  kComputeRows,   // per_token / per_group, parameters computed here from x
};

struct EncodeArgs {
  const void* x;
  long long ldx;
  void* codes;
  long long ldq;
  long long rows, cols;
  const float* scales;  // given parameters (kGiven*)
  const float* mins;
  float* scales_out;  // computed parameters (kComputeRows)
  float* mins_out;
  bool per_tensor;           // kGivenColumns: one parameter for all columns
  long long segment_width;   // row-local: group size, or cols for per_token
  long long scale_cols;      // row-local: segments per row
  int lanes;                 // kComputeRows: lanes per segment, a power of two <= 32
  bool write_codes;
  bool vector_ok;
  int cx_log2, cy;
  DeviceStatus* status;
};

template <class In, class Code, int kMode>
__global__ void __launch_bounds__(kThreads, 2) encode_tile_kernel(const EncodeArgs a) {
  const int tx = threadIdx.x & ((1 << a.cx_log2) - 1);
  const int ty = threadIdx.x >> a.cx_log2;
  const long long c0 = ((static_cast<long long>(blockIdx.x) << a.cx_log2) + tx) * kChunk;
  const int valid = c0 < a.cols ? static_cast<int>(min(static_cast<long long>(kChunk), a.cols - c0)) : 0;
  const In* x = static_cast<const In*>(a.x);

  float inv[kChunk], lo[kChunk];
  bool have_column_params = false;

  constexpr int kRows = kRowsInFlight<In>;
  const long long rows_per_tile = static_cast<long long>(a.cy) * kRows;
  for (long long tile = blockIdx.y; tile * rows_per_tile < a.rows; tile += gridDim.y) {
    RawChunk<In> raw[kRows];
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const long long r = tile * rows_per_tile + i * a.cy + ty;
      const int n = r < a.rows ? valid : 0;
      load_raw(x + (n ? r * a.ldx + c0 : 0), n, a.vector_ok, raw[i]);
    }
    // Parameters are fetched after the first loads are in flight, so that their
    // latency (and the divisions) overlap the loads instead of delaying them.
    float row_scale[kRows], row_min[kRows];
    if constexpr (kMode == kGivenRows) {
#pragma unroll
      for (int i = 0; i < kRows; ++i) {
        const long long r = tile * rows_per_tile + i * a.cy + ty;
        const long long index = (r < a.rows && valid) ? r * a.scale_cols + c0 / a.segment_width : 0;
        row_scale[i] = a.scales[index];
        row_min[i] = Code::kAsymmetric ? a.mins[index] : 0.0f;
      }
    }
    if constexpr (kMode == kGivenColumns) {
      if (!have_column_params) {
#pragma unroll
        for (int k = 0; k < kChunk; ++k) {
          const long long index = a.per_tensor ? 0 : c0 + k;
          inv[k] = k < valid ? formats::inverse_scale(a.scales[index]) : 0.0f;
          lo[k] = (Code::kAsymmetric && k < valid) ? a.mins[index] : 0.0f;
        }
        have_column_params = true;
      }
    }
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const long long r = tile * rows_per_tile + i * a.cy + ty;
      const int n = r < a.rows ? valid : 0;
      float v[kChunk];
      raw_to_floats(raw[i], v);
      if constexpr (kMode == kGivenRows) {
        const float inv_row = formats::inverse_scale(row_scale[i]);
#pragma unroll
        for (int k = 0; k < kChunk; ++k) inv[k] = inv_row, lo[k] = row_min[i];
      } else if constexpr (kMode == kComputeRows) {
        // Reduce the segment across its lanes; every lane takes part in the shuffles.
        const ChunkStats own = chunk_stats(v, n);
        ChunkStats s = own;
        for (int offset = a.lanes / 2; offset > 0; offset /= 2) {
          s.abs_bits = max(s.abs_bits, __shfl_xor_sync(0xffffffffu, s.abs_bits, offset));
          s.lo = fminf(s.lo, __shfl_xor_sync(0xffffffffu, s.lo, offset));
          s.hi = fmaxf(s.hi, __shfl_xor_sync(0xffffffffu, s.hi, offset));
        }
        const Params p = params_from_stats<Code>(s);
        if (n && (tx & (a.lanes - 1)) == 0) {
          const long long index = r * a.scale_cols + c0 / a.segment_width;
          a.scales_out[index] = p.scale;
          if (Code::kAsymmetric) a.mins_out[index] = p.min;
        }
        if (n && !formats::is_finite_bits(own.abs_bits)) {
          report_non_finite(a.status, r, c0 + first_non_finite(v, n));
        }
#pragma unroll
        for (int k = 0; k < kChunk; ++k) inv[k] = p.inv, lo[k] = p.min;
      }
      if (n && a.write_codes) {
        encode_chunk<Code>(static_cast<char*>(a.codes) + r * a.ldq, c0, n, a.vector_ok, v, inv, lo);
      }
    }
  }
}

// ---------------------------------------------------------------- encode, one block per row

template <class In, class Code>
__global__ void __launch_bounds__(kThreads) encode_rows_kernel(const EncodeArgs a) {
  extern __shared__ unsigned shared[];
  const long long segments = a.scale_cols;
  unsigned* seg_abs = shared;
  unsigned* seg_lo = seg_abs + segments;
  unsigned* seg_hi = seg_lo + segments;
  float* seg_inv = reinterpret_cast<float*>(seg_hi + segments);
  float* seg_min = seg_inv + segments;
  const long long chunks = (a.cols + kChunk - 1) / kChunk;
  const In* x = static_cast<const In*>(a.x);

  for (long long r = blockIdx.x; r < a.rows; r += gridDim.x) {
    for (long long s = threadIdx.x; s < segments; s += blockDim.x) {
      seg_abs[s] = 0u, seg_lo[s] = kOrderedHighest, seg_hi[s] = kOrderedLowest;
    }
    __syncthreads();
    const In* x_row = x + r * a.ldx;
    for (long long ch = threadIdx.x; ch < chunks; ch += blockDim.x) {
      const long long c0 = ch * kChunk;
      const int n = static_cast<int>(min(static_cast<long long>(kChunk), a.cols - c0));
      float v[kChunk];
      load_chunk(x_row + c0, n, a.vector_ok, v);
      const ChunkStats s = chunk_stats(v, n);
      const long long seg = c0 / a.segment_width;
      atomicMax(&seg_abs[seg], s.abs_bits);
      if (Code::kAsymmetric) {
        atomicMin(&seg_lo[seg], to_ordered(s.lo));
        atomicMax(&seg_hi[seg], to_ordered(s.hi));
      }
      if (!formats::is_finite_bits(s.abs_bits)) report_non_finite(a.status, r, c0 + first_non_finite(v, n));
    }
    __syncthreads();
    for (long long s = threadIdx.x; s < segments; s += blockDim.x) {
      const ChunkStats stats{seg_abs[s], from_ordered(seg_lo[s]), from_ordered(seg_hi[s])};
      const Params p = params_from_stats<Code>(stats);
      a.scales_out[r * segments + s] = p.scale;
      if (Code::kAsymmetric) a.mins_out[r * segments + s] = p.min;
      seg_inv[s] = p.inv, seg_min[s] = p.min;
    }
    __syncthreads();
    if (a.write_codes) {
      for (long long ch = threadIdx.x; ch < chunks; ch += blockDim.x) {
        const long long c0 = ch * kChunk;
        const int n = static_cast<int>(min(static_cast<long long>(kChunk), a.cols - c0));
        float v[kChunk], inv[kChunk], lo[kChunk];
        load_chunk(x_row + c0, n, a.vector_ok, v);  // second read: hits L1/L2
        const long long seg = c0 / a.segment_width;
#pragma unroll
        for (int k = 0; k < kChunk; ++k) inv[k] = seg_inv[seg], lo[k] = seg_min[seg];
        encode_chunk<Code>(static_cast<char*>(a.codes) + r * a.ldq, c0, n, a.vector_ok, v, inv, lo);
      }
    }
    __syncthreads();
  }
}

// ---------------------------------------------------------------- column reduction

struct ReduceArgs {
  const void* x;
  long long ldx;
  long long rows, cols;
  bool vector_ok;
  bool per_tensor;
  int cx_log2, cy;
  unsigned* abs_bits;
  unsigned* hi;
  unsigned* lo;
};

template <class In, class Code>
__global__ void __launch_bounds__(kThreads, 2) reduce_columns_kernel(const ReduceArgs a) {
  __shared__ unsigned exchange[kThreads * kChunk];
  __shared__ unsigned block_total[3];
  const int tx = threadIdx.x & ((1 << a.cx_log2) - 1);
  const int ty = threadIdx.x >> a.cx_log2;
  const long long c0 = ((static_cast<long long>(blockIdx.x) << a.cx_log2) + tx) * kChunk;
  const int valid = c0 < a.cols ? static_cast<int>(min(static_cast<long long>(kChunk), a.cols - c0)) : 0;
  const In* x = static_cast<const In*>(a.x);

  unsigned amax[kChunk];
  float lo[kChunk], hi[kChunk];
#pragma unroll
  for (int k = 0; k < kChunk; ++k) amax[k] = 0u, lo[k] = INFINITY, hi[k] = -INFINITY;

  constexpr int kRows = kRowsInFlight<In>;
  const long long stride = static_cast<long long>(gridDim.y) * a.cy;
  for (long long r0 = static_cast<long long>(blockIdx.y) * a.cy + ty; r0 < a.rows; r0 += kRows * stride) {
    RawChunk<In> raw[kRows];
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const long long r = r0 + i * stride;
      const int n = r < a.rows ? valid : 0;
      load_raw(x + (n ? r * a.ldx + c0 : 0), n, a.vector_ok, raw[i]);
    }
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const bool in_range = r0 + i * stride < a.rows;
      float v[kChunk];
      raw_to_floats(raw[i], v);
#pragma unroll
      for (int k = 0; k < kChunk; ++k) {
        if (in_range && k < valid) {
          amax[k] = max(amax[k], formats::abs_bits(v[k]));
          if (Code::kAsymmetric) lo[k] = fminf(lo[k], v[k]), hi[k] = fmaxf(hi[k], v[k]);
        }
      }
    }
  }

  // Combine the cy threads that hold the same columns, one statistic at a time.
  auto combine_rows = [&](unsigned (&value)[kChunk], auto op) {
    if (a.cy == 1) return;
#pragma unroll
    for (int k = 0; k < kChunk; ++k) exchange[threadIdx.x * kChunk + k] = value[k];
    __syncthreads();
    if (ty == 0) {
      for (int y = 1; y < a.cy; ++y) {
#pragma unroll
        for (int k = 0; k < kChunk; ++k) value[k] = op(value[k], exchange[((y << a.cx_log2) + tx) * kChunk + k]);
      }
    }
    __syncthreads();
  };
  auto umax = [](unsigned p, unsigned q) { return max(p, q); };
  auto umin = [](unsigned p, unsigned q) { return min(p, q); };
  unsigned lo_ord[kChunk], hi_ord[kChunk];
#pragma unroll
  for (int k = 0; k < kChunk; ++k) lo_ord[k] = to_ordered(lo[k]), hi_ord[k] = to_ordered(hi[k]);
  combine_rows(amax, umax);
  if (Code::kAsymmetric) {
    combine_rows(lo_ord, umin);
    combine_rows(hi_ord, umax);
  }

  if (a.per_tensor) {
    if (threadIdx.x == 0) block_total[0] = 0u, block_total[1] = kOrderedHighest, block_total[2] = kOrderedLowest;
    __syncthreads();
    if (ty == 0 && valid) {
      unsigned t_abs = 0u, t_lo = kOrderedHighest, t_hi = kOrderedLowest;
#pragma unroll
      for (int k = 0; k < kChunk; ++k) {
        if (k < valid) t_abs = max(t_abs, amax[k]), t_lo = min(t_lo, lo_ord[k]), t_hi = max(t_hi, hi_ord[k]);
      }
      atomicMax(&block_total[0], t_abs);
      if (Code::kAsymmetric) atomicMin(&block_total[1], t_lo), atomicMax(&block_total[2], t_hi);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      const long long slot = (blockIdx.y % kReductionCopies);
      atomicMax(&a.abs_bits[slot], block_total[0]);
      if (Code::kAsymmetric) atomicMin(&a.lo[slot], block_total[1]), atomicMax(&a.hi[slot], block_total[2]);
    }
    return;
  }
  if (ty == 0) {
    const long long copy = (blockIdx.y % kReductionCopies) * a.cols;
#pragma unroll
    for (int k = 0; k < kChunk; ++k) {
      if (k < valid) {
        atomicMax(&a.abs_bits[copy + c0 + k], amax[k]);
        if (Code::kAsymmetric) atomicMin(&a.lo[copy + c0 + k], lo_ord[k]), atomicMax(&a.hi[copy + c0 + k], hi_ord[k]);
      }
    }
  }
}

template <class Code>
__global__ void finalize_columns_kernel(WorkspaceLayout w, float* scales, float* mins, bool per_tensor) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= w.count) return;
  unsigned abs_bits = 0u, lo = kOrderedHighest, hi = kOrderedLowest;
#pragma unroll
  for (int copy = 0; copy < kReductionCopies; ++copy) {
    abs_bits = max(abs_bits, w.abs_bits[copy * w.count + i]);
    lo = min(lo, w.lo[copy * w.count + i]);
    hi = max(hi, w.hi[copy * w.count + i]);
  }
  if (!formats::is_finite_bits(abs_bits)) report_non_finite(w.status, -1, per_tensor ? -1 : i);
  const ChunkStats s{abs_bits, from_ordered(lo), from_ordered(hi)};
  const Params p = params_from_stats<Code>(s);
  scales[i] = p.scale;
  if (Code::kAsymmetric) mins[i] = p.min;
}

// ---------------------------------------------------------------- host side

// Whether every full chunk of every row can use 16-byte accesses for the float
// tensor and the widest code access (16 bytes int8, 8 bytes int4).
bool vector_ok(const TensorView& values, const TensorView& codes, QuantScheme scheme) {
  const std::size_t esize = dtype_size(values.dtype);
  const std::size_t code_align = scheme_bits(scheme) == 8 ? 16 : 8;
  return aligned(values.data, 16) && (values.row_stride() * esize) % 16 == 0 && aligned(codes.data, code_align) &&
         static_cast<std::size_t>(codes.row_stride()) % code_align == 0;
}

bool is_pow2(long long v) { return v > 0 && (v & (v - 1)) == 0; }

// Lanes per segment for the shuffle-reduced tile kernel, or 0 when a segment is too
// wide for it (then encode_rows_kernel runs).
int tile_lanes(const QuantSpec& spec, const TileShape& shape) {
  const long long cx = 1LL << shape.cx_log2;
  const long long chunks_per_segment =
      spec.granularity == Granularity::per_group ? spec.group_size / kChunk : cx;
  if (!is_pow2(chunks_per_segment)) return 0;
  const long long lanes = std::min(chunks_per_segment, cx);
  return lanes <= 32 ? static_cast<int>(lanes) : 0;
}

template <class Kernel>
void launch_tiles(Kernel kernel, const TileShape& shape, long long rows, int rows_per_thread, const EncodeArgs& a,
                  cudaStream_t stream) {
  const long long tiles = (rows + static_cast<long long>(shape.cy) * rows_per_thread - 1) /
                          (static_cast<long long>(shape.cy) * rows_per_thread);
  LOWBIT_CHECK(shape.grid_x <= 0x7fffffffLL, "x: ", a.cols, " columns is more than one launch can cover");
  const dim3 grid(static_cast<unsigned>(shape.grid_x), grid_rows(tiles));
  kernel<<<grid, kThreads, 0, stream>>>(a);
  LOWBIT_CUDA_CHECK_LAUNCH();
}

EncodeArgs encode_args(const TensorView& x, const QuantSpec& spec, const QuantizedView& q, const TileShape& shape,
                       DeviceStatus* status) {
  EncodeArgs a{};
  a.x = x.data;
  a.ldx = x.row_stride();
  a.codes = q.codes.data;
  a.ldq = q.codes.row_stride();
  a.rows = x.rows();
  a.cols = x.cols();
  a.scales = q.scales.ptr<const float>();
  a.mins = q.mins.ptr<const float>();
  a.scales_out = q.scales.ptr<float>();
  a.mins_out = q.mins.ptr<float>();
  a.per_tensor = spec.granularity == Granularity::per_tensor;
  a.segment_width = segment_width(spec, x.cols());
  a.scale_cols = quant_layout(spec, x.rows(), x.cols()).scale_cols;
  a.write_codes = q.codes.data != nullptr;
  a.vector_ok = q.codes.data ? vector_ok(x, q.codes, spec.scheme)
                             : aligned(x.data, 16) && (x.row_stride() * dtype_size(x.dtype)) % 16 == 0;
  a.cx_log2 = shape.cx_log2;
  a.cy = shape.cy;
  a.status = status;
  return a;
}

template <class In, class Code>
void encode_given(const TensorView& x, const QuantSpec& spec, const QuantizedView& q, cudaStream_t stream) {
  const TileShape shape = tile_shape(x.cols());
  const EncodeArgs a = encode_args(x, spec, q, shape, nullptr);
  if (spans_rows(spec.granularity)) {
    launch_tiles(encode_tile_kernel<In, Code, kGivenColumns>, shape, x.rows(), kRowsInFlight<In>, a, stream);
  } else {
    launch_tiles(encode_tile_kernel<In, Code, kGivenRows>, shape, x.rows(), kRowsInFlight<In>, a, stream);
  }
}

// per_token / per_group: scales from the data and (if q.codes is set) codes, one pass.
template <class In, class Code>
void encode_row_local(const TensorView& x, const QuantSpec& spec, const QuantizedView& q, DeviceStatus* status,
                      cudaStream_t stream) {
  const TileShape shape = tile_shape(x.cols());
  EncodeArgs a = encode_args(x, spec, q, shape, status);
  a.lanes = tile_lanes(spec, shape);
  if (a.lanes > 0) {
    launch_tiles(encode_tile_kernel<In, Code, kComputeRows>, shape, x.rows(), kRowsInFlight<In>, a, stream);
    return;
  }
  const std::size_t shared_bytes = static_cast<std::size_t>(a.scale_cols) * 5 * sizeof(unsigned);
  int shared_limit = 0;
  LOWBIT_CUDA_CHECK(cudaDeviceGetAttribute(&shared_limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, core::current_device()));
  LOWBIT_CHECK(shared_bytes <= static_cast<std::size_t>(shared_limit), "spec.group_size: ", a.scale_cols,
               " groups per row need ", shared_bytes, " bytes of shared memory, more than the device's ",
               shared_limit, "; use a group size of 16 x a power of two up to 512");
  auto kernel = encode_rows_kernel<In, Code>;
  if (shared_bytes > 48 * 1024) {
    LOWBIT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(shared_bytes)));
  }
  const auto blocks = static_cast<unsigned>(std::min<long long>(x.rows(), 8LL * core::multiprocessor_count()));
  kernel<<<blocks, kThreads, shared_bytes, stream>>>(a);
  LOWBIT_CUDA_CHECK_LAUNCH();
}

template <class In, class Code>
void reduce_columns(const TensorView& x, const QuantSpec& spec, const WorkspaceLayout& w, cudaStream_t stream) {
  const TileShape shape = tile_shape(x.cols());
  ReduceArgs a{};
  a.x = x.data;
  a.ldx = x.row_stride();
  a.rows = x.rows();
  a.cols = x.cols();
  a.vector_ok = aligned(x.data, 16) && (x.row_stride() * dtype_size(x.dtype)) % 16 == 0;
  a.per_tensor = spec.granularity == Granularity::per_tensor;
  a.cx_log2 = shape.cx_log2;
  a.cy = shape.cy;
  a.abs_bits = w.abs_bits;
  a.hi = w.hi;
  a.lo = w.lo;
  // Enough blocks to fill the GPU a few times over; fewer means fewer atomics.
  const long long row_blocks = (x.rows() + shape.cy - 1) / shape.cy;
  const long long wanted = std::max<long long>(1, 4LL * core::multiprocessor_count() / std::max<long long>(1, shape.grid_x));
  const dim3 grid(static_cast<unsigned>(shape.grid_x), grid_rows(std::min(row_blocks, wanted)));
  reduce_columns_kernel<In, Code><<<grid, kThreads, 0, stream>>>(a);
  LOWBIT_CUDA_CHECK_LAUNCH();
}

// Zeroes the workspace's status word (not a sticky one) and primes the reduction
// slots: abs and hi at their lowest value (0), lo at its highest (all bits set). A
// row-local quantize with a sticky status launches no memset at all.
void reset_workspace(const WorkspaceLayout& w, cudaStream_t stream) {
  const std::size_t slot_bytes = 2 * static_cast<std::size_t>(w.slots()) * sizeof(unsigned);
  if (!w.status_outside) {
    LOWBIT_CUDA_CHECK(cudaMemsetAsync(w.status, 0, kStatusBytes + slot_bytes, stream));
  } else if (slot_bytes) {
    LOWBIT_CUDA_CHECK(cudaMemsetAsync(w.abs_bits, 0, slot_bytes, stream));
  }
  if (w.count) LOWBIT_CUDA_CHECK(cudaMemsetAsync(w.lo, 0xff, w.slots() * sizeof(unsigned), stream));
}

template <class In, class Code>
void compute_scales_typed(const TensorView& x, const QuantSpec& spec, const QuantizedView& q,
                          const Workspace& workspace, void* status, cudaStream_t stream) {
  const WorkspaceLayout w = workspace_layout(workspace, spec, x.cols(), status);
  reset_workspace(w, stream);
  if (!spans_rows(spec.granularity)) {
    QuantizedView params = q;
    params.codes = TensorView{};
    return encode_row_local<In, Code>(x, spec, params, w.status, stream);
  }
  reduce_columns<In, Code>(x, spec, w, stream);
  const auto blocks = static_cast<unsigned>((w.count + kThreads - 1) / kThreads);
  finalize_columns_kernel<Code><<<blocks, kThreads, 0, stream>>>(w, q.scales.ptr<float>(), q.mins.ptr<float>(),
                                                                   spec.granularity == Granularity::per_tensor);
  LOWBIT_CUDA_CHECK_LAUNCH();
}


}  // namespace

std::size_t quantize_workspace_bytes(const QuantSpec& spec, std::int64_t rows, std::int64_t cols,
                                     bool status_outside) {
  (void)rows;
  return (status_outside ? 0 : kStatusBytes) +
         3 * static_cast<std::size_t>(reduction_slots(spec, cols)) * kReductionCopies * sizeof(unsigned);
}

void compute_scales(const TensorView& x, const QuantSpec& spec, const QuantizedView& out,
                    const Workspace& workspace, void* status, cuda_stream_t stream) {
  visit_float_dtype(x.dtype, "x", [&](auto in) {
    visit_code_scheme(spec.scheme, [&](auto code) {
      compute_scales_typed<decltype(in), decltype(code)>(x, spec, out, workspace, status, stream);
    });
  });
}

void quantize(const TensorView& x, const QuantSpec& spec, const QuantizedView& out, const Workspace& workspace,
              void* status, cuda_stream_t stream) {
  visit_float_dtype(x.dtype, "x", [&](auto in) {
    visit_code_scheme(spec.scheme, [&](auto code) {
      using In = decltype(in);
      using Code = decltype(code);
      if (spans_rows(spec.granularity)) {
        compute_scales_typed<In, Code>(x, spec, out, workspace, status, stream);
        encode_given<In, Code>(x, spec, out, stream);
      } else {
        const WorkspaceLayout w = workspace_layout(workspace, spec, x.cols(), status);
        reset_workspace(w, stream);
        encode_row_local<In, Code>(x, spec, out, w.status, stream);
      }
    });
  });
}

void quantize_with_scales(const TensorView& x, const QuantSpec& spec, const QuantizedView& out,
                          cuda_stream_t stream) {
  visit_float_dtype(x.dtype, "x", [&](auto in) {
    visit_code_scheme(spec.scheme, [&](auto code) {
      encode_given<decltype(in), decltype(code)>(x, spec, out, stream);
    });
  });
}

}  // namespace lowbit::cuda

// GPU encoders of the block formats. A thread owns 8 consecutive values of a row;
// the 2, 4 or 8 consecutive lanes that hold one block of 16, 32 or 64 values reduce
// its absmax with xor-shuffles, and each lane encodes its 8 values with the formats
// codec (src/formats/nf4.h, mxfp4.h, nvfp4.h): the same functions as the CPU
// reference, so the bytes are equal. nvfp4 first reduces the tensor's absmax into
// the workspace (tensor_absmax_kernel), then encodes in stream order.
#include <algorithm>

#include "cuda/block_formats/block_formats_cuda.h"
#include "cuda/block_formats/chunk8.cuh"
#include "core/device.h"
#include "lowbit/cuda_check.h"

namespace lowbit::cuda {
namespace {

using blocks::kThreads;
using blocks::kValues;

struct Shape {
  std::int64_t rows, cols;
  std::int64_t chunks_per_row;  // cols / 8
  std::int64_t chunks;          // rows * chunks_per_row
  std::int64_t chunks_padded;   // rounded up to a whole warp
};

Shape make_shape(std::int64_t rows, std::int64_t cols) {
  const std::int64_t per_row = cols / kValues;
  const std::int64_t chunks = rows * per_row;
  return Shape{rows, cols, per_row, chunks, (chunks + 31) / 32 * 32};
}

unsigned grid_for(const Shape& s) {
  const std::int64_t wanted = (s.chunks_padded + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::max<std::int64_t>(1, std::min<std::int64_t>(wanted, 16LL * core::multiprocessor_count())));
}

// Records the first non-finite value among this thread's 8 (rare path).
__device__ __forceinline__ void report_non_finite(BlockEncodeWorkspace* ws, std::int64_t row, std::int64_t col,
                                                  const float (&v)[kValues]) {
#pragma unroll
  for (int k = 0; k < kValues; ++k) {
    if (!formats::is_finite_bits(formats::abs_bits(v[k]))) {
      const unsigned long long key = (static_cast<unsigned long long>(row) << 32) | static_cast<unsigned long long>(col + k);
      atomicMin(&ws->first_non_finite, key);
      return;
    }
  }
}

__device__ __forceinline__ std::uint32_t max_abs_bits(const float (&v)[kValues]) {
  std::uint32_t m = 0;
#pragma unroll
  for (int k = 0; k < kValues; ++k) m = max(m, formats::abs_bits(v[k]));
  return m;
}

// Pass 1 of nvfp4: max |x| over the tensor (atomicMax on float bits: ordered like
// unsigned integers for non-negative values) and the first NaN/Inf.
template <class In, bool kAligned>
__global__ void __launch_bounds__(kThreads) tensor_absmax_kernel(const In* __restrict__ x, std::int64_t x_stride,
                                                                  Shape shape, BlockEncodeWorkspace* ws) {
  std::uint32_t m = 0;
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t chunk = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; chunk < shape.chunks;
       chunk += step) {
    const std::int64_t row = chunk / shape.chunks_per_row;
    const std::int64_t col = (chunk - row * shape.chunks_per_row) * kValues;
    float v[kValues];
    blocks::load8(x + row * x_stride + col, kAligned, v);
    const std::uint32_t bits = max_abs_bits(v);
    if (!formats::is_finite_bits(bits)) report_non_finite(ws, row, col, v);
    m = max(m, bits);
  }
  m = __reduce_max_sync(0xffffffffu, m);
  if ((threadIdx.x & 31) == 0 && m != 0) atomicMax(&ws->tensor_abs_bits, m);
}

// Every lane of a warp runs the same number of iterations (the loop bound is a
// multiple of 32, and so are the start and the step), so the full-warp shuffles are
// safe; lanes past the end load nothing and store nothing. A block's lanes are
// consecutive and never straddle a row (cols is a multiple of the block size).
template <class In, class Codec, bool kAligned>
__global__ void __launch_bounds__(kThreads) encode_kernel(const In* __restrict__ x, std::int64_t x_stride,
                                                           std::uint8_t* __restrict__ codes, std::int64_t code_stride,
                                                           typename Codec::Scale* __restrict__ scales,
                                                           float* __restrict__ global_out, Shape shape,
                                                           BlockEncodeWorkspace* ws) {
  constexpr int kLanes = Codec::kBlock / kValues;  // 8 (nf4), 4 (mxfp4), 2 (nvfp4)
  const std::int64_t blocks_per_row = shape.cols / Codec::kBlock;
  float global = 0.0f;
  if constexpr (Codec::kHasGlobal) {
    global = formats::nvfp4_global_scale(formats::bits_to_float(ws->tensor_abs_bits));
    if (blockIdx.x == 0 && threadIdx.x == 0) *global_out = global;
  }
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t chunk = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       chunk < shape.chunks_padded; chunk += step) {
    const bool valid = chunk < shape.chunks;
    const std::int64_t row = valid ? chunk / shape.chunks_per_row : 0;
    const std::int64_t col = valid ? (chunk - row * shape.chunks_per_row) * kValues : 0;
    float v[kValues] = {};
    if (valid) blocks::load8(x + row * x_stride + col, kAligned, v);
    std::uint32_t bits = max_abs_bits(v);
    if constexpr (!Codec::kHasGlobal) {
      if (!formats::is_finite_bits(bits)) report_non_finite(ws, row, col, v);
    }
#pragma unroll
    for (int offset = 1; offset < kLanes; offset <<= 1) bits = max(bits, __shfl_xor_sync(0xffffffffu, bits, offset));
    const typename Codec::Scale s = Codec::scale(bits, global);
    const float param = Codec::param(s, global);
    std::uint32_t packed = 0;
#pragma unroll
    for (int k = 0; k < kValues; ++k) packed |= static_cast<std::uint32_t>(Codec::encode(v[k], param)) << (4 * k);
    if (valid) {
      blocks::store_codes(codes + row * code_stride + col / 2, kAligned, packed);
      if ((threadIdx.x & (kLanes - 1)) == 0) scales[row * blocks_per_row + col / Codec::kBlock] = s;
    }
  }
}

}  // namespace

void block_encode(const TensorView& x, BlockFormat format, const BlockQuantizedView& out,
                  const Workspace& workspace, cuda_stream_t stream) {
  const Shape shape = make_shape(x.rows(), x.cols());
  auto* ws = static_cast<BlockEncodeWorkspace*>(workspace.data);
  LOWBIT_CUDA_CHECK(cudaMemsetAsync(&ws->first_non_finite, 0xff, sizeof ws->first_non_finite, stream));
  LOWBIT_CUDA_CHECK(cudaMemsetAsync(&ws->tensor_abs_bits, 0, 2 * sizeof(unsigned int), stream));
  const unsigned grid = grid_for(shape);
  auto run = [&](auto in_tag) {
    using In = decltype(in_tag);
    const In* xp = x.ptr<const In>();
    const bool aligned = blocks::aligned_to(xp, 16) && (x.row_stride() * sizeof(In)) % 16 == 0 &&
                         blocks::aligned_to(out.codes.data, 4) && out.codes.row_stride() % 4 == 0;
    blocks::visit_codec(format, [&](auto codec) {
      using Codec = decltype(codec);
      using Scale = typename Codec::Scale;
      auto* scales = out.scales.ptr<Scale>();
      auto* global = out.global_scale.ptr<float>();
      auto* codes = out.codes.ptr<std::uint8_t>();
      if (aligned) {
        if constexpr (Codec::kHasGlobal) {
          tensor_absmax_kernel<In, true><<<grid, kThreads, 0, stream>>>(xp, x.row_stride(), shape, ws);
          LOWBIT_CUDA_CHECK_LAUNCH();
        }
        encode_kernel<In, Codec, true><<<grid, kThreads, 0, stream>>>(xp, x.row_stride(), codes, out.codes.row_stride(),
                                                                      scales, global, shape, ws);
      } else {
        if constexpr (Codec::kHasGlobal) {
          tensor_absmax_kernel<In, false><<<grid, kThreads, 0, stream>>>(xp, x.row_stride(), shape, ws);
          LOWBIT_CUDA_CHECK_LAUNCH();
        }
        encode_kernel<In, Codec, false><<<grid, kThreads, 0, stream>>>(xp, x.row_stride(), codes,
                                                                       out.codes.row_stride(), scales, global, shape, ws);
      }
      LOWBIT_CUDA_CHECK_LAUNCH();
    });
  };
  switch (x.dtype) {
    case DType::f32: run(float{}); break;
    case DType::f16: run(formats::Half{}); break;
    case DType::bf16: run(formats::BFloat16{}); break;
    default: LOWBIT_FAIL("x: expected dtype f32, f16 or bf16, got ", dtype_name(x.dtype));
  }
}

BlockStatus read_block_status(const Workspace& workspace, cuda_stream_t stream) {
  BlockEncodeWorkspace host{};
  LOWBIT_CUDA_CHECK(cudaMemcpyAsync(&host, workspace.data, sizeof host, cudaMemcpyDeviceToHost, stream));
  LOWBIT_CUDA_CHECK(cudaStreamSynchronize(stream));
  BlockStatus status;
  if (host.first_non_finite != ~0ull) {
    status.non_finite = true;
    status.row = static_cast<std::int64_t>(host.first_non_finite >> 32);
    status.col = static_cast<std::int64_t>(host.first_non_finite & 0xffffffffull);
  }
  return status;
}

}  // namespace lowbit::cuda

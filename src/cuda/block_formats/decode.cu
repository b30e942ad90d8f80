// GPU decoders of the block formats. A thread owns 8 consecutive values of a row:
// one 4-byte load of codes, one scale, and 8 outputs (one 16-byte store of fp16/bf16,
// two of fp32), so a warp's code load is 128 contiguous bytes and its stores cover
// 512 or 1024 contiguous bytes. Values come from the formats codec, bit-exact with
// the CPU reference; NF4 reads its 16 levels from a shared-memory copy of
// formats::nf4_level (the same floats) and scales them with formats::nf4_scale_level.
#include <algorithm>
#include <type_traits>

#include "cuda/block_formats/block_formats_cuda.h"
#include "cuda/block_formats/chunk8.cuh"
#include "core/device.h"
#include "lowbit/cuda_check.h"

namespace lowbit::cuda {
namespace {

using blocks::kThreads;
using blocks::kValues;

template <class Out, class Codec, bool kAligned>
__global__ void __launch_bounds__(kThreads) decode_kernel(const std::uint8_t* __restrict__ codes, std::int64_t code_stride,
                                                           const typename Codec::Scale* __restrict__ scales,
                                                           const float* __restrict__ global_in, Out* __restrict__ out,
                                                           std::int64_t out_stride, std::int64_t rows, std::int64_t cols) {
  constexpr bool kNf4 = std::is_same_v<Codec, formats::Nf4Codec>;
  __shared__ float levels[formats::kNf4Levels];
  if constexpr (kNf4) {
    // Constant indices after unrolling: the table folds into immediates (a dynamic
    // index would put nf4_level's array in local memory).
    if (threadIdx.x == 0) {
#pragma unroll
      for (int i = 0; i < formats::kNf4Levels; ++i) levels[i] = formats::nf4_level(i);
    }
    __syncthreads();
  }
  const float global = Codec::kHasGlobal ? *global_in : 0.0f;
  const std::int64_t per_row = cols / kValues;
  const std::int64_t chunks = rows * per_row;
  const std::int64_t blocks_per_row = cols / Codec::kBlock;
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t chunk = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; chunk < chunks;
       chunk += step) {
    const std::int64_t row = chunk / per_row;
    const std::int64_t col = (chunk - row * per_row) * kValues;
    const std::uint32_t packed = blocks::load_codes(codes + row * code_stride + col / 2, kAligned);
    const typename Codec::Scale s = scales[row * blocks_per_row + col / Codec::kBlock];
    float v[kValues];
#pragma unroll
    for (int k = 0; k < kValues; ++k) {
      const unsigned code = (packed >> (4 * k)) & 15u;
      if constexpr (kNf4) {
        v[k] = formats::nf4_scale_level(levels[code], s);
      } else {
        v[k] = Codec::decode(code, s, global);
      }
    }
    blocks::store8(out + row * out_stride + col, kAligned, v);
  }
}

}  // namespace

void block_decode(const BlockQuantizedView& in, BlockFormat format, const TensorView& out, cuda_stream_t stream) {
  const std::int64_t rows = out.rows(), cols = out.cols();
  const std::int64_t chunks = rows * (cols / kValues);
  const auto grid = static_cast<unsigned>(
      std::max<std::int64_t>(1, std::min<std::int64_t>((chunks + kThreads - 1) / kThreads, 16LL * core::multiprocessor_count())));
  auto run = [&](auto out_tag) {
    using Out = decltype(out_tag);
    Out* op = out.ptr<Out>();
    const bool aligned = blocks::aligned_to(op, 16) && (out.row_stride() * sizeof(Out)) % 16 == 0 &&
                         blocks::aligned_to(in.codes.data, 4) && in.codes.row_stride() % 4 == 0;
    blocks::visit_codec(format, [&](auto codec) {
      using Codec = decltype(codec);
      using Scale = typename Codec::Scale;
      const auto* scales = in.scales.ptr<const Scale>();
      const auto* global = in.global_scale.ptr<const float>();
      const auto* codes = in.codes.ptr<const std::uint8_t>();
      if (aligned) {
        decode_kernel<Out, Codec, true><<<grid, kThreads, 0, stream>>>(codes, in.codes.row_stride(), scales, global, op,
                                                                      out.row_stride(), rows, cols);
      } else {
        decode_kernel<Out, Codec, false><<<grid, kThreads, 0, stream>>>(codes, in.codes.row_stride(), scales, global, op,
                                                                       out.row_stride(), rows, cols);
      }
      LOWBIT_CUDA_CHECK_LAUNCH();
    });
  };
  switch (out.dtype) {
    case DType::f32: run(float{}); break;
    case DType::f16: run(formats::Half{}); break;
    case DType::bf16: run(formats::BFloat16{}); break;
    default: LOWBIT_FAIL("out: expected dtype f32, f16 or bf16, got ", dtype_name(out.dtype));
  }
}

}  // namespace lowbit::cuda

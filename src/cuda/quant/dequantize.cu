// Dequantization on the GPU: one pass over the codes. A thread owns one 16-byte output
// vector (4 fp32 / 8 fp16 values, tile.cuh) of kDecodeRows rows, so each warp store
// covers 512 contiguous bytes.
#include "core/dtype_dispatch.h"
#include "cuda/quant/quant_cuda.h"
#include "cuda/quant/tile.cuh"
#include "formats/code_scheme.h"
#include "lowbit/cuda_check.h"

namespace lowbit::cuda {
namespace {

constexpr int kDecodeRows = 4;

struct DecodeArgs {
  const void* codes;
  long long ldq;
  void* out;
  long long ldo;
  long long rows, cols;
  const float* scales;
  const float* mins;
  bool row_local;          // per_token / per_group
  bool per_tensor;
  long long segment_width;
  long long scale_cols;
  bool vector_ok;
  int cx_log2, cy;
};

template <class Out, class Code>
__global__ void __launch_bounds__(kThreads) decode_tile_kernel(const DecodeArgs a) {
  constexpr int kN = kValuesPerVector<Out>;  // values per thread chunk: one 16-byte store
  const int tx = threadIdx.x & ((1 << a.cx_log2) - 1);
  const int ty = threadIdx.x >> a.cx_log2;
  const long long c0 = ((static_cast<long long>(blockIdx.x) << a.cx_log2) + tx) * kN;
  const int valid = c0 < a.cols ? static_cast<int>(min(static_cast<long long>(kN), a.cols - c0)) : 0;
  Out* out = static_cast<Out*>(a.out);

  float scale[kN], lo[kN];
  if (!a.row_local) {
#pragma unroll
    for (int k = 0; k < kN; ++k) {
      const long long index = a.per_tensor ? 0 : c0 + k;
      scale[k] = k < valid ? a.scales[index] : 0.0f;
      lo[k] = (Code::kAsymmetric && k < valid) ? a.mins[index] : 0.0f;
    }
  }
  const long long rows_per_tile = static_cast<long long>(a.cy) * kDecodeRows;
  for (long long tile = blockIdx.y; tile * rows_per_tile < a.rows; tile += gridDim.y) {
    int code[kDecodeRows][kN];
#pragma unroll
    for (int i = 0; i < kDecodeRows; ++i) {
      const long long r = tile * rows_per_tile + i * a.cy + ty;
      const int n = r < a.rows ? valid : 0;
      const char* q_row = static_cast<const char*>(a.codes) + (n ? r * a.ldq : 0);
      if constexpr (Code::kBits == 4) {
        load_int4_codes(reinterpret_cast<const std::uint8_t*>(q_row) + (n ? c0 / 2 : 0), n, a.vector_ok, code[i]);
      } else {
        load_int8_codes(reinterpret_cast<const std::int8_t*>(q_row) + (n ? c0 : 0), n, a.vector_ok, code[i]);
      }
    }
#pragma unroll
    for (int i = 0; i < kDecodeRows; ++i) {
      const long long r = tile * rows_per_tile + i * a.cy + ty;
      const int n = r < a.rows ? valid : 0;
      if (!n) continue;
      if (a.row_local) {
        const long long index = r * a.scale_cols + c0 / a.segment_width;
        const float s = a.scales[index];
        const float m = Code::kAsymmetric ? a.mins[index] : 0.0f;
#pragma unroll
        for (int k = 0; k < kN; ++k) scale[k] = s, lo[k] = m;
      }
      float v[kN];
#pragma unroll
      for (int k = 0; k < kN; ++k) {
        v[k] = Code::decode(Code::from_storage(static_cast<unsigned>(code[i][k])), scale[k], lo[k]);
      }
      store_values(out + r * a.ldo + c0, n, a.vector_ok, v);
    }
  }
}

}  // namespace

void dequantize(const QuantizedView& in, const QuantSpec& spec, const TensorView& out, cuda_stream_t stream) {
  visit_float_dtype(out.dtype, "out", [&](auto out_tag) {
    visit_code_scheme(spec.scheme, [&](auto code) {
      using Out = decltype(out_tag);
      using Code = decltype(code);
      constexpr int kN = kValuesPerVector<Out>;
      const TileShape shape = tile_shape(out.cols(), kN);
      DecodeArgs a{};
      a.codes = in.codes.data;
      a.ldq = in.codes.row_stride();
      a.out = out.data;
      a.ldo = out.row_stride();
      a.rows = out.rows();
      a.cols = out.cols();
      a.scales = in.scales.ptr<const float>();
      a.mins = in.mins.ptr<const float>();
      a.row_local = !spans_rows(spec.granularity);
      a.per_tensor = spec.granularity == Granularity::per_tensor;
      a.segment_width = segment_width(spec, out.cols());
      a.scale_cols = quant_layout(spec, out.rows(), out.cols()).scale_cols;
      const std::size_t code_bytes = Code::kBits == 4 ? kN / 2 : kN;  // codes of one chunk
      a.vector_ok = aligned(out.data, 16) && (out.row_stride() * sizeof(Out)) % 16 == 0 &&
                    aligned(in.codes.data, code_bytes) && static_cast<std::size_t>(in.codes.row_stride()) % code_bytes == 0;
      a.cx_log2 = shape.cx_log2;
      a.cy = shape.cy;
      const long long tiles = (out.rows() + static_cast<long long>(shape.cy) * kDecodeRows - 1) /
                              (static_cast<long long>(shape.cy) * kDecodeRows);
      const dim3 grid(static_cast<unsigned>(shape.grid_x), grid_rows(tiles));
      decode_tile_kernel<Out, Code><<<grid, kThreads, 0, stream>>>(a);
      LOWBIT_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace lowbit::cuda

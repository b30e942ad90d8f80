// cuda::weight_only_gemm: turns the validated views into the kernels' raw arguments
// and picks the kernel: for M <= 16 (decode) the small-matrix kernel where it takes
// the shape, else the weight-streaming kernel; the tiled tensor-core kernel above.
#include <cstdint>

#include "cuda/gemm/gemm_cuda.h"
#include "cuda/weight_only/launch.cuh"
#include "formats/weight_pack.h"

namespace lowbit::cuda {

void weight_only_gemm(const TensorView& x, const PackedWeights& w, const TensorView& bias, const TensorView& out,
                      cuda_stream_t stream) {
  const formats::WeightPackLayout layout =
      formats::make_weight_pack_layout(w.spec.bits, w.spec.zero_point, w.spec.group_size, w.n, w.k);
  weight_only::Params p;
  p.x = x.data;
  p.ldx = x.strides[0];
  p.x_vec16 = reinterpret_cast<std::uintptr_t>(x.data) % 16 == 0 && p.ldx % 8 == 0;
  p.codes = w.codes.ptr<const std::uint8_t>();
  p.scales = w.scales.ptr<const std::uint16_t>();
  p.mins = layout.zero_point ? w.mins.ptr<const std::uint16_t>() : nullptr;
  p.bias = bias.data ? bias.ptr<const std::uint16_t>() : nullptr;
  p.bias_stride = bias.data ? bias.strides[bias.rank - 1] : 0;
  p.out = out.data;
  p.ldo = out.strides[0];
  p.m = x.rows();
  p.n = w.n;
  p.k = w.k;
  p.n_tiles = layout.n_tiles;
  p.k_steps = layout.k_steps;
  p.groups = layout.groups;
  p.group_shift = layout.group_shift;
  p.groups_per_step = layout.groups_per_step;
  const weight_only::Form form = layout.bits == 8      ? weight_only::Form::int8
                                 : layout.zero_point ? weight_only::Form::q4_zero_point
                                                     : weight_only::Form::q4_symmetric;
  const bool bf16 = w.spec.act_dtype == DType::bf16;
  if (p.m == 0) return;
  if (weight_only::small_gemv_takes(p, form)) {
    weight_only::launch_small_gemv(p, bf16, form, stream);
  } else if (p.m <= weight_only::kGemvMaxRows) {
    weight_only::launch_gemv(p, bf16, form, stream);
  } else {
    weight_only::launch_mma(p, bf16, form, stream);
  }
}

}  // namespace lowbit::cuda

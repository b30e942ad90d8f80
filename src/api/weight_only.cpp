// weight_only_gemm and pack_weights: validation at the boundary, then dispatch by device.
#include "lowbit/weight_only.h"

#include <cstdint>

#include "core/validate.h"
#include "cpu/weight_only.h"
#include "lowbit/error.h"

#if LOWBIT_WITH_CUDA
#include "cuda/weight_only/weight_only_cuda.h"
#endif

namespace lowbit {

using core::check_device_data;
using core::check_dim;
using core::check_dtype;
using core::check_matrix;
using core::check_same_device;

namespace {

void check_weight_spec(const WeightOnlySpec& spec, std::int64_t k) {
  if (spec.blocks != WeightBlocks::none) return;  // a block form: checked_weight_layout names what is wrong
  LOWBIT_CHECK(spec.bits == 4 || spec.bits == 8, "spec.bits: expected 4 or 8, got ", spec.bits);
  LOWBIT_CHECK(spec.group_size == 32 || spec.group_size == 64 || spec.group_size == 128 || spec.group_size == k,
               "spec.group_size: expected 32, 64, 128 or K (", k, ", one group per output channel), got ",
               spec.group_size);
  LOWBIT_CHECK(spec.bits == 4 || !spec.zero_point, "spec.zero_point: only 4-bit weights take a zero point");
  LOWBIT_CHECK(spec.act_dtype == DType::f16 || spec.act_dtype == DType::bf16,
               "spec.act_dtype: expected f16 or bf16, got ", dtype_name(spec.act_dtype));
}

void check_contiguous(const TensorView& view, const char* what, DType dtype, std::int64_t count, Device device) {
  core::check_vector(view, what, dtype, count);
  core::check_same_device(device, view, what);
  if (device == Device::cuda) core::check_device_data(view, what);
}

void check_packed(const PackedWeights& w, Device device) {
  check_dim(w.n, "w.n");
  check_dim(w.k, "w.k");
  check_weight_spec(w.spec, w.k);
  const PackedWeightSizes sizes = packed_weight_sizes(w.spec, w.n, w.k);
  check_contiguous(w.codes, "w.codes", DType::u8, sizes.code_bytes, device);
  if (w.spec.blocks != WeightBlocks::none) {
    LOWBIT_CHECK(w.scales.data == nullptr && w.mins.data == nullptr, "w.scales, w.mins: ",
                 weight_blocks_name(w.spec.blocks), " weights keep their scales in the codes; pass empty views");
    return;
  }
  check_contiguous(w.scales, "w.scales", w.spec.act_dtype, sizes.scale_count, device);
  if (w.spec.zero_point) {
    check_contiguous(w.mins, "w.mins", w.spec.act_dtype, sizes.min_count, device);
  } else {
    LOWBIT_CHECK(w.mins.data == nullptr, "w.mins: only zero-point weights have mins; pass an empty view");
  }
}

}  // namespace

void pack_weights(const TensorView& codes, const TensorView& scales, const TensorView& mins,
                  const PackedWeights& out) {
  check_dim(out.n, "out.n");
  check_dim(out.k, "out.k");
  LOWBIT_CHECK(out.spec.blocks == WeightBlocks::none, "out.spec.blocks: ", weight_blocks_name(out.spec.blocks),
               " weights are packed from their GGUF blocks (engine::repack_ggml_weights), not from codes and scales");
  check_weight_spec(out.spec, out.k);
  const std::int64_t n = out.n, k = out.k;
  LOWBIT_CHECK(codes.device == Device::cpu, "codes: pack_weights runs on the host; got a ", device_name(codes.device),
               " view");
  if (out.spec.bits == 8) {
    check_dtype(codes, "codes", DType::i8);
    check_matrix(codes, "codes", n, k);
  } else {
    check_dtype(codes, "codes", DType::u8);
    check_matrix(codes, "codes", n, (k + 1) / 2);
  }
  const std::int64_t groups = n * ((k + out.spec.group_size - 1) / out.spec.group_size);
  check_contiguous(scales, "scales", DType::f32, groups, Device::cpu);
  if (out.spec.zero_point) {
    check_contiguous(mins, "mins", DType::f32, groups, Device::cpu);
  } else {
    LOWBIT_CHECK(mins.data == nullptr, "mins: only zero-point weights have mins; pass an empty view");
  }
  check_packed(out, Device::cpu);
  core::check_no_aliasing({{out.codes, "out.codes"}, {out.scales, "out.scales"}, {out.mins, "out.mins"}},
                          {{codes, "codes"}, {scales, "scales"}, {mins, "mins"}});
  cpu::pack_weights(codes, scales, mins, out);
}

void weight_only_gemm(const TensorView& x, const PackedWeights& w, const TensorView& bias, const TensorView& out,
                      cuda_stream_t stream) {
  LOWBIT_CHECK(x.rank == 2, "x: expected a rank-2 tensor [M, K], got rank ", x.rank);
  const Device device = x.device;
  check_packed(w, device);
  const std::int64_t m = x.shape[0];
  check_dim(m, "M");
  check_dtype(x, "x", w.spec.act_dtype);
  LOWBIT_CHECK(x.shape[1] == w.k, "x: has ", x.shape[1], " columns but the weights have K = ", w.k);
  check_matrix(x, "x", m, w.k);
  check_dtype(out, "out", w.spec.act_dtype);
  check_matrix(out, "out", m, w.n);
  check_same_device(device, out, "out");
  if (bias.data) check_contiguous(bias, "bias", w.spec.act_dtype, w.n, device);
  core::check_no_aliasing({{out, "out"}},
                          {{x, "x"}, {w.codes, "w.codes"}, {w.scales, "w.scales"}, {w.mins, "w.mins"}, {bias, "bias"}});
  if (device == Device::cpu) return cpu::weight_only_gemm(x, w, bias, out);
#if LOWBIT_WITH_CUDA
  check_device_data(x, "x");
  check_device_data(out, "out");
  cuda::weight_only::weight_only_gemm(x, w, bias, out, stream);
#else
  (void)stream;
  core::fail_no_cuda("weight_only_gemm");
#endif
}

}  // namespace lowbit

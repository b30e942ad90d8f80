// int8_gemm and int4_gemm: validation at the boundary, then dispatch by device.
#include "lowbit/gemm.h"

#include <cmath>
#include <cstdint>
#include <limits>

#include "core/validate.h"
#include "cpu/gemm.h"
#include "lowbit/error.h"

#if LOWBIT_WITH_CUDA
#include "cuda/gemm/gemm_cuda.h"
#endif

namespace lowbit {


namespace {

using core::check_device_data;
using core::check_dtype;
using core::check_matrix;
using core::check_dim;
using core::check_same_device;

void check_layout(BLayout layout) {
  LOWBIT_CHECK(layout == BLayout::k_by_n || layout == BLayout::n_by_k, "b_layout: unknown value ",
               static_cast<int>(layout));
}

// An optional f32 vector of 1 or `per` elements (scale_a / scale_b), or exactly `per` (bias).
void check_epilogue_vector(const TensorView& view, const char* what, std::int64_t per, bool allow_scalar,
                           Device device) {
  if (!view.data) {
    LOWBIT_CHECK(view.numel() == 0 || view.rank == 0, what, ": data pointer is null but the view has ",
                 view.numel(), " elements (pass an empty view for none)");
    return;
  }
  check_dtype(view, what, DType::f32);
  LOWBIT_CHECK(view.numel() == per || (allow_scalar && view.numel() == 1), what, ": expected ",
               allow_scalar ? "1 or " : "", per, " elements, got ", view.numel(), " (", view.describe(), ")");
  LOWBIT_CHECK(view.is_contiguous(), what, ": expected a contiguous tensor, got ", view.describe());
  check_same_device(device, view, what);
  check_device_data(view.device == Device::cuda ? view : TensorView{}, what);
}

void check_epilogue(const GemmEpilogue& e, const TensorView& out, std::int64_t m, std::int64_t n) {
  if (out.dtype == DType::i32) {
    LOWBIT_CHECK(e.is_identity(), "epilogue: an i32 output takes no scales, bias or relu; ask for an f32, f16 or "
                                  "bf16 output to apply them");
    return;
  }
  LOWBIT_CHECK(std::isfinite(e.scale_c), "epilogue.scale_c: expected a finite value, got ", e.scale_c);
  check_epilogue_vector(e.scale_a, "epilogue.scale_a", m, true, out.device);
  check_epilogue_vector(e.scale_b, "epilogue.scale_b", n, true, out.device);
  check_epilogue_vector(e.bias, "epilogue.bias", n, false, out.device);
}

struct IntShape {
  std::int64_t m, n, k;
};

// A, B, out and the epilogue of an integer GEMM whose operands hold `a_cols` / `b_k`
// storage columns along K (K for int8, ceil(K/2) for packed int4).
IntShape check_int_gemm(const TensorView& a, const TensorView& b, BLayout b_layout, const TensorView& out,
                        const GemmEpilogue& epilogue, std::int64_t k, std::int64_t k_storage, DType operand) {
  check_layout(b_layout);
  LOWBIT_CHECK(a.rank == 2, "a: expected a rank-2 tensor [M, K], got rank ", a.rank);
  LOWBIT_CHECK(out.rank == 2, "out: expected a rank-2 tensor [M, N], got rank ", out.rank);
  LOWBIT_CHECK(b.rank == 2, "b: expected a rank-2 tensor, got rank ", b.rank);
  const std::int64_t m = a.shape[0];
  const std::int64_t n = out.shape[1];
  check_dim(m, "M");
  check_dim(n, "N");
  check_dim(k, "K");
  check_dtype(a, "a", operand);
  check_dtype(b, "b", operand);
  check_matrix(a, "a", m, k_storage);
  if (b_layout == BLayout::k_by_n) {
    LOWBIT_CHECK(b.shape[0] == k_storage, "b: k_by_n layout needs ", k_storage, " rows (K = ", k,
                 "), got ", b.shape[0], " (a is ", a.describe(), ", b is ", b.describe(), ")");
    check_matrix(b, "b", k_storage, n);
  } else {
    LOWBIT_CHECK(b.shape[1] == k_storage, "b: n_by_k layout needs ", k_storage, " columns (K = ", k,
                 "), got ", b.shape[1], " (a is ", a.describe(), ", b is ", b.describe(), ")");
    check_matrix(b, "b", n, k_storage);
  }
  LOWBIT_CHECK(out.dtype == DType::i32 || core::is_float_dtype(out.dtype),
               "out: expected dtype i32, f32, f16 or bf16, got ", dtype_name(out.dtype));
  check_matrix(out, "out", m, n);
  check_same_device(a.device, b, "b");
  check_same_device(a.device, out, "out");
  check_epilogue(epilogue, out, m, n);
  core::check_no_aliasing({{out, "out"}}, {{a, "a"},
                                           {b, "b"},
                                           {epilogue.scale_a, "epilogue.scale_a"},
                                           {epilogue.scale_b, "epilogue.scale_b"},
                                           {epilogue.bias, "epilogue.bias"}});
  if (a.device == Device::cuda) {
    check_device_data(a, "a");
    check_device_data(b, "b");
    check_device_data(out, "out");
  }
  return IntShape{m, n, k};
}

#if LOWBIT_WITH_CUDA
cuda::IntGemmArgs int_gemm_args(const TensorView& a, const TensorView& b, BLayout b_layout, const TensorView& out,
                                const GemmEpilogue& e, const IntShape& s) {
  cuda::IntGemmArgs args;
  args.a = a.data;
  args.lda = a.row_stride();
  args.b = b.data;
  args.ldb = b.row_stride();
  args.b_layout = b_layout;
  args.out = out.data;
  args.ldc = out.row_stride();
  args.out_dtype = out.dtype;
  args.m = s.m;
  args.n = s.n;
  args.k = s.k;
  args.scale_a = e.scale_a.ptr<const float>();
  args.scale_a_per_row = e.scale_a.data && e.scale_a.numel() == s.m && s.m > 1;
  args.scale_b = e.scale_b.ptr<const float>();
  args.scale_b_per_col = e.scale_b.data && e.scale_b.numel() == s.n && s.n > 1;
  args.scale_c = e.scale_c;
  args.bias = e.bias.ptr<const float>();
  args.relu = e.relu;
  return args;
}
#endif

}  // namespace

void int8_gemm(const TensorView& a, const TensorView& b, BLayout b_layout, const TensorView& out,
               const GemmEpilogue& epilogue, cuda_stream_t stream) {
  LOWBIT_CHECK(a.rank == 2, "a: expected a rank-2 tensor [M, K], got rank ", a.rank);
  const std::int64_t k = a.shape[1];
  // |a*b| <= 2^14, so K < 2^17 products cannot overflow the INT32 accumulator.
  LOWBIT_CHECK(k < (std::int64_t{1} << 17), "K: ", k, " is too large for exact INT32 accumulation of int8 "
               "products (at most 131071)");
  const IntShape s = check_int_gemm(a, b, b_layout, out, epilogue, k, k, DType::i8);
  if (a.device == Device::cpu) return cpu::int8_gemm(a, b, b_layout, out, epilogue);
#if LOWBIT_WITH_CUDA
  cuda::int8_gemm(int_gemm_args(a, b, b_layout, out, epilogue, s), stream);
#else
  (void)s, (void)stream;
  core::fail_no_cuda("int8_gemm");
#endif
}

void int4_gemm(const TensorView& a_packed, const TensorView& b_packed, BLayout b_layout, std::int64_t k,
               const TensorView& out, const GemmEpilogue& epilogue, cuda_stream_t stream) {
  check_dim(k, "K");
  // |a*b| <= 64: K < 2^25 cannot overflow INT32.
  LOWBIT_CHECK(k < (std::int64_t{1} << 25), "K: ", k, " is too large for exact INT32 accumulation of int4 "
               "products (at most 33554431)");
  const IntShape s = check_int_gemm(a_packed, b_packed, b_layout, out, epilogue, k, (k + 1) / 2, DType::u8);
  if (a_packed.device == Device::cpu) return cpu::int4_gemm(a_packed, b_packed, b_layout, k, out, epilogue);
#if LOWBIT_WITH_CUDA
  cuda::int4_gemm(int_gemm_args(a_packed, b_packed, b_layout, out, epilogue, s), stream);
#else
  (void)s, (void)stream;
  core::fail_no_cuda("int4_gemm");
#endif
}

}  // namespace lowbit

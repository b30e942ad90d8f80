// The weight-only GEMM's GPU test cases, shared by the suites of its kernels
// (weight_only_gpu_test.cpp, weight_only_wgmma_gpu_test.cpp): random packed weights
// uploaded with their dequantized values, and one product on poisoned, guarded
// buffers checked against the CPU reference.
//
// Tolerance. Both sides use the same dequantized weights (bit for bit, by
// definition) and exact products; they differ only in the order and precision of
// the sum (GPU: FP32 in mma order and split-K order; CPU: FP64). The FP32 sum of K
// terms is within (K + 8) * 2^-24 * sum_k |x_k w_k| of the exact one (recursive
// summation bound, plus the bias), and the final rounding to the act dtype can then
// land one code away, so:
//   |gpu - cpu| <= 2 ulp_act(|cpu|) + (K + 8) * 2^-24 * (sum_k |x_k w_k| + |bias|).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "common/gpu.h"
#include "common/poison.h"
#include "common/random.h"
#include "core/device_buffer.h"
#include "cpu/weight_only.h"
#include "cuda/weight_only/weight_only_cuda.h"
#include "formats/float16.h"
#include "formats/weight_pack.h"
#include "lowbit/cuda_check.h"
#include "lowbit/weight_only.h"

namespace lowbit::test {

namespace wo = cuda::weight_only;

// out = x W^T through `variant` where it takes the arguments, else the production choice.
inline void gemm_with(const TensorView& x, const PackedWeights& w, const TensorView& bias, const TensorView& out,
                      const wo::Variant* variant) {
  const wo::Params p = wo::make_params(x, w, bias, out);
  const wo::Form form = wo::form_of(w.spec);
  wo::launch(p, w.spec.act_dtype, form, variant && wo::takes(*variant, p, form) ? *variant : wo::pick(p, form),
             nullptr);
}

using formats::BFloat16;
using formats::Half;

inline double act_value(DType dtype, std::uint16_t bits) {
  return dtype == DType::f16 ? formats::to_float(Half{bits}) : formats::to_float(BFloat16{bits});
}
inline std::uint16_t to_act_bits(DType dtype, float value) {
  return dtype == DType::f16 ? formats::from_float<Half>(value).bits : formats::from_float<BFloat16>(value).bits;
}
inline double ulp_at(DType dtype, double value) {
  const int e = std::max(std::ilogb(std::max(std::fabs(value), 1e-30)), dtype == DType::f16 ? -14 : -126);
  return std::ldexp(1.0, e - (dtype == DType::f16 ? 10 : 7));
}

// A packed weight on the host, its device copy, and its dequantized values.
struct DeviceWeights {
  std::vector<std::uint8_t> codes;
  std::vector<std::uint16_t> scales, mins;
  PackedWeights host, device;
  core::DeviceBuffer d_codes, d_scales, d_mins;
  std::vector<double> w;  // [N x K] dequantized
  // GGML block forms: [N x K] ggml's exact (real) value and |s q| + |m| (the terms the
  // sub-block decode sums in FP32 before subtracting), empty otherwise.
  std::vector<double> exact, spread;
};

inline void make_weights(Rng& rng, const WeightOnlySpec& spec, std::int64_t n, std::int64_t k, DeviceWeights& out) {
  const std::int64_t groups = (k + spec.group_size - 1) / spec.group_size;
  const std::int64_t code_cols = spec.bits == 4 ? (k + 1) / 2 : k;
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(-0.05f, 0.05f), min(-0.5f, 0.5f);
  std::vector<std::uint8_t> codes(static_cast<std::size_t>(n * code_cols));
  for (auto& b : codes) b = static_cast<std::uint8_t>(byte(rng));
  std::vector<float> scales(static_cast<std::size_t>(n * groups)), mins;
  for (auto& s : scales) s = scale(rng);
  const bool zp = spec.bits == 4 && spec.zero_point;
  if (zp) {
    mins.resize(scales.size());
    for (auto& m : mins) m = min(rng);
  }
  const PackedWeightSizes sizes = packed_weight_sizes(spec, n, k);
  out.codes.assign(static_cast<std::size_t>(sizes.code_bytes), 0);
  out.scales.assign(static_cast<std::size_t>(sizes.scale_count), 0);
  out.mins.assign(static_cast<std::size_t>(sizes.min_count), 0);
  out.host = PackedWeights{spec, n, k, TensorView::vector(out.codes.data(), DType::u8, Device::cpu, sizes.code_bytes),
                           TensorView::vector(out.scales.data(), spec.act_dtype, Device::cpu, sizes.scale_count),
                           zp ? TensorView::vector(out.mins.data(), spec.act_dtype, Device::cpu, sizes.min_count)
                              : TensorView{}};
  cpu::pack_weights(TensorView::matrix(codes.data(), spec.bits == 4 ? DType::u8 : DType::i8, Device::cpu, n, code_cols),
                    TensorView::matrix(scales.data(), DType::f32, Device::cpu, n, groups),
                    zp ? TensorView::matrix(mins.data(), DType::f32, Device::cpu, n, groups) : TensorView{}, out.host);
  out.d_codes = core::DeviceBuffer(out.codes.size());
  out.d_scales = core::DeviceBuffer(out.scales.size() * 2);
  LOWBIT_CUDA_CHECK(cudaMemcpy(out.d_codes.data(), out.codes.data(), out.codes.size(), cudaMemcpyHostToDevice));
  LOWBIT_CUDA_CHECK(cudaMemcpy(out.d_scales.data(), out.scales.data(), out.scales.size() * 2, cudaMemcpyHostToDevice));
  out.device = out.host;
  out.device.codes = TensorView::vector(out.d_codes.data(), DType::u8, Device::cuda, sizes.code_bytes);
  out.device.scales = TensorView::vector(out.d_scales.data(), spec.act_dtype, Device::cuda, sizes.scale_count);
  if (zp) {
    out.d_mins = core::DeviceBuffer(out.mins.size() * 2);
    LOWBIT_CUDA_CHECK(cudaMemcpy(out.d_mins.data(), out.mins.data(), out.mins.size() * 2, cudaMemcpyHostToDevice));
    out.device.mins = TensorView::vector(out.d_mins.data(), spec.act_dtype, Device::cuda, sizes.min_count);
  }
  // Dequantized weights through the layout's accessors (for the error bound).
  const formats::WeightPackLayout layout = formats::make_weight_pack_layout(spec.bits, spec.zero_point,
                                                                            spec.group_size, n, k);
  out.w.resize(static_cast<std::size_t>(n * k));
  for (std::int64_t r = 0; r < n; ++r) {
    for (std::int64_t c = 0; c < k; ++c) {
      const formats::WeightPackLayout::CodePlace place = layout.code_place(r, c);
      const int stored = (out.codes[place.byte] >> place.shift) & (spec.bits == 8 ? 0xff : 0xf);
      const int q = formats::weight_code_value(layout, stored);
      const std::int64_t s = layout.scale_index(r, layout.group_of(c));
      const double sv = act_value(spec.act_dtype, out.scales[s]);
      const double mv = zp ? act_value(spec.act_dtype, out.mins[s]) : 0.0;
      out.w[r * k + c] = act_value(spec.act_dtype, to_act_bits(spec.act_dtype, static_cast<float>(q * sv + mv)));
    }
  }
}

// How run_case calls the GPU: `variant` where it takes the arguments, else the
// production choice; `variant` or fail; or the public lowbit::weight_only_gemm.
enum class Entry { variant_or_pick, variant_only, public_api };

inline void run_case(Rng& rng, const WeightOnlySpec& spec, const DeviceWeights& w, std::int64_t m, bool with_bias,
                     bool aligned_rows, const wo::Variant* variant = nullptr, Entry entry = Entry::variant_or_pick) {
  const std::int64_t n = w.host.n, k = w.host.k;
  const DType dt = spec.act_dtype;
  SCOPED_TRACE(testing::Message() << "bits " << spec.bits << " zero_point " << spec.zero_point << " group "
                                  << spec.group_size << " " << dtype_name(dt) << " M " << m << " N " << n << " K " << k
                                  << " bias " << with_bias << " aligned rows " << aligned_rows);
  // Aligned: rows of both 16-byte multiples (TMA's loads and stores take them), the output's
  // with 8 to 15 padding columns that must stay unwritten.
  const std::int64_t ldx = aligned_rows ? (k + 7) / 8 * 8 : k + 1, ldo = aligned_rows ? (n + 7) / 8 * 8 + 8 : n + 3;
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  std::vector<std::uint16_t> x(static_cast<std::size_t>(m * ldx)), bias(static_cast<std::size_t>(n));
  for (auto& v : x) v = to_act_bits(dt, value(rng));
  for (auto& v : bias) v = to_act_bits(dt, value(rng));

  GuardedBuffer d_x(x.size() * 2, aligned_rows ? 0 : 2), d_bias(bias.size() * 2), d_out(m * ldo * 2);
  d_x.poison(kFloatPoison);
  d_x.upload(x.data(), x.size() * 2);
  d_bias.poison(kFloatPoison);
  d_bias.upload(bias.data(), bias.size() * 2);
  d_out.poison(kFloatPoison);
  const TensorView xv = TensorView::matrix(d_x.data(), dt, Device::cuda, m, k, ldx);
  const TensorView bv = with_bias ? TensorView::vector(d_bias.data(), dt, Device::cuda, n) : TensorView{};
  const TensorView ov = TensorView::matrix(d_out.data(), dt, Device::cuda, m, n, ldo);
  if (entry == Entry::public_api) {
    weight_only_gemm(xv, w.device, bv, ov, nullptr);
  } else if (entry == Entry::variant_only) {
    const wo::Params p = wo::make_params(xv, w.device, bv, ov);
    ASSERT_TRUE(variant && wo::takes(*variant, p, wo::form_of(spec))) << "the variant does not take these arguments";
    wo::launch(p, spec.act_dtype, wo::form_of(spec), *variant, nullptr);
  } else {
    gemm_with(xv, w.device, bv, ov, variant);
  }
  LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<std::uint16_t> got = download<std::uint16_t>(d_out.data(), static_cast<std::size_t>(m * ldo));
  EXPECT_TRUE(d_out.guards_intact("out"));
  EXPECT_TRUE(d_x.guards_intact("x"));

  std::vector<std::uint16_t> want(static_cast<std::size_t>(m * ldo), 0xffff);
  cpu::weight_only_gemm(TensorView::matrix(x.data(), dt, Device::cpu, m, k, ldx), w.host,
                        with_bias ? TensorView::vector(bias.data(), dt, Device::cpu, n) : TensorView{},
                        TensorView::matrix(want.data(), dt, Device::cpu, m, n, ldo));
  int failures = 0;
  for (std::int64_t r = 0; r < m && failures < 5; ++r) {
    for (std::int64_t c = 0; c < ldo && failures < 5; ++c) {
      const std::uint16_t g = got[r * ldo + c];
      if (c >= n) {  // row padding: never written
        if (g != 0xffff) ++failures, ADD_FAILURE() << "wrote row padding at row " << r << " col " << c;
        continue;
      }
      double magnitude = with_bias ? std::fabs(act_value(dt, bias[c])) : 0.0;
      double rounding = 0.0;  // block forms: what the CPU reference's f16 weights add
      for (std::int64_t i = 0; i < k; ++i) {
        const double xv = std::fabs(act_value(dt, x[r * ldx + i]));
        if (w.exact.empty()) {
          magnitude += xv * std::fabs(w.w[c * k + i]);
        } else {
          // The GEMV's sub-block decode (M <= 2) multiplies ggml's exact weights, the
          // reference their f16 roundings: the difference is at most this sum, and its
          // FP32 sums run over |s q| + |m|. The other kernels match the reference's
          // weights, so both bounds hold for them too.
          magnitude += xv * std::max(std::fabs(w.w[c * k + i]), w.spread[c * k + i]);
          rounding += xv * std::fabs(w.exact[c * k + i] - w.w[c * k + i]);
        }
      }
      const double ref = act_value(dt, want[r * ldo + c]);
      const double tol = 2 * ulp_at(dt, ref) + static_cast<double>(k + 8) * std::ldexp(magnitude, -24) + rounding;
      const double diff = std::fabs(act_value(dt, g) - ref);
      if (!(diff <= tol)) {
        ++failures;
        ADD_FAILURE() << "row " << r << " col " << c << ": gpu " << act_value(dt, g) << " (0x" << std::hex << g
                      << std::dec << "), cpu " << ref << ", |diff| " << diff << " > tol " << tol;
      }
    }
  }
}

}  // namespace lowbit::test

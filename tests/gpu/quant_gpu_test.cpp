// The production GPU path against the CPU path of the same public API (the oracle):
// quantize, compute_scales, quantize_with_scales and dequantize, for every scheme x
// granularity (group sizes that take either encode kernel) x input dtype x output
// dtype, on fresh random inputs of awkward shapes, padded row strides and misaligned
// base pointers. Codes, scales, mins and dequantized values must be equal bit for
// bit; outputs are poisoned first and guarded on both sides.
#include <gtest/gtest.h>

#include <cstdint>
#include <iterator>
#include <string>
#include <vector>

#include "common/compare.h"
#include "common/gpu.h"
#include "common/host_quant.h"
#include "common/inputs.h"
#include "common/poison.h"
#include "common/random.h"
#include "common/specs.h"
#include "common/storage.h"
#include "lowbit/quant.h"

namespace lowbit::test {
namespace {

struct Case {
  std::int64_t rows, cols, pad;  // pad: spare elements (bytes for codes) at the end of every row
  bool misalign_x;               // x and out start one element past an aligned address
  bool misalign_codes;           // codes start one byte past an aligned address
};

std::string case_name(const Case& k) {
  return std::to_string(k.rows) + "x" + std::to_string(k.cols) + " pad " + std::to_string(k.pad) +
         (k.misalign_x ? " misaligned x" : "") + (k.misalign_codes ? " misaligned codes" : "");
}

std::vector<Case> production_cases() {
  std::vector<Case> cases;
  for (std::int64_t rows : {1, 3, 31, 33, 1000}) {
    for (std::int64_t cols : {1, 3, 31, 33, 100, 1000, 4100}) cases.push_back({rows, cols, 0, false, false});
  }
  const Case extra[] = {
      {31, 100, 3, false, false},   {33, 1000, 16, false, false}, {1000, 33, 1, false, false},
      {3, 4100, 5, false, false},   {33, 1000, 0, true, false},   {1000, 100, 0, true, false},
      {257, 512, 0, true, false},   {31, 4100, 2, true, true},    {17, 33, 0, true, true},
      {300, 516, 0, false, true},
  };
  cases.insert(cases.end(), std::begin(extra), std::end(extra));
  return cases;
}

class QuantProduction : public GpuTest, public ::testing::WithParamInterface<QuantSpec> {};

void check_case(const QuantSpec& spec, DType dtype, const Case& k, const std::vector<float>& master) {
  const std::int64_t rows = k.rows, cols = k.cols, ld = cols + k.pad;
  const std::size_t esize = dtype_size(dtype);
  const bool int4 = has_mins(spec);

  // The oracle: the CPU path of the same API, on the same stored input.
  std::vector<std::uint8_t> x_host = to_storage(master, dtype);
  const TensorView x_cpu = TensorView::matrix(x_host.data(), dtype, Device::cpu, rows, cols, ld);
  HostQuantized ref(spec, rows, cols, k.pad);
  quantize(x_cpu, spec, ref.view(), Workspace{}, nullptr);
  std::vector<std::vector<std::uint8_t>> ref_out;
  for (const DType out_dtype : kFloatDTypes) {
    ref_out.emplace_back(static_cast<std::size_t>(rows * ld) * dtype_size(out_dtype), kFloatPoison);
    dequantize(ref.view(), spec, TensorView::matrix(ref_out.back().data(), out_dtype, Device::cpu, rows, cols, ld), nullptr);
  }

  // Device buffers.
  const std::size_t n_params = ref.scales.size();
  GuardedBuffer x(x_host.size(), k.misalign_x ? esize : 0);
  x.poison(0);
  x.upload(x_host.data(), x_host.size());
  GuardedBuffer codes(ref.codes.size(), k.misalign_codes ? 1 : 0), scales(n_params * 4), mins(int4 ? n_params * 4 : 0);
  core::DeviceBuffer workspace(quantize_workspace_bytes(spec, rows, cols));
  const Workspace ws{workspace.data(), workspace.bytes()};
  const TensorView xv = TensorView::matrix(x.data(), dtype, Device::cuda, rows, cols, ld);
  const QuantizedView q{
      TensorView::matrix(codes.data(), code_dtype(spec), Device::cuda, rows, ref.layout.code_cols, ref.ldq),
      TensorView::vector(scales.data(), DType::f32, Device::cuda, ref.layout.scale_count()),
      int4 ? TensorView::vector(mins.data(), DType::f32, Device::cuda, ref.layout.scale_count()) : TensorView{}};

  auto poison_all = [&] {
    codes.poison(kCodePoison);
    scales.poison(kFloatPoison);
    mins.poison(kFloatPoison);
    LOWBIT_CUDA_CHECK(cudaMemset(workspace.data(), 0xa5, workspace.bytes()));  // the library must initialize it
  };
  auto expect_params = [&](const std::string& op) {
    const auto got = download<float>(scales.data(), n_params);
    ASSERT_TRUE(bitwise_equal(got.data(), ref.scales.data(), n_params, DType::f32, ref.layout.scale_cols, op + ": scales"));
    ASSERT_TRUE(scales.guards_intact(op + ": scales"));
    if (int4) {
      const auto got_mins = download<float>(mins.data(), n_params);
      ASSERT_TRUE(bitwise_equal(got_mins.data(), ref.mins.data(), n_params, DType::f32, ref.layout.scale_cols, op + ": mins"));
      ASSERT_TRUE(mins.guards_intact(op + ": mins"));
    }
  };
  // All bytes of every codes row, the padding (still poisoned) included.
  auto expect_codes = [&](const std::string& op) {
    const auto got = codes.download_bytes();
    ASSERT_TRUE(bitwise_equal(got.data(), ref.codes.data(), got.size(), DType::u8, static_cast<std::size_t>(ref.ldq),
                              op + ": code bytes"));
    ASSERT_TRUE(codes.guards_intact(op + ": codes"));
  };

  // 1. quantize(): parameters and codes from x.
  poison_all();
  quantize(xv, spec, q, ws, nullptr);
  expect_params("quantize");
  if (::testing::Test::HasFatalFailure()) return;
  expect_codes("quantize");
  if (::testing::Test::HasFatalFailure()) return;

  // 2. compute_scales() alone (deferred status check): parameters only, codes untouched.
  poison_all();
  compute_scales(xv, spec, q, ws, nullptr, NonFiniteCheck::deferred);
  check_quantize_status(ws, nullptr);
  expect_params("compute_scales");
  if (::testing::Test::HasFatalFailure()) return;
  ASSERT_TRUE(all_bytes_are(codes.download_bytes().data(), codes.bytes(), kCodePoison, "compute_scales: codes"));

  // 3. quantize_with_scales() alone, with the oracle's parameters.
  poison_all();
  scales.upload(ref.scales.data(), n_params * 4);
  if (int4) mins.upload(ref.mins.data(), n_params * 4);
  quantize_with_scales(xv, spec, q, nullptr);
  expect_codes("quantize_with_scales");
  if (::testing::Test::HasFatalFailure()) return;

  // 4. dequantize() of the oracle's codes into each output dtype, poisoned, padded.
  codes.upload(ref.codes.data(), ref.codes.size());
  for (std::size_t o = 0; o < std::size(kFloatDTypes); ++o) {
    const DType out_dtype = kFloatDTypes[o];
    const std::size_t osize = dtype_size(out_dtype);
    GuardedBuffer out(ref_out[o].size(), k.misalign_x ? osize : 0);
    out.poison(kFloatPoison);
    dequantize(q, spec, TensorView::matrix(out.data(), out_dtype, Device::cuda, rows, cols, ld), nullptr);
    const std::string op = std::string("dequantize to ") + dtype_name(out_dtype);
    const auto got = out.download_bytes();
    ASSERT_TRUE(bitwise_equal(got.data(), ref_out[o].data(), got.size() / osize, out_dtype, static_cast<std::size_t>(ld), op));
    ASSERT_TRUE(out.guards_intact(op));
  }
  ASSERT_TRUE(x.guards_intact("x (input)"));
}

TEST_P(QuantProduction, MatchesCpu) {
  const QuantSpec spec = GetParam();
  LOWBIT_TEST_RNG(rng);
  const std::vector<Case> cases = production_cases();
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Case& k = cases[i];
    const Fill fill = static_cast<Fill>(i % 3);
    const std::vector<float> master = test_matrix(rng, fill, spec.scheme, k.rows, k.cols, k.cols + k.pad);
    for (const DType dtype : kFloatDTypes) {
      SCOPED_TRACE(spec_name(spec) + ", x " + dtype_name(dtype) + " " + case_name(k) + ", fill " + fill_name(fill));
      check_case(spec, dtype, k, master);
      if (HasFailure()) return;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllSpecs, QuantProduction, ::testing::ValuesIn(all_specs()),
                         [](const ::testing::TestParamInfo<QuantSpec>& info) { return spec_name(info.param); });

}  // namespace
}  // namespace lowbit::test

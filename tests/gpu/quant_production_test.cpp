// The production GPU path against the CPU path of the same API: codes, scales, mins
// and dequantized values equal bit for bit, on fresh random inputs of awkward shapes,
// padded rows and a misaligned base pointer, outputs poisoned first.
#include <gtest/gtest.h>

#include <cstring>

#include "common/gpu.h"
#include "common/naive_quant.h"
#include "common/random.h"
#include "lowbit/quant.h"

namespace lowbit::test {
namespace {

constexpr int kCodePoison = 0x5a;
constexpr int kFloatPoison = 0xff;  // NaN

struct Case {
  std::int64_t rows, cols, pad;
  bool misaligned;  // x and out start one element past an aligned address
};

class QuantProduction : public GpuTest {};

void check_case(const QuantSpec& spec, DType dtype, const Case& k, std::mt19937_64& rng) {
  SCOPED_TRACE(spec_name(spec) + " " + dtype_name(dtype) + " " + std::to_string(k.rows) + "x" +
               std::to_string(k.cols) + " pad " + std::to_string(k.pad) + (k.misaligned ? " misaligned" : ""));
  const std::int64_t rows = k.rows, cols = k.cols, ld = cols + k.pad;
  const std::size_t esize = dtype_size(dtype);
  const std::vector<std::uint8_t> x_host = to_storage(random_matrix(rng, rows, cols, ld), dtype);
  const QuantLayout layout = quant_layout(spec, rows, cols);
  const bool int4 = spec.scheme == QuantScheme::int4_asymmetric;
  const DType code_dtype = int4 ? DType::u8 : DType::i8;
  const std::int64_t ldq = layout.code_cols + k.pad;
  const auto n_codes = static_cast<std::size_t>(rows * ldq);
  const auto n_params = static_cast<std::size_t>(layout.scale_count());

  // CPU reference through the public API.
  std::vector<std::uint8_t> ref_codes(n_codes, kCodePoison);
  std::vector<float> ref_scales(n_params), ref_mins(int4 ? n_params : 0);
  const QuantizedView ref_q{
      TensorView::matrix(ref_codes.data(), code_dtype, Device::cpu, rows, layout.code_cols, ldq),
      TensorView::vector(ref_scales.data(), DType::f32, Device::cpu, layout.scale_count()),
      int4 ? TensorView::vector(ref_mins.data(), DType::f32, Device::cpu, layout.scale_count()) : TensorView{}};
  const TensorView x_cpu = TensorView::matrix(const_cast<std::uint8_t*>(x_host.data()), dtype, Device::cpu, rows, cols, ld);
  quantize(x_cpu, spec, ref_q, Workspace{}, nullptr);
  std::vector<std::uint8_t> ref_out(static_cast<std::size_t>(rows * ld) * esize, 0xff);
  dequantize(ref_q, spec, TensorView::matrix(ref_out.data(), dtype, Device::cpu, rows, cols, ld), nullptr);

  // GPU buffers.
  const std::size_t shift = k.misaligned ? esize : 0;
  cuda::DeviceBuffer x_dev(x_host.size() + shift), codes(n_codes), scales(n_params * 4), mins(int4 ? n_params * 4 : 0),
      out(ref_out.size() + shift), workspace(quantize_workspace_bytes(spec, rows, cols));
  LOWBIT_CUDA_CHECK(cudaMemcpy(static_cast<char*>(x_dev.data()) + shift, x_host.data(), x_host.size(), cudaMemcpyHostToDevice));
  const TensorView x = TensorView::matrix(static_cast<char*>(x_dev.data()) + shift, dtype, Device::cuda, rows, cols, ld);
  const QuantizedView q{TensorView::matrix(codes.data(), code_dtype, Device::cuda, rows, layout.code_cols, ldq),
                        TensorView::vector(scales.data(), DType::f32, Device::cuda, layout.scale_count()),
                        int4 ? TensorView::vector(mins.data(), DType::f32, Device::cuda, layout.scale_count()) : TensorView{}};
  const Workspace ws{workspace.data(), workspace.bytes()};

  auto expect_quantized_equal = [&](const char* what) {
    SCOPED_TRACE(what);
    const auto got_codes = download<std::uint8_t>(codes.data(), n_codes);
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t c = 0; c < cols; ++c) {
        ASSERT_EQ(code_at(got_codes.data(), ldq, r, c, spec.scheme), code_at(ref_codes.data(), ldq, r, c, spec.scheme))
            << "row " << r << " col " << c;
      }
    }
    EXPECT_EQ(got_codes, ref_codes);  // including the untouched (poisoned) padding
    const auto got_scales = download<float>(scales.data(), n_params);
    EXPECT_EQ(std::memcmp(got_scales.data(), ref_scales.data(), n_params * 4), 0) << "scales differ";
    if (int4) {
      const auto got_mins = download<float>(mins.data(), n_params);
      EXPECT_EQ(std::memcmp(got_mins.data(), ref_mins.data(), n_params * 4), 0) << "mins differ";
    }
  };

  // 1. quantize(): scales and codes from x.
  poison(codes, kCodePoison), poison(scales, kFloatPoison), poison(mins, kFloatPoison);
  quantize(x, spec, q, ws, nullptr);
  expect_quantized_equal("quantize");

  // 2. compute_scales() then quantize_with_scales().
  poison(codes, kCodePoison), poison(scales, kFloatPoison), poison(mins, kFloatPoison);
  compute_scales(x, spec, q, ws, nullptr);
  quantize_with_scales(x, spec, q, nullptr);
  expect_quantized_equal("compute_scales + quantize_with_scales");

  // 3. dequantize() into a poisoned, padded output.
  poison(out, kFloatPoison);
  const TensorView out_view = TensorView::matrix(static_cast<char*>(out.data()) + shift, dtype, Device::cuda, rows, cols, ld);
  dequantize(q, spec, out_view, nullptr);
  auto got_out = download<std::uint8_t>(static_cast<char*>(out.data()) + shift, ref_out.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) {
      const std::size_t at = static_cast<std::size_t>(r * ld + c) * esize;
      ASSERT_EQ(std::memcmp(got_out.data() + at, ref_out.data() + at, esize), 0)
          << "row " << r << " col " << c << ": " << storage_value(got_out.data(), at / esize, dtype) << " vs "
          << storage_value(ref_out.data(), at / esize, dtype);
    }
  }
  EXPECT_EQ(got_out, ref_out);  // padding untouched
  LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
}

TEST_F(QuantProduction, MatchesCpuEverywhere) {
  LOWBIT_TEST_RNG(rng);
  const Case cases[] = {{1, 1, 0, false},    {3, 3, 0, false},   {31, 33, 0, false},   {33, 31, 0, false},
                        {1000, 100, 0, false}, {3, 4100, 0, false}, {17, 1000, 7, false}, {33, 127, 3, true},
                        {1000, 1000, 0, false}, {5, 513, 0, false}};
  for (const QuantSpec& spec : all_specs()) {
    for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
      for (const Case& k : cases) check_case(spec, dtype, k, rng);
    }
  }
}

TEST_F(QuantProduction, LargeAlignedShapes) {
  LOWBIT_TEST_RNG(rng);
  const QuantSpec specs[] = {{QuantScheme::int8_symmetric, Granularity::per_channel, 0},
                             {QuantScheme::int8_symmetric, Granularity::per_token, 0},
                             {QuantScheme::int4_asymmetric, Granularity::per_channel, 0},
                             {QuantScheme::int4_asymmetric, Granularity::per_group, 64}};
  for (const QuantSpec& spec : specs) {
    for (const DType dtype : {DType::f32, DType::bf16}) check_case(spec, dtype, {4099, 4096, 0, false}, rng);
  }
}

}  // namespace
}  // namespace lowbit::test

// Every kind of bad argument gets lowbit::Error naming the argument; nothing crashes
// and nothing is written.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "common/expect_error.h"
#include "common/host_quant.h"
#include "common/specs.h"
#include "common/storage.h"
#include "lowbit/quant.h"

namespace lowbit::test {
namespace {

constexpr std::int64_t kRows = 8, kCols = 32;
const QuantSpec kInt8Channel{QuantScheme::int8_symmetric, Granularity::per_channel, 0};
const QuantSpec kInt4Channel{QuantScheme::int4_asymmetric, Granularity::per_channel, 0};

// Valid arguments for a kRows x kCols f32 input; each test breaks one of them.
struct Args {
  std::vector<float> x = std::vector<float>(kRows * kCols, 1.5f);
  std::vector<float> out = std::vector<float>(kRows * kCols);
  HostQuantized q8{kInt8Channel, kRows, kCols};
  HostQuantized q4{kInt4Channel, kRows, kCols};

  Args() {
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7) - 3.0f;
  }
  TensorView xv() { return TensorView::matrix(x.data(), DType::f32, Device::cpu, kRows, kCols); }
  TensorView outv() { return TensorView::matrix(out.data(), DType::f32, Device::cpu, kRows, kCols); }
};

void run_quantize(const TensorView& x, const QuantSpec& spec, const QuantizedView& q) {
  quantize(x, spec, q, Workspace{}, nullptr);
}

TEST(BadInput, EmptyShape) {
  Args a;
  for (const auto& [rows, cols] : {std::pair<std::int64_t, std::int64_t>{0, kCols}, {kRows, 0}, {0, 0}, {-1, kCols}}) {
    TensorView x = a.xv();
    x.shape[0] = rows, x.shape[1] = cols;
    EXPECT_LOWBIT_ERROR(run_quantize(x, kInt8Channel, a.q8.view()), "x: expected a non-empty shape");
    EXPECT_LOWBIT_ERROR(compute_scales(x, kInt8Channel, a.q8.view(), Workspace{}, nullptr), "x: expected a non-empty shape");
    EXPECT_LOWBIT_ERROR(quantize_with_scales(x, kInt8Channel, a.q8.view(), nullptr), "x: expected a non-empty shape");
    TensorView out = a.outv();
    out.shape[0] = rows, out.shape[1] = cols;
    EXPECT_LOWBIT_ERROR(dequantize(a.q8.view(), kInt8Channel, out, nullptr), "out: expected a non-empty shape");
  }
}

TEST(BadInput, Rank) {
  Args a;
  EXPECT_LOWBIT_ERROR(run_quantize(TensorView::vector(a.x.data(), DType::f32, Device::cpu, kCols), kInt8Channel, a.q8.view()),
                      "x: expected a rank-2 tensor");
  TensorView x3 = a.xv();
  x3.rank = 3;
  x3.shape[2] = 1;
  EXPECT_LOWBIT_ERROR(run_quantize(x3, kInt8Channel, a.q8.view()), "x: expected a rank-2 tensor");
  EXPECT_LOWBIT_ERROR(run_quantize(TensorView{}, kInt8Channel, a.q8.view()), "x: expected a rank-2 tensor");
  QuantizedView q = a.q8.view();
  q.codes = TensorView::vector(a.q8.codes.data(), DType::i8, Device::cpu, kRows * kCols);
  EXPECT_LOWBIT_ERROR(run_quantize(a.xv(), kInt8Channel, q), "codes: expected a rank-2 tensor");
  TensorView out = TensorView::vector(a.out.data(), DType::f32, Device::cpu, kRows * kCols);
  EXPECT_LOWBIT_ERROR(dequantize(a.q8.view(), kInt8Channel, out, nullptr), "out: expected a rank-2 tensor");
}

TEST(BadInput, NullPointers) {
  Args a;
  TensorView x = a.xv();
  x.data = nullptr;
  EXPECT_LOWBIT_ERROR(run_quantize(x, kInt8Channel, a.q8.view()), "x: data pointer is null");
  QuantizedView q = a.q8.view();
  q.codes.data = nullptr;
  EXPECT_LOWBIT_ERROR(run_quantize(a.xv(), kInt8Channel, q), "codes: data pointer is null");
  q = a.q8.view();
  q.scales.data = nullptr;
  EXPECT_LOWBIT_ERROR(run_quantize(a.xv(), kInt8Channel, q), "scales: data pointer is null");
  EXPECT_LOWBIT_ERROR(compute_scales(a.xv(), kInt8Channel, q, Workspace{}, nullptr), "scales: data pointer is null");
  EXPECT_LOWBIT_ERROR(quantize_with_scales(a.xv(), kInt8Channel, q, nullptr), "scales: data pointer is null");
  TensorView out = a.outv();
  out.data = nullptr;
  EXPECT_LOWBIT_ERROR(dequantize(a.q8.view(), kInt8Channel, out, nullptr), "out: data pointer is null");
}

TEST(BadInput, DTypes) {
  Args a;
  for (const DType bad : {DType::i32, DType::u8, DType::i8}) {
    TensorView x = a.xv();
    x.dtype = bad;
    EXPECT_LOWBIT_ERROR(run_quantize(x, kInt8Channel, a.q8.view()),
                        std::string("x: expected dtype f32, f16 or bf16, got ") + dtype_name(bad));
    TensorView out = a.outv();
    out.dtype = bad;
    EXPECT_LOWBIT_ERROR(dequantize(a.q8.view(), kInt8Channel, out, nullptr),
                        std::string("out: expected dtype f32, f16 or bf16, got ") + dtype_name(bad));
  }
  QuantizedView q = a.q8.view();
  q.codes.dtype = DType::u8;
  EXPECT_LOWBIT_ERROR(run_quantize(a.xv(), kInt8Channel, q), "codes: expected dtype i8 for int8, got u8");
  EXPECT_LOWBIT_ERROR(dequantize(q, kInt8Channel, a.outv(), nullptr), "codes: expected dtype i8 for int8, got u8");
  q = a.q4.view();
  q.codes.dtype = DType::i8;
  EXPECT_LOWBIT_ERROR(run_quantize(a.xv(), kInt4Channel, q), "codes: expected dtype u8 for int4, got i8");
  q = a.q8.view();
  q.scales.dtype = DType::f16;
  EXPECT_LOWBIT_ERROR(run_quantize(a.xv(), kInt8Channel, q), "scales: expected dtype f32, got f16");
  q = a.q4.view();
  q.mins.dtype = DType::bf16;
  EXPECT_LOWBIT_ERROR(run_quantize(a.xv(), kInt4Channel, q), "mins: expected dtype f32, got bf16");
}

TEST(BadInput, CodesShape) {
  Args a;
  QuantizedView q = a.q8.view();
  q.codes.shape[1] = kCols - 1;
  EXPECT_LOWBIT_ERROR(run_quantize(a.xv(), kInt8Channel, q), "codes: expected shape [8, 32], got [8, 31]");
  q = a.q8.view();
  q.codes.shape[0] = kRows + 1;
  EXPECT_LOWBIT_ERROR(run_quantize(a.xv(), kInt8Channel, q), "codes: expected shape [8, 32], got [9, 32]");
  q = a.q4.view();
  q.codes.shape[1] = kCols;  // int4 packs two codes a byte: 16 columns
  EXPECT_LOWBIT_ERROR(run_quantize(a.xv(), kInt4Channel, q), "codes: expected shape [8, 16], got [8, 32]");
  q = a.q8.view();
  q.codes.strides[0] = kCols - 1;
  EXPECT_LOWBIT_ERROR(run_quantize(a.xv(), kInt8Channel, q), "codes: row stride 31 is smaller than the row length 32");
  // dequantize: out's shape decides what the codes must be.
  TensorView out = a.outv();
  out.shape[0] = kRows - 1;
  EXPECT_LOWBIT_ERROR(dequantize(a.q8.view(), kInt8Channel, out, nullptr), "codes: expected shape [7, 32], got [8, 32]");
}

TEST(BadInput, ScalesAndMins) {
  Args a;
  QuantizedView q = a.q8.view();
  q.scales.shape[0] = kCols - 1;
  EXPECT_LOWBIT_ERROR(run_quantize(a.xv(), kInt8Channel, q), "scales: expected 32 elements, got 31");
  q.scales.shape[0] = kCols + 1;
  EXPECT_LOWBIT_ERROR(run_quantize(a.xv(), kInt8Channel, q), "scales: expected 32 elements, got 33");
  const QuantSpec token{QuantScheme::int8_symmetric, Granularity::per_token, 0};
  EXPECT_LOWBIT_ERROR(run_quantize(a.xv(), token, a.q8.view()), "scales: expected 8 elements, got 32");
  // 32 elements, but as a 2 x 16 matrix with a row stride of 17: not contiguous.
  std::vector<float> strided(2 * 17);
  q = a.q8.view();
  q.scales = TensorView::matrix(strided.data(), DType::f32, Device::cpu, 2, 16, 17);
  EXPECT_LOWBIT_ERROR(run_quantize(a.xv(), kInt8Channel, q), "scales: expected a contiguous tensor");
  q = a.q8.view();
  q.scales.strides[0] = 2;
  EXPECT_LOWBIT_ERROR(run_quantize(a.xv(), kInt8Channel, q), "scales: expected a contiguous tensor");
  // int8 has no mins; int4 needs them, with the scales' element count.
  q = a.q8.view();
  q.mins = a.q4.view().mins;
  EXPECT_LOWBIT_ERROR(run_quantize(a.xv(), kInt8Channel, q), "mins: int8 (symmetric) has no mins");
  EXPECT_LOWBIT_ERROR(dequantize(q, kInt8Channel, a.outv(), nullptr), "mins: int8 (symmetric) has no mins");
  q = a.q4.view();
  q.mins = TensorView{};
  EXPECT_LOWBIT_ERROR(run_quantize(a.xv(), kInt4Channel, q), "mins: data pointer is null");
  EXPECT_LOWBIT_ERROR(dequantize(q, kInt4Channel, a.outv(), nullptr), "mins: data pointer is null");
  q = a.q4.view();
  q.mins.shape[0] = 5;
  EXPECT_LOWBIT_ERROR(run_quantize(a.xv(), kInt4Channel, q), "mins: expected 32 elements, got 5");
}

TEST(BadInput, Strides) {
  Args a;
  TensorView x = TensorView::matrix(a.x.data(), DType::f32, Device::cpu, kRows, kCols, kCols - 1);
  EXPECT_LOWBIT_ERROR(run_quantize(x, kInt8Channel, a.q8.view()), "x: row stride 31 is smaller than the row length 32");
  x = a.xv();
  x.strides[1] = 2;
  EXPECT_LOWBIT_ERROR(run_quantize(x, kInt8Channel, a.q8.view()), "x: expected unit column stride, got 2");
  x.strides[1] = 0;
  EXPECT_LOWBIT_ERROR(run_quantize(x, kInt8Channel, a.q8.view()), "x: expected unit column stride, got 0");
  QuantizedView q = a.q8.view();
  q.codes.strides[1] = -1;
  EXPECT_LOWBIT_ERROR(run_quantize(a.xv(), kInt8Channel, q), "codes: expected unit column stride, got -1");
  TensorView out = a.outv();
  out.strides[0] = 3;
  EXPECT_LOWBIT_ERROR(dequantize(a.q8.view(), kInt8Channel, out, nullptr), "out: row stride 3 is smaller");
}

TEST(BadInput, Spec) {
  Args a;
  for (const std::int64_t group : {0, 24, -16, 7, 8}) {
    const QuantSpec spec{QuantScheme::int8_symmetric, Granularity::per_group, group};
    const std::string message = "spec.group_size: expected a positive multiple of 16 for per_group, got " + std::to_string(group);
    EXPECT_LOWBIT_ERROR(run_quantize(a.xv(), spec, a.q8.view()), message);
    EXPECT_LOWBIT_ERROR(dequantize(a.q8.view(), spec, a.outv(), nullptr), message);
  }
  EXPECT_LOWBIT_ERROR(run_quantize(a.xv(), QuantSpec{static_cast<QuantScheme>(7), Granularity::per_channel, 0}, a.q8.view()),
                      "spec.scheme: unknown value 7");
  EXPECT_LOWBIT_ERROR(run_quantize(a.xv(), QuantSpec{QuantScheme::int8_symmetric, static_cast<Granularity>(9), 0}, a.q8.view()),
                      "spec.granularity: unknown value 9");
}

TEST(BadInput, Overlaps) {
  Args a;
  QuantizedView q = a.q8.view();
  q.codes.data = a.x.data();
  EXPECT_LOWBIT_ERROR(run_quantize(a.xv(), kInt8Channel, q), "codes: overlaps x");
  EXPECT_LOWBIT_ERROR(quantize_with_scales(a.xv(), kInt8Channel, q, nullptr), "codes: overlaps x");
  q = a.q8.view();
  q.codes.data = a.x.data() + a.x.size() - 1;  // only the last bytes overlap
  EXPECT_LOWBIT_ERROR(run_quantize(a.xv(), kInt8Channel, q), "codes: overlaps x");
  q = a.q8.view();
  q.scales.data = a.x.data() + 4;
  EXPECT_LOWBIT_ERROR(run_quantize(a.xv(), kInt8Channel, q), "scales: overlaps x");
  EXPECT_LOWBIT_ERROR(compute_scales(a.xv(), kInt8Channel, q, Workspace{}, nullptr), "scales: overlaps x");
  q = a.q8.view();
  q.scales.data = a.q8.codes.data() + 16;
  EXPECT_LOWBIT_ERROR(run_quantize(a.xv(), kInt8Channel, q), "codes: overlaps scales");
  q = a.q4.view();
  q.mins.data = a.q4.scales.data() + 1;
  EXPECT_LOWBIT_ERROR(run_quantize(a.xv(), kInt4Channel, q), "mins: overlaps scales");
  q = a.q4.view();
  q.mins.data = a.x.data();
  EXPECT_LOWBIT_ERROR(run_quantize(a.xv(), kInt4Channel, q), "mins: overlaps x");
  // dequantize: out must not alias its inputs.
  run_quantize(a.xv(), kInt8Channel, a.q8.view());
  TensorView out = a.outv();
  out.data = a.q8.codes.data();
  EXPECT_LOWBIT_ERROR(dequantize(a.q8.view(), kInt8Channel, out, nullptr), "out: overlaps codes");
  // The scales in a buffer of their own that out then covers (touching no other input).
  std::vector<float> scales_and_out(kRows * kCols + kCols);
  q = a.q8.view();
  std::copy(a.q8.scales.begin(), a.q8.scales.end(), scales_and_out.begin());
  q.scales.data = scales_and_out.data();
  out.data = scales_and_out.data();
  EXPECT_LOWBIT_ERROR(dequantize(q, kInt8Channel, out, nullptr), "out: overlaps scales");
  // Adjacent, not overlapping: fine.
  std::vector<std::uint8_t> both(kRows * kCols * 5);
  q = a.q8.view();
  q.codes.data = both.data();
  out = TensorView::matrix(both.data() + kRows * kCols, DType::f32, Device::cpu, kRows, kCols);
  EXPECT_NO_THROW(dequantize(q, kInt8Channel, out, nullptr));
}

TEST(BadInput, DevicesMustMatch) {
  Args a;
  QuantizedView q = a.q8.view();
  q.codes.device = Device::cuda;
  EXPECT_LOWBIT_ERROR(run_quantize(a.xv(), kInt8Channel, q), "codes: on cuda but the input is on cpu");
  q = a.q8.view();
  q.scales.device = Device::cuda;
  EXPECT_LOWBIT_ERROR(run_quantize(a.xv(), kInt8Channel, q), "scales: on cuda but the input is on cpu");
  q = a.q4.view();
  q.mins.device = Device::cuda;
  EXPECT_LOWBIT_ERROR(run_quantize(a.xv(), kInt4Channel, q), "mins: on cuda but the input is on cpu");
}

// With the CUDA build, cuda views go to the GPU path (tested by lowbit_gpu_tests);
// a CPU-only build must refuse them.
TEST(BadInput, CudaViewsWithoutCuda) {
#if LOWBIT_WITH_CUDA
  GTEST_SKIP() << "this build has CUDA: cuda views are tested by lowbit_gpu_tests";
#else
  Args a;
  TensorView x = a.xv();
  x.device = Device::cuda;
  QuantizedView q = a.q8.view();
  q.codes.device = q.scales.device = Device::cuda;
  EXPECT_LOWBIT_ERROR(run_quantize(x, kInt8Channel, q), "quantize: tensors are on cuda but this build");
  EXPECT_LOWBIT_ERROR(compute_scales(x, kInt8Channel, q, Workspace{}, nullptr), "compute_scales: tensors are on cuda");
  EXPECT_LOWBIT_ERROR(check_quantize_status(Workspace{}, nullptr), "check_quantize_status: this build");
  EXPECT_LOWBIT_ERROR(quantize(x, kInt8Channel, q, Workspace{}, NonFiniteStatus{}, nullptr),
                      "quantize: tensors are on cuda but this build");
  EXPECT_LOWBIT_ERROR(check_quantize_status(NonFiniteStatus{}, nullptr), "check_quantize_status: this build");
  EXPECT_EQ(quantize_workspace_bytes_without_status(kInt8Channel, kRows, kCols), 0u);
#endif
}

TEST(BadInput, NonFiniteInputNamesRowAndColumn) {
  const float bads[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                        -std::numeric_limits<float>::infinity()};
  for (const float bad : bads) {
    for (const DType dtype : kFloatDTypes) {
      for (const QuantSpec& spec : specs_with_groups({std::begin(kAllSchemes), std::end(kAllSchemes)}, {16, 32})) {
        SCOPED_TRACE(spec_name(spec) + " " + dtype_name(dtype) + " " + std::to_string(bad));
        std::vector<float> values(kRows * kCols, 0.25f);
        for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 11) - 5.0f;
        values[5 * kCols + 17] = bad;
        std::vector<std::uint8_t> x = to_storage(values, dtype);
        const TensorView xv = TensorView::matrix(x.data(), dtype, Device::cpu, kRows, kCols);
        HostQuantized q(spec, kRows, kCols);
        EXPECT_LOWBIT_ERROR(run_quantize(xv, spec, q.view()), "x: contains");
        EXPECT_LOWBIT_ERROR(run_quantize(xv, spec, q.view()), "at row 5, column 17");
        EXPECT_LOWBIT_ERROR(compute_scales(xv, spec, q.view(), Workspace{}, nullptr), "at row 5, column 17");
        // The sticky-status overloads report CPU input at once too (the status is not touched).
        EXPECT_LOWBIT_ERROR(quantize(xv, spec, q.view(), Workspace{}, NonFiniteStatus{}, nullptr),
                            "at row 5, column 17");
        EXPECT_LOWBIT_ERROR(compute_scales(xv, spec, q.view(), Workspace{}, NonFiniteStatus{}, nullptr),
                            "at row 5, column 17");
      }
    }
  }
}

TEST(BadInput, ParseNames) {
  EXPECT_LOWBIT_ERROR(parse_scheme("int3"), "scheme: expected int8, int4, int8_asym or int4_sym, got 'int3'");
  EXPECT_LOWBIT_ERROR(parse_scheme(""), "scheme: expected int8, int4, int8_asym or int4_sym, got ''");
  EXPECT_LOWBIT_ERROR(parse_scheme("INT8"), "scheme: expected int8, int4, int8_asym or int4_sym, got 'INT8'");
  EXPECT_LOWBIT_ERROR(parse_granularity("row"), "granularity: expected tensor, channel, token or group, got 'row'");
  EXPECT_LOWBIT_ERROR(parse_granularity("channels"), "granularity: expected tensor, channel, token or group, got 'channels'");
  EXPECT_LOWBIT_ERROR(parse_granularity(""), "granularity: expected tensor, channel, token or group, got ''");
  for (const QuantScheme s : kAllSchemes) {
    EXPECT_EQ(parse_scheme(scheme_name(s)), s);
  }
  for (const Granularity g : {Granularity::per_tensor, Granularity::per_channel, Granularity::per_token, Granularity::per_group}) {
    EXPECT_EQ(parse_granularity(granularity_name(g)), g);
  }
}

TEST(BadInput, NothingIsWrittenOnError) {
  Args a;
  QuantizedView q = a.q8.view();
  q.mins = a.q4.view().mins;  // rejected after every other check passed
  EXPECT_LOWBIT_ERROR(run_quantize(a.xv(), kInt8Channel, q), "mins:");
  EXPECT_EQ(a.q8.codes, std::vector<std::uint8_t>(a.q8.codes.size(), kCodePoison));
  for (const float s : a.q8.scales) EXPECT_TRUE(std::isnan(s));
}

}  // namespace
}  // namespace lowbit::test

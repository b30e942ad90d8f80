// The GPU block-format encoders and decoders against the CPU reference: codes,
// scales and the global scale byte for byte, decoded values bit for bit, on fresh
// random inputs (rows of very different magnitudes, rows made of E2M1 ties), awkward
// shapes, f32/f16/bf16, aligned and unaligned tensors, outputs poisoned first and
// guard bytes checked. Plus NaN/Inf reporting (immediate and deferred).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/compare.h"
#include "common/expect_error.h"
#include "common/gpu.h"
#include "common/poison.h"
#include "common/random.h"
#include "common/storage.h"
#include "lowbit/block_formats.h"

namespace lowbit::test {
namespace {

constexpr BlockFormat kFormats[] = {BlockFormat::nf4, BlockFormat::mxfp4, BlockFormat::nvfp4};
constexpr DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};

// Values of a rows x stride matrix (padding included), already representable in dtype.
std::vector<float> random_values(Rng& rng, std::int64_t rows, std::int64_t stride, DType dtype) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> log_scale(-10.0f, 10.0f);
  std::uniform_int_distribution<int> quarter(-24, 24);
  std::vector<float> v(static_cast<std::size_t>(rows * stride));
  for (std::int64_t r = 0; r < rows; ++r) {
    const bool ties = r % 4 == 1;  // multiples of 0.25 up to 6: E2M1 ties when X = 1
    const float scale = std::exp2(log_scale(rng));
    for (std::int64_t c = 0; c < stride; ++c) {
      const float x = ties ? 0.25f * static_cast<float>(quarter(rng)) : normal(rng) * scale;
      v[r * stride + c] = round_to(dtype, x);
    }
  }
  return v;
}

struct DeviceEncoded {
  BlockLayout layout;
  std::int64_t code_stride;
  GuardedBuffer codes, scales, global;
  BlockQuantizedView view;

  DeviceEncoded(BlockFormat format, std::int64_t rows, std::int64_t cols, std::int64_t code_pad, std::size_t shift)
      : layout(block_layout(format, rows, cols)),
        code_stride(layout.code_cols + code_pad),
        codes(static_cast<std::size_t>(rows * code_stride), shift),
        scales(static_cast<std::size_t>(layout.scale_count) * layout.scale_bytes, shift * layout.scale_bytes),
        global(sizeof(float)) {
    codes.poison(kCodePoison);
    scales.poison(kCodePoison);
    global.poison(kFloatPoison);
    view.codes = TensorView::matrix(codes.data(), DType::u8, Device::cuda, rows, layout.code_cols, code_stride);
    view.scales = TensorView::vector(scales.data(), layout.scale_dtype, Device::cuda, layout.scale_count);
    if (layout.has_global_scale) view.global_scale = TensorView::vector(global.data(), DType::f32, Device::cuda, 1);
  }
};

struct HostEncoded {
  std::vector<std::uint8_t> codes, scales;
  float global = 0.0f;
};

HostEncoded cpu_encode(const std::vector<std::uint8_t>& x, DType dtype, std::int64_t rows, std::int64_t cols,
                       std::int64_t stride, BlockFormat format) {
  const BlockLayout layout = block_layout(format, rows, cols);
  HostEncoded h;
  h.codes.assign(static_cast<std::size_t>(rows * layout.code_cols), kCodePoison);
  h.scales.assign(static_cast<std::size_t>(layout.scale_count) * layout.scale_bytes, kCodePoison);
  BlockQuantizedView q{TensorView::matrix(h.codes.data(), DType::u8, Device::cpu, rows, layout.code_cols),
                       TensorView::vector(h.scales.data(), layout.scale_dtype, Device::cpu, layout.scale_count),
                       layout.has_global_scale ? TensorView::vector(&h.global, DType::f32, Device::cpu, 1) : TensorView{}};
  block_encode(TensorView::matrix(const_cast<std::uint8_t*>(x.data()), dtype, Device::cpu, rows, cols, stride), format, q,
               Workspace{}, nullptr);
  return h;
}

// Encodes on the GPU and on the CPU, compares; then decodes the GPU encoding on the
// GPU into every output dtype and compares with the CPU decode of the CPU encoding.
void check_case(Rng& rng, BlockFormat format, DType dtype, std::int64_t rows, std::int64_t cols, bool aligned) {
  SCOPED_TRACE(std::string(block_format_name(format)) + " " + dtype_name(dtype) + " " + std::to_string(rows) + "x" +
               std::to_string(cols) + (aligned ? " aligned" : " unaligned"));
  const std::int64_t stride = aligned ? cols : cols + 1;
  const std::size_t shift = aligned ? 0 : dtype_size(dtype);
  const std::vector<float> values = random_values(rng, rows, stride, dtype);
  const std::vector<std::uint8_t> x = to_storage(values, dtype);
  GuardedBuffer dx(x.size(), shift);
  dx.poison(0);
  dx.upload(x.data(), x.size());

  DeviceEncoded enc(format, rows, cols, aligned ? 0 : 3, aligned ? 0 : 1);
  GuardedBuffer ws(block_encode_workspace_bytes(format, rows, cols));
  ws.poison(0x33);
  block_encode(TensorView::matrix(dx.data(), dtype, Device::cuda, rows, cols, stride), format, enc.view,
               Workspace{ws.data(), ws.bytes()}, nullptr);
  const HostEncoded want = cpu_encode(x, dtype, rows, cols, stride, format);

  const std::vector<std::uint8_t> codes = enc.codes.download_bytes();
  const BlockLayout& layout = enc.layout;
  std::vector<std::uint8_t> dense_codes(static_cast<std::size_t>(rows * layout.code_cols));
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < enc.code_stride; ++c) {
      const std::uint8_t b = codes[static_cast<std::size_t>(r * enc.code_stride + c)];
      if (c < layout.code_cols) {
        dense_codes[static_cast<std::size_t>(r * layout.code_cols + c)] = b;
      } else {
        ASSERT_EQ(b, kCodePoison) << "code padding of row " << r << " was written";
      }
    }
  }
  EXPECT_TRUE(bitwise_equal(dense_codes.data(), want.codes.data(), dense_codes.size(), DType::u8,
                            static_cast<std::size_t>(layout.code_cols), "codes"));
  const std::vector<std::uint8_t> scales = enc.scales.download_bytes();
  EXPECT_TRUE(bitwise_equal(scales.data(), want.scales.data(), static_cast<std::size_t>(layout.scale_count),
                            layout.scale_dtype, static_cast<std::size_t>(layout.blocks_per_row), "scales"));
  if (layout.has_global_scale) {
    const std::vector<float> g = download<float>(enc.global.data(), 1);
    EXPECT_EQ(std::bit_cast<std::uint32_t>(g[0]), std::bit_cast<std::uint32_t>(want.global)) << "global scale";
  }
  EXPECT_TRUE(enc.codes.guards_intact("codes"));
  EXPECT_TRUE(enc.scales.guards_intact("scales"));
  EXPECT_TRUE(enc.global.guards_intact("global_scale"));
  if (!layout.has_global_scale) {
    EXPECT_TRUE(all_bytes_are(download<std::uint8_t>(enc.global.data(), 4).data(), 4, kFloatPoison,
                              "unused global scale"));
  }

  for (DType out_dtype : kFloatTypes) {
    SCOPED_TRACE(std::string("decode to ") + dtype_name(out_dtype));
    const std::int64_t out_stride = aligned ? cols : cols + 3;
    GuardedBuffer dout(static_cast<std::size_t>(rows * out_stride) * dtype_size(out_dtype), shift ? dtype_size(out_dtype) : 0);
    dout.poison(kFloatPoison);
    block_decode(enc.view, format, TensorView::matrix(dout.data(), out_dtype, Device::cuda, rows, cols, out_stride), nullptr);
    std::vector<std::uint8_t> ref(static_cast<std::size_t>(rows * out_stride) * dtype_size(out_dtype), kFloatPoison);
    BlockQuantizedView hq{
        TensorView::matrix(const_cast<std::uint8_t*>(want.codes.data()), DType::u8, Device::cpu, rows, layout.code_cols),
        TensorView::vector(const_cast<std::uint8_t*>(want.scales.data()), layout.scale_dtype, Device::cpu, layout.scale_count),
        layout.has_global_scale ? TensorView::vector(const_cast<float*>(&want.global), DType::f32, Device::cpu, 1)
                                : TensorView{}};
    block_decode(hq, format, TensorView::matrix(ref.data(), out_dtype, Device::cpu, rows, cols, out_stride), nullptr);
    const std::vector<std::uint8_t> got = dout.download_bytes();
    EXPECT_TRUE(bitwise_equal(got.data(), ref.data(), static_cast<std::size_t>(rows * out_stride), out_dtype,
                              static_cast<std::size_t>(out_stride), "decoded (padding included: must stay poisoned)"));
    EXPECT_TRUE(dout.guards_intact("out"));
  }
}

class BlockFormatsGpu : public GpuTest {};

TEST_F(BlockFormatsGpu, EncodeAndDecodeMatchTheCpuReference) {
  LOWBIT_TEST_RNG(rng);
  for (BlockFormat format : kFormats) {
    const std::int64_t block = block_size(format);
    for (DType dtype : kFloatTypes) {
      for (std::int64_t rows : {1, 3, 33, 1000}) {
        for (std::int64_t blocks : {1, 3, 8}) {
          for (bool aligned : {true, false}) {
            if (rows == 1000 && !(blocks == 3 && aligned)) continue;  // keep the test fast
            check_case(rng, format, dtype, rows, blocks * block, aligned);
            if (HasFailure()) return;
          }
        }
      }
    }
  }
}

TEST_F(BlockFormatsGpu, LargeTensorForGridStrideLoops) {
  LOWBIT_TEST_RNG(rng);
  for (BlockFormat format : kFormats) check_case(rng, format, DType::bf16, 2048, 1024, true);
}

TEST_F(BlockFormatsGpu, NonFiniteInputIsReported) {
  for (BlockFormat format : kFormats) {
    SCOPED_TRACE(block_format_name(format));
    const std::int64_t rows = 40, cols = 128;
    std::vector<float> x(static_cast<std::size_t>(rows * cols), 1.0f);
    x[7 * cols + 100] = std::numeric_limits<float>::infinity();
    x[5 * cols + 37] = std::numeric_limits<float>::quiet_NaN();  // the first in row-major order
    x[30 * cols + 1] = std::numeric_limits<float>::quiet_NaN();
    GuardedBuffer dx(x.size() * 4);
    dx.upload(x.data(), x.size() * 4);
    DeviceEncoded enc(format, rows, cols, 0, 0);
    GuardedBuffer ws(block_encode_workspace_bytes(format, rows, cols));
    const Workspace w{ws.data(), ws.bytes()};
    const TensorView xv = TensorView::matrix(dx.data(), DType::f32, Device::cuda, rows, cols);
    EXPECT_LOWBIT_ERROR(block_encode(xv, format, enc.view, w, nullptr), "x: contains NaN or Inf at row 5, column 37");
    block_encode(xv, format, enc.view, w, nullptr, NonFiniteCheck::deferred);  // does not throw
    EXPECT_LOWBIT_ERROR(check_block_encode_status(w, nullptr), "at row 5, column 37");
    // A clean encode through the same workspace resets the status.
    std::vector<float> clean(x.size(), 0.5f);
    dx.upload(clean.data(), clean.size() * 4);
    block_encode(xv, format, enc.view, w, nullptr, NonFiniteCheck::deferred);
    check_block_encode_status(w, nullptr);
  }
}

TEST_F(BlockFormatsGpu, BadDeviceArguments) {
  const std::int64_t rows = 2, cols = 64;
  GuardedBuffer dx(static_cast<std::size_t>(rows * cols) * 4);
  DeviceEncoded enc(BlockFormat::nvfp4, rows, cols, 0, 0);
  GuardedBuffer ws(16);
  const TensorView xv = TensorView::matrix(dx.data(), DType::f32, Device::cuda, rows, cols);
  EXPECT_LOWBIT_ERROR(block_encode(xv, BlockFormat::nvfp4, enc.view, Workspace{}, nullptr),
                      "workspace: data pointer is null");
  EXPECT_LOWBIT_ERROR(block_encode(xv, BlockFormat::nvfp4, enc.view, Workspace{ws.data(), 8}, nullptr),
                      "workspace: expected at least 16 bytes");
  std::vector<float> host(static_cast<std::size_t>(rows * cols));
  const TensorView host_as_cuda = TensorView::matrix(host.data(), DType::f32, Device::cuda, rows, cols);
  EXPECT_LOWBIT_ERROR(block_encode(host_as_cuda, BlockFormat::nvfp4, enc.view, Workspace{ws.data(), 16}, nullptr), "x:");
  const TensorView on_cpu = TensorView::matrix(host.data(), DType::f32, Device::cpu, rows, cols);
  EXPECT_LOWBIT_ERROR(block_encode(on_cpu, BlockFormat::nvfp4, enc.view, Workspace{ws.data(), 16}, nullptr),
                      "codes: on cuda but the input is on cpu");
}

}  // namespace
}  // namespace lowbit::test

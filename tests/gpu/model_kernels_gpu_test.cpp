// The engine's small kernels (cuda/model/model_cuda.h) against CPU twins:
// - greedy argmax: the largest logit, the lowest id on ties, NaN never wins (all NaN:
//   token 0), then ++*advance, and a NaN or Inf raises the non-finite flag. Fresh random
//   f16 logits of awkward vocabulary sizes (around the 8-wide vector loads and the
//   1024-thread block), at aligned and unaligned addresses, with planted ties,
//   infinities and NaNs.
// - add + RMSNorm: x += delta exactly (f32 + f16), h = x / rms(x) * w within one f16 ulp
//   of the FP64 value; widths on both kernels (the register one: multiples of 4 up to
//   16384; the loop one: the rest).
// - row gather: each packed output row is its source row's bytes (a memcpy twin), rows
//   repeated and out of order, source rows padded, the output poisoned and guarded.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <random>
#include <vector>

#include "common/expect_error.h"
#include "common/gpu.h"
#include "common/random.h"
#include "core/device_buffer.h"
#include "cuda/model/model_cuda.h"
#include "formats/float16.h"

namespace lowbit::test {
namespace {

class ForwardKernelsGpu : public GpuTest {};

std::int32_t argmax_twin(const std::vector<std::uint16_t>& logits) {
  std::int32_t best = -1;
  float best_v = 0.0f;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    const float v = formats::half_to_float(formats::Half{logits[i]});
    if (std::isnan(v)) continue;
    if (best < 0 || v > best_v) best = static_cast<std::int32_t>(i), best_v = v;
  }
  return best < 0 ? 0 : best;
}

TEST_F(ForwardKernelsGpu, ArgmaxToken) {
  LOWBIT_TEST_RNG(rng);
  constexpr std::uint16_t kNaN = 0x7e00, kInf = 0x7c00, kMinusInf = 0xfc00;
  std::uniform_real_distribution<float> value(-8.0f, 8.0f);
  for (const std::int64_t vocab : {1, 7, 8, 9, 1000, 8191, 49152, 50001}) {
    std::uniform_int_distribution<std::int64_t> index(0, vocab - 1);
    for (const int shift : {0, 1}) {  // elements past a 256-byte boundary
      for (int pattern = 0; pattern < 5; ++pattern) {
        SCOPED_TRACE(testing::Message() << "vocab " << vocab << " shift " << shift << " pattern " << pattern);
        std::vector<std::uint16_t> logits(static_cast<std::size_t>(vocab));
        for (auto& l : logits) l = formats::from_float<formats::Half>(value(rng)).bits;
        auto at = [&] { return static_cast<std::size_t>(index(rng)); };
        if (pattern == 1) {  // a tie for the maximum at three places
          const std::uint16_t top = formats::from_float<formats::Half>(9.0f).bits;
          for (int i = 0; i < 3; ++i) logits[at()] = top;
        } else if (pattern == 2) {  // NaNs (never win) and infinities
          for (int i = 0; i < 5; ++i) logits[at()] = kNaN;
          logits[at()] = kMinusInf;
          if (vocab > 8) logits[at()] = kInf;
        } else if (pattern == 3) {  // all NaN but one -inf
          for (auto& l : logits) l = kNaN;
          logits[at()] = kMinusInf;
        } else if (pattern == 4) {  // all NaN
          for (auto& l : logits) l = kNaN;
        }
        core::DeviceBuffer d_logits((logits.size() + 256) * 2), d_state(12);
        std::uint16_t* device_logits = d_logits.as<std::uint16_t>() + 128 + shift;
        LOWBIT_CUDA_CHECK(cudaMemcpy(device_logits, logits.data(), logits.size() * 2, cudaMemcpyHostToDevice));
        const std::int32_t state[3] = {-7, 41, 0};  // token poisoned, position, non-finite flag
        LOWBIT_CUDA_CHECK(cudaMemcpy(d_state.data(), state, 12, cudaMemcpyHostToDevice));
        std::int32_t* token = d_state.as<std::int32_t>();
        // The mirror in mapped pinned memory, poisoned: position 41 writes slot 1 only.
        std::int32_t* mirror = nullptr;
        LOWBIT_CUDA_CHECK(cudaHostAlloc(&mirror, 4 * sizeof(std::int32_t), cudaHostAllocMapped));
        std::fill(mirror, mirror + 4, -7);
        std::int32_t* mirror_device = nullptr;
        LOWBIT_CUDA_CHECK(cudaHostGetDevicePointer(&mirror_device, mirror, 0));
        cuda::model::argmax_token(device_logits, vocab, token, token + 1, token + 2, nullptr, mirror_device);
        LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<std::int32_t> got = download<std::int32_t>(d_state.data(), 3);
        EXPECT_EQ(got[0], argmax_twin(logits));
        EXPECT_EQ(got[1], 42) << "the position did not advance once";
        EXPECT_EQ(got[2], pattern >= 2 ? 1 : 0) << "the non-finite flag";
        EXPECT_EQ(mirror[0], -7) << "slot 0 belongs to even positions";
        EXPECT_EQ(mirror[1], -7);
        EXPECT_EQ(mirror[2], got[0]) << "the mirrored token";
        EXPECT_EQ(mirror[3], got[2]) << "the mirrored flag";
        LOWBIT_CUDA_CHECK(cudaFreeHost(mirror));
      }
    }
  }
}

TEST_F(ForwardKernelsGpu, AddRmsNorm) {
  LOWBIT_TEST_RNG(rng);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const std::int64_t d : {4, 64, 576, 2048, 2052, 4096, 16384, 577, 16388}) {
    for (const std::int64_t rows : {1, 3}) {
      for (const bool with_delta : {false, true}) {
        SCOPED_TRACE(testing::Message() << "d " << d << " rows " << rows << " delta " << with_delta);
        const auto count = static_cast<std::size_t>(rows * d);
        std::vector<float> x(count), w(static_cast<std::size_t>(d));
        std::vector<std::uint16_t> delta(count);
        for (float& v : x) v = 3.0f * normal(rng);
        for (float& v : w) v = 1.0f + 0.1f * normal(rng);
        for (auto& v : delta) v = formats::from_float<formats::Half>(normal(rng)).bits;
        core::DeviceBuffer dx(count * 4), dw(w.size() * 4), dd(count * 2), dh(count * 2);
        LOWBIT_CUDA_CHECK(cudaMemcpy(dx.data(), x.data(), dx.bytes(), cudaMemcpyHostToDevice));
        LOWBIT_CUDA_CHECK(cudaMemcpy(dw.data(), w.data(), dw.bytes(), cudaMemcpyHostToDevice));
        LOWBIT_CUDA_CHECK(cudaMemcpy(dd.data(), delta.data(), dd.bytes(), cudaMemcpyHostToDevice));
        LOWBIT_CUDA_CHECK(cudaMemset(dh.data(), 0xff, dh.bytes()));  // NaN where not written
        cuda::model::add_rms_norm(dx.as<float>(), with_delta ? dd.as<std::uint16_t>() : nullptr, dw.as<float>(), rows,
                                  d, 1e-5f, dh.as<std::uint16_t>(), nullptr);
        LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
        const auto gx = download<float>(dx.data(), count);
        const auto gh = download<std::uint16_t>(dh.data(), count);
        int bad = 0;
        for (std::int64_t r = 0; r < rows; ++r) {
          double ss = 0.0;
          std::vector<float> want_x(static_cast<std::size_t>(d));
          for (std::int64_t i = 0; i < d; ++i) {
            const auto e = static_cast<std::size_t>(r * d + i);
            want_x[static_cast<std::size_t>(i)] =
                with_delta ? x[e] + formats::half_to_float(formats::Half{delta[e]}) : x[e];
            ss += static_cast<double>(want_x[static_cast<std::size_t>(i)]) * want_x[static_cast<std::size_t>(i)];
          }
          const double inv = 1.0 / std::sqrt(ss / static_cast<double>(d) + 1e-5);
          for (std::int64_t i = 0; i < d; ++i) {
            const auto e = static_cast<std::size_t>(r * d + i);
            if (gx[e] != want_x[static_cast<std::size_t>(i)] && bad++ < 3) ADD_FAILURE() << "x at " << e;
            const double want = want_x[static_cast<std::size_t>(i)] * inv * w[static_cast<std::size_t>(i)];
            const double got = formats::half_to_float(formats::Half{gh[e]});
            const double ulp = std::ldexp(1.0, std::max(std::ilogb(std::max(std::fabs(want), 1e-7)), -14) - 10);
            if (!(std::fabs(got - want) <= ulp) && bad++ < 3) ADD_FAILURE() << "h at " << e << ": " << got << " vs " << want;
          }
        }
        EXPECT_EQ(bad, 0);
      }
    }
  }
}

TEST_F(ForwardKernelsGpu, GatherRows) {
  LOWBIT_TEST_RNG(rng);
  for (const std::size_t row_bytes : {std::size_t{4}, std::size_t{1540}, std::size_t{16384}}) {
    for (const std::size_t pad : {std::size_t{0}, std::size_t{12}}) {
      SCOPED_TRACE(testing::Message() << "row_bytes " << row_bytes << " pad " << pad);
      const std::size_t stride = row_bytes + pad, src_rows = 37;
      std::vector<std::uint8_t> src(stride * src_rows);
      for (auto& b : src) b = static_cast<std::uint8_t>(rng());
      std::vector<std::int32_t> rows;
      for (int i = 0; i < 23; ++i) rows.push_back(static_cast<std::int32_t>(rng() % src_rows));
      rows.push_back(rows.front());  // a repeat
      core::DeviceBuffer d_src(src.size()), d_rows(rows.size() * 4);
      LOWBIT_CUDA_CHECK(cudaMemcpy(d_src.data(), src.data(), src.size(), cudaMemcpyHostToDevice));
      LOWBIT_CUDA_CHECK(cudaMemcpy(d_rows.data(), rows.data(), rows.size() * 4, cudaMemcpyHostToDevice));
      GuardedBuffer dst(rows.size() * row_bytes);
      dst.poison(0xA5);
      cuda::model::gather_rows(d_src.data(), stride, row_bytes, d_rows.as<std::int32_t>(),
                               static_cast<std::int64_t>(rows.size()), dst.data(), nullptr);
      LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
      EXPECT_TRUE(dst.guards_intact("gather_rows"));
      const std::vector<std::uint8_t> got = download<std::uint8_t>(dst.data(), rows.size() * row_bytes);
      for (std::size_t i = 0; i < rows.size(); ++i) {
        ASSERT_EQ(std::memcmp(got.data() + i * row_bytes, src.data() + static_cast<std::size_t>(rows[i]) * stride,
                              row_bytes),
                  0)
            << "row " << i << " (source row " << rows[i] << ")";
      }
    }
  }
  core::DeviceBuffer any(64);
  EXPECT_LOWBIT_ERROR(cuda::model::gather_rows(any.data(), 8, 6, any.as<std::int32_t>(), 1, any.data(), nullptr),
                      "gather_rows: row_bytes 6");
  EXPECT_LOWBIT_ERROR(cuda::model::gather_rows(any.data(), 4, 8, any.as<std::int32_t>(), 1, any.data(), nullptr),
                      "stride >= row");
  EXPECT_LOWBIT_ERROR(cuda::model::gather_rows(nullptr, 8, 8, any.as<std::int32_t>(), 1, any.data(), nullptr),
                      "null or unaligned");
}

}  // namespace
}  // namespace lowbit::test

// The device sampler (cuda/model/sampling_cuda.h) against the CPU sampler
// (engine/sampling.h): the same token for every row, on fresh random f32 logits of
// awkward vocabulary sizes (around warps, the 512-thread block and the radix buckets),
// with planted ties, NaN and infinities, per-row parameters drawn at random (greedy,
// top-k from 1 to past the vocabulary, top-p, min-p, penalties, temperatures, seeds,
// draw indexes), rows padded in a wider stride; outputs and their guards poisoned. The
// f16 input (the engine's logits) gives the CPU's token for the f16 values, and the
// non-finite flags mark exactly the rows with a NaN or an infinity.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include "common/expect_error.h"
#include "common/gpu.h"
#include "common/random.h"
#include "core/device_buffer.h"
#include "cuda/model/sampling_cuda.h"
#include "engine/sampling.h"
#include "formats/float16.h"

namespace lowbit::test {
namespace {

namespace fs = formats::sampling;
using engine::TokenCount;

class SamplingGpu : public GpuTest {};

struct Row {
  std::vector<float> logits;
  fs::RowParams params;
  std::vector<TokenCount> penalties;
};

std::vector<float> make_logits(Rng& rng, std::int64_t vocab, int pattern) {
  std::normal_distribution<float> normal(0.0f, pattern == 3 ? 30.0f : 3.0f);
  std::uniform_int_distribution<std::int64_t> index(0, vocab - 1);
  std::vector<float> l(static_cast<std::size_t>(vocab));
  for (float& x : l) x = normal(rng);
  auto at = [&] { return static_cast<std::size_t>(index(rng)); };
  switch (pattern) {
    case 1:  // many ties, the maximum among them
      for (float& x : l) x = std::round(x);
      break;
    case 2:  // NaN, infinities
      for (int i = 0; i < 3; ++i) l[at()] = NAN;
      l[at()] = -INFINITY;
      if (vocab > 10) l[at()] = INFINITY;
      break;
    case 4:  // all equal
      std::fill(l.begin(), l.end(), 0.25f);
      break;
    case 5:  // mostly -inf
      for (float& x : l) x = -INFINITY;
      l[at()] = 1.0f;
      l[at()] = 0.5f;
      break;
    default: break;
  }
  return l;
}

fs::RowParams make_params(Rng& rng, std::int64_t vocab) {
  std::uniform_int_distribution<int> pick(0, 99);
  fs::RowParams p;
  const float temps[] = {0.0f, 0.3f, 0.7f, 1.0f, 1.5f, 5.0f, 1e-6f};
  p.temperature = temps[pick(rng) % 7];
  const std::int64_t ks[] = {0, 1, 2, 5, 40, vocab - 1, vocab, vocab + 5};
  p.top_k = static_cast<std::int32_t>(std::max<std::int64_t>(0, ks[pick(rng) % 8]));
  const float ps[] = {1.0f, 0.95f, 0.9f, 0.5f, 0.01f, 0.999999f};
  p.top_p = ps[pick(rng) % 6];
  const float mins[] = {0.0f, 0.05f, 0.2f, 0.9f};
  p.min_p = mins[pick(rng) % 4];
  if (pick(rng) < 40) {
    p.repeat_penalty = 1.3f, p.frequency_penalty = 0.2f, p.presence_penalty = -0.4f;
  }
  p.seed = (static_cast<std::uint64_t>(rng()) << 32) | rng();
  p.draw = rng() % 1000;
  return p;
}

std::vector<TokenCount> make_penalties(Rng& rng, std::int64_t vocab) {
  std::set<std::int32_t> ids;
  const int n = static_cast<int>(rng() % 12);
  for (int i = 0; i < n; ++i) ids.insert(static_cast<std::int32_t>(rng() % static_cast<std::uint32_t>(vocab)));
  std::vector<TokenCount> out;
  for (const std::int32_t id : ids) out.push_back({id, 1 + static_cast<std::int32_t>(rng() % 4)});
  return out;
}

// The logits rounded to f16 (NaN and infinities kept), as f32.
std::vector<float> rounded_to_f16(std::vector<float> logits) {
  for (float& x : logits) x = formats::half_to_float(formats::float_to_half(x));
  return logits;
}

struct DeviceDraw {
  std::vector<std::int32_t> tokens, non_finite;
};

// Runs the device sampler over `rows` (logits padded to `stride`; with f16, rounded to
// f16 and passed as such) and returns its tokens and non-finite flags.
DeviceDraw sample_on_device(const std::vector<Row>& rows, std::int64_t vocab, std::int64_t stride, bool f16 = false) {
  const auto n = static_cast<std::int64_t>(rows.size());
  std::vector<float> logits(static_cast<std::size_t>(n * stride), 1e30f);  // padding must not be read
  std::vector<fs::RowParams> params;
  std::vector<std::int32_t> offsets{0}, ids, counts;
  for (std::int64_t r = 0; r < n; ++r) {
    const Row& row = rows[static_cast<std::size_t>(r)];
    std::copy(row.logits.begin(), row.logits.end(), logits.begin() + r * stride);
    params.push_back(row.params);
    for (const TokenCount& pc : row.penalties) ids.push_back(pc.id), counts.push_back(pc.count);
    offsets.push_back(static_cast<std::int32_t>(ids.size()));
  }
  std::vector<std::uint16_t> halves(logits.size());
  for (std::size_t i = 0; i < logits.size(); ++i) halves[i] = formats::float_to_half(logits[i]).bits;
  core::DeviceBuffer d_logits(logits.size() * sizeof(float)), d_params(params.size() * sizeof(fs::RowParams));
  core::DeviceBuffer d_halves(halves.size() * 2);
  LOWBIT_CUDA_CHECK(cudaMemcpy(d_halves.data(), halves.data(), d_halves.bytes(), cudaMemcpyHostToDevice));
  core::DeviceBuffer d_offsets(offsets.size() * sizeof(std::int32_t));
  core::DeviceBuffer d_ids(std::max<std::size_t>(1, ids.size()) * sizeof(std::int32_t));
  core::DeviceBuffer d_counts(std::max<std::size_t>(1, counts.size()) * sizeof(std::int32_t));
  const std::size_t ws_bytes = cuda::model::sample_rows_workspace_bytes(n, vocab);
  core::DeviceBuffer workspace(std::max<std::size_t>(1, ws_bytes));
  GuardedBuffer tokens(static_cast<std::size_t>(n) * sizeof(std::int32_t));
  GuardedBuffer flags(static_cast<std::size_t>(n) * sizeof(std::int32_t));
  tokens.poison(0xA5);
  flags.poison(0xA5);
  LOWBIT_CUDA_CHECK(cudaMemset(workspace.data(), 0xff, workspace.bytes()));  // NaN everywhere
  LOWBIT_CUDA_CHECK(cudaMemcpy(d_logits.data(), logits.data(), d_logits.bytes(), cudaMemcpyHostToDevice));
  LOWBIT_CUDA_CHECK(cudaMemcpy(d_params.data(), params.data(), d_params.bytes(), cudaMemcpyHostToDevice));
  LOWBIT_CUDA_CHECK(cudaMemcpy(d_offsets.data(), offsets.data(), d_offsets.bytes(), cudaMemcpyHostToDevice));
  if (!ids.empty()) {
    LOWBIT_CUDA_CHECK(cudaMemcpy(d_ids.data(), ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
    LOWBIT_CUDA_CHECK(cudaMemcpy(d_counts.data(), counts.data(), counts.size() * 4, cudaMemcpyHostToDevice));
  }
  cuda::model::SamplingBatch batch;
  if (f16) {
    batch.logits_f16 = static_cast<const std::uint16_t*>(d_halves.data());
  } else {
    batch.logits = static_cast<const float*>(d_logits.data());
  }
  batch.non_finite = static_cast<std::int32_t*>(flags.data());
  batch.rows = n, batch.vocab = vocab, batch.logits_stride = stride;
  batch.params = static_cast<const fs::RowParams*>(d_params.data());
  batch.penalty_offsets = static_cast<const std::int32_t*>(d_offsets.data());
  batch.penalty_ids = static_cast<const std::int32_t*>(d_ids.data());
  batch.penalty_counts = static_cast<const std::int32_t*>(d_counts.data());
  batch.tokens = static_cast<std::int32_t*>(tokens.data());
  cuda::model::sample_rows(batch, workspace.data(), workspace.bytes(), nullptr);
  LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_TRUE(tokens.guards_intact("tokens"));
  EXPECT_TRUE(flags.guards_intact("non_finite"));
  return {download<std::int32_t>(tokens.data(), static_cast<std::size_t>(n)),
          download<std::int32_t>(flags.data(), static_cast<std::size_t>(n))};
}

TEST_F(SamplingGpu, SameTokenAsTheCpuSampler) {
  LOWBIT_TEST_RNG(rng);
  for (const std::int64_t vocab : sanitizer_subset<std::int64_t>(
           {1, 2, 31, 33, 255, 256, 257, 511, 513, 1000, 4097, 49152, 50001, 131073}, {0, 3, 6, 10, 12})) {
    for (const std::int64_t pad : {0, 3}) {
      SCOPED_TRACE(testing::Message() << "vocab " << vocab << " stride pad " << pad);
      std::vector<Row> rows;
      const int count = under_sanitizer() ? 6 : vocab > 50000 ? 12 : 24;  // 6: every kind of row (r % 6, r % 3)
      for (int r = 0; r < count; ++r) {
        Row row;
        row.logits = make_logits(rng, vocab, r % 6);
        row.params = make_params(rng, vocab);
        if (r % 3 == 0) row.penalties = make_penalties(rng, vocab);
        rows.push_back(std::move(row));
      }
      for (const bool f16 : {false, true}) {
        SCOPED_TRACE(f16 ? "f16 logits" : "f32 logits");
        const DeviceDraw draw = sample_on_device(rows, vocab, vocab + pad, f16);
        const std::vector<std::int32_t>& got = draw.tokens;
        for (std::size_t r = 0; r < rows.size(); ++r) {
          const fs::RowParams& p = rows[r].params;
          const std::vector<float> logits = f16 ? rounded_to_f16(rows[r].logits) : rows[r].logits;
          const bool finite = std::all_of(logits.begin(), logits.end(), [](float x) { return std::isfinite(x); });
          EXPECT_EQ(draw.non_finite[r], finite ? 0 : 1) << "row " << r;
          const std::int32_t want = engine::sample_token(logits, p, rows[r].penalties);
          ASSERT_EQ(got[r], want) << "row " << r << " (pattern " << r % 6 << "): temperature " << p.temperature
                                  << ", top_k " << p.top_k << ", top_p " << p.top_p << ", min_p " << p.min_p
                                  << ", penalties " << rows[r].penalties.size() << ", seed " << p.seed << ", draw "
                                  << p.draw;
        }
      }
    }
  }
}

// Many draws of one wide row: each equals the CPU's, and they spread over many tokens
// (the kernel's distribution is not stuck on the top token).
TEST_F(SamplingGpu, ManyDrawsOfOneRow) {
  LOWBIT_TEST_RNG(rng);
  const std::int64_t vocab = 32000;
  std::vector<float> logits = make_logits(rng, vocab, 0);
  std::vector<Row> rows;
  for (std::uint64_t d = 0; d < 256; ++d) {
    Row row;
    row.logits = logits;
    row.params.temperature = 1.0f, row.params.top_k = 0, row.params.top_p = 0.98f, row.params.min_p = 0.0f;
    row.params.seed = 99, row.params.draw = d;
    rows.push_back(row);
  }
  const std::vector<std::int32_t> got = sample_on_device(rows, vocab, vocab).tokens;
  std::set<std::int32_t> distinct(got.begin(), got.end());
  EXPECT_GT(distinct.size(), 20u);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    ASSERT_EQ(got[r], engine::sample_token(rows[r].logits, rows[r].params, {})) << "draw " << r;
  }
}

TEST_F(SamplingGpu, BadArgumentsAreNamed) {
  cuda::model::SamplingBatch batch;
  batch.rows = 2, batch.vocab = 0, batch.logits_stride = 0;
  EXPECT_LOWBIT_ERROR(cuda::model::sample_rows(batch, nullptr, 0, nullptr), "sample_rows: vocab = 0");
  batch.vocab = 10, batch.logits_stride = 9;
  EXPECT_LOWBIT_ERROR(cuda::model::sample_rows(batch, nullptr, 0, nullptr), "logits_stride = 9, expected >= vocab");
  batch.logits_stride = 10;
  EXPECT_LOWBIT_ERROR(cuda::model::sample_rows(batch, nullptr, 0, nullptr), "exactly one of logits (f32) and logits_f16");
  core::DeviceBuffer any(64);
  batch.logits = static_cast<const float*>(any.data());
  batch.logits_f16 = static_cast<const std::uint16_t*>(any.data());
  EXPECT_LOWBIT_ERROR(cuda::model::sample_rows(batch, nullptr, 0, nullptr), "exactly one of logits (f32) and logits_f16");
  batch.logits_f16 = nullptr;
  EXPECT_LOWBIT_ERROR(cuda::model::sample_rows(batch, nullptr, 0, nullptr), "null params or tokens");
  batch.logits = static_cast<const float*>(any.data());
  batch.params = static_cast<const fs::RowParams*>(any.data());
  batch.tokens = static_cast<std::int32_t*>(any.data());
  EXPECT_LOWBIT_ERROR(cuda::model::sample_rows(batch, any.data(), 64, nullptr), "workspace of 64 bytes");
  batch.rows = 0;
  cuda::model::sample_rows(batch, nullptr, 0, nullptr);  // nothing to do
}

}  // namespace
}  // namespace lowbit::test

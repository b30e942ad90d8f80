// The CPU reference of quantized attention (src/cpu/attention.h) and the API's
// validation: a hand-checked tiny case, causal against non-causal on prefixes, odd L,
// the GQA head mapping, the row-subsample property the benchmark relies on, and bad
// input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <vector>

#include "common/attention_inputs.h"
#include "common/expect_error.h"
#include "common/random.h"
#include "cpu/quantized_attention.h"
#include "lowbit/quantized_attention.h"

namespace lowbit::test {
namespace {

// NF4 weight [rows x 64] = the identity on its first rows (code 15 = level 1.0 on the
// diagonal, code 7 = 0.0 elsewhere, absmax 1): the projection copies x.
HostBlockWeight nf4_identity(std::int64_t rows) {
  HostBlockWeight w(BlockFormat::nf4, rows, 64);
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t k = 0; k < 64; ++k) {
      const std::uint8_t code = r == k ? 15 : 7;
      w.codes[r * 32 + k / 2] |= static_cast<std::uint8_t>(code << (4 * (k % 2)));
    }
    const float one = 1.0f;
    std::memcpy(&w.scales[r * 4], &one, 4);
  }
  return w;
}

struct Tiny {
  AttentionConfig c{2, 64, 1, 1, 64, false, BlockFormat::nf4};
  std::vector<formats::Half> x = to_half(std::vector<float>(128, 0.0f));
  HostBlockWeight wq = nf4_identity(64), wk = nf4_identity(64), wv = nf4_identity(64);
  std::vector<formats::Half> bv = to_half(std::vector<float>(64, 0.5f));
  Tiny() {
    x[0] = formats::from_float<formats::Half>(1.0f);       // row 0 = e0
    x[64 + 1] = formats::from_float<formats::Half>(2.0f);  // row 1 = 2 e1
  }
  std::vector<double> run(bool causal, bool bias) {
    c.causal = causal;
    AttentionWeights w{wq.view(), wk.view(), wv.view(), {}, {}, {}};
    if (bias) w.bv = TensorView::vector(bv.data(), DType::f16, Device::cpu, 64);
    return cpu::attention_reference(TensorView::matrix(x.data(), DType::f16, Device::cpu, 2, 64), w, c, 2);
  }
};

TEST(AttentionReference, HandCheckedTinyCase) {
  Tiny t;
  // Scores (scale 1/8): row 0: [1/8, 0]; row 1: [0, 4/8].
  const double p00 = std::exp(0.125) / (std::exp(0.125) + 1.0), p11 = std::exp(0.5) / (1.0 + std::exp(0.5));
  const std::vector<double> nc = t.run(false, false);
  EXPECT_NEAR(nc[0], p00, 1e-12);
  EXPECT_NEAR(nc[1], 2.0 * (1.0 - p00), 1e-12);
  EXPECT_NEAR(nc[64 + 0], 1.0 - p11, 1e-12);
  EXPECT_NEAR(nc[64 + 1], 2.0 * p11, 1e-12);
  EXPECT_EQ(nc[2], 0.0);
  const std::vector<double> ca = t.run(true, false);
  EXPECT_EQ(ca[0], 1.0);  // row 0 sees key 0 only
  EXPECT_EQ(ca[1], 0.0);
  EXPECT_NEAR(ca[64 + 0], 1.0 - p11, 1e-12);
  EXPECT_NEAR(ca[64 + 1], 2.0 * p11, 1e-12);
  // A V bias shifts every output by itself (the probabilities sum to 1).
  const std::vector<double> biased = t.run(true, true);
  for (int i = 0; i < 128; ++i) EXPECT_NEAR(biased[i], ca[i] + 0.5, 1e-12) << i;
}

TEST(AttentionReference, CausalRowIsNonCausalOverItsPrefix) {
  LOWBIT_TEST_RNG(rng);
  for (BlockFormat f : {BlockFormat::nf4, BlockFormat::mxfp4, BlockFormat::nvfp4}) {
    HostAttention h(rng, {9, 128, 2, 1, 64, true, f}, true);
    const std::vector<double> causal = cpu::attention_reference(h.x_view(), h.weights(), h.config, 9);
    const std::int64_t n = 2 * 64;
    for (std::int64_t i : {0, 4, 8}) {
      AttentionConfig prefix = h.config;
      prefix.seq_len = i + 1;
      prefix.causal = false;
      const TensorView xp = TensorView::matrix(h.x.data(), DType::f16, Device::cpu, i + 1, 128);
      const std::vector<double> full = cpu::attention_reference(xp, h.weights(), prefix, i + 1);
      for (std::int64_t j = 0; j < n; ++j) EXPECT_NEAR(causal[i * n + j], full[i * n + j], 1e-12) << i << " " << j;
    }
    // Non-causal row 0 attends to later keys too: it differs.
    AttentionConfig nc = h.config;
    nc.causal = false;
    const std::vector<double> all = cpu::attention_reference(h.x_view(), h.weights(), nc, 9);
    double diff = 0.0;
    for (std::int64_t j = 0; j < n; ++j) diff = std::max(diff, std::abs(all[j] - causal[j]));
    EXPECT_GT(diff, 1e-3);
  }
}

TEST(AttentionReference, LeadingRowsNeedOnlyTheirPrefixWhenCausal) {
  LOWBIT_TEST_RNG(rng);
  HostAttention h(rng, {33, 64, 2, 2, 64, true, BlockFormat::mxfp4}, false);
  const std::vector<double> all = cpu::attention_reference(h.x_view(), h.weights(), h.config, 33);
  const std::vector<double> first = cpu::attention_reference(h.x_view(), h.weights(), h.config, 5);
  for (std::size_t i = 0; i < first.size(); ++i) EXPECT_EQ(first[i], all[i]) << i;
}

TEST(AttentionReference, GqaUsesKvHeadHOverGroup) {
  LOWBIT_TEST_RNG(rng);
  for (BlockFormat f : {BlockFormat::nf4, BlockFormat::nvfp4}) {
    // H 4 over Hkv 2 equals MHA whose kv heads are [0, 0, 1, 1] copies.
    HostAttention g(rng, {7, 64, 4, 2, 64, false, f}, true);
    const std::vector<double> gqa = cpu::attention_reference(g.x_view(), g.weights(), g.config, 7);
    auto widen = [&](const HostBlockWeight& w, const std::vector<formats::Half>& b, HostBlockWeight& out,
                     std::vector<formats::Half>& bout) {
      out = HostBlockWeight(f, 4 * 64, 64);
      out.global = w.global;
      const std::size_t code_row = 32, scale_row = out.scales.size() / (4 * 64);
      bout.resize(4 * 64);
      for (int h = 0; h < 4; ++h) {
        for (int r = 0; r < 64; ++r) {
          const std::size_t src = (h / 2) * 64 + r, dst = h * 64 + r;
          std::copy_n(&w.codes[src * code_row], code_row, &out.codes[dst * code_row]);
          std::copy_n(&w.scales[src * scale_row], scale_row, &out.scales[dst * scale_row]);
          bout[dst] = b[src];
        }
      }
    };
    HostBlockWeight wk4, wv4;
    std::vector<formats::Half> bk4, bv4;
    widen(g.wk, g.bk, wk4, bk4);
    widen(g.wv, g.bv, wv4, bv4);
    AttentionConfig mha = g.config;
    mha.kv_heads = 4;
    AttentionWeights w = g.weights();
    w.wk = wk4.view(), w.wv = wv4.view();
    w.bk = TensorView::vector(bk4.data(), DType::f16, Device::cpu, 256);
    w.bv = TensorView::vector(bv4.data(), DType::f16, Device::cpu, 256);
    const std::vector<double> ref = cpu::attention_reference(g.x_view(), w, mha, 7);
    ASSERT_EQ(ref.size(), gqa.size());
    for (std::size_t i = 0; i < ref.size(); ++i) EXPECT_EQ(gqa[i], ref[i]) << i;
  }
}

TEST(AttentionApi, CpuPathIsTheReferenceRoundedOnceOddL) {
  LOWBIT_TEST_RNG(rng);
  for (std::int64_t l : {1, 7, 33}) {
    for (bool causal : {false, true}) {
      // With biases, and without (default views: what the H100 run of 1fc6555 caught).
      HostAttention h(rng, {l, 128, 2, 1, 128, causal, BlockFormat::nvfp4}, l != 7);
      const std::vector<double> ref = cpu::attention_reference(h.x_view(), h.weights(), h.config, l);
      std::vector<formats::Half> out(static_cast<std::size_t>(l * 256), formats::Half{0xffff});
      quantized_attention(h.x_view(), h.weights(), h.config, AttentionVariant::fused_two_kernel,
                          TensorView::matrix(out.data(), DType::f16, Device::cpu, l, 256), Workspace{}, nullptr);
      for (std::size_t i = 0; i < out.size(); ++i) {
        const double got = formats::half_to_float(out[i]);
        ASSERT_LE(std::abs(got - ref[i]), std::abs(ref[i]) * 1e-3 + 1e-7) << "L " << l << " element " << i;
      }
    }
  }
}

class AttentionBadInput : public ::testing::Test {
 protected:
  AttentionBadInput() : rng(1), h(rng, {4, 64, 2, 1, 64, true, BlockFormat::nf4}, true), out(4 * 128) {}
  void call(const AttentionConfig& c) { call(h.x_view(), h.weights(), c, out_view()); }
  void call(const TensorView& x, const AttentionWeights& w, const AttentionConfig& c, const TensorView& o) {
    quantized_attention(x, w, c, AttentionVariant::fused_two_kernel, o, Workspace{}, nullptr);
  }
  TensorView out_view() { return TensorView::matrix(out.data(), DType::f16, Device::cpu, 4, 128); }
  Rng rng;
  HostAttention h;
  std::vector<formats::Half> out;
};

TEST_F(AttentionBadInput, Config) {
  AttentionConfig c = h.config;
  c.seq_len = 0;
  EXPECT_LOWBIT_ERROR(call(c), "seq_len: expected L >= 1, got 0");
  c = h.config, c.head_dim = 96;
  EXPECT_LOWBIT_ERROR(call(c), "head_dim: expected 64 or 128, got 96");
  c = h.config, c.heads = 3, c.kv_heads = 2;
  EXPECT_LOWBIT_ERROR(call(c), "kv_heads: heads 3 is not a multiple of kv_heads 2");
  c = h.config, c.kv_heads = 0;
  EXPECT_LOWBIT_ERROR(call(c), "kv_heads: expected >= 1");
  c = h.config, c.d_model = 32;  // NF4 blocks of 64
  EXPECT_LOWBIT_ERROR(call(c), "d_model: 32 is not a multiple of the nf4 block size 64");
  c = h.config, c.d_model = 48, c.format = BlockFormat::nvfp4;  // divides 16, not the K step
  EXPECT_LOWBIT_ERROR(call(c), "d_model: expected a multiple of 64");
  EXPECT_LOWBIT_ERROR(attention_workspace_bytes(c, AttentionVariant::tiled_fused), "d_model: expected a multiple of 64");
}

// out must not alias any input: the weights' codes and scales, the biases, x.
TEST_F(AttentionBadInput, OutputAliasingAnyInputIsRejected) {
  const AttentionConfig c = h.config;
  const std::vector<std::uint8_t> codes_before = h.wq.codes;
  const auto over = [&](void* data) { return TensorView::matrix(data, DType::f16, Device::cpu, 4, 128); };
  EXPECT_LOWBIT_ERROR(call(h.x_view(), h.weights(), c, over(h.wq.codes.data())),
                      "out: overlaps wq.codes in memory; an output must not alias an input");
  EXPECT_EQ(h.wq.codes, codes_before) << "the weights were written";
  EXPECT_LOWBIT_ERROR(call(h.x_view(), h.weights(), c, over(h.wv.codes.data() + 64)), "out: overlaps wv.codes");
  EXPECT_LOWBIT_ERROR(call(h.x_view(), h.weights(), c, over(h.wk.scales.data())), "out: overlaps wk.scales");
  // A bias at the end of out's span (out reaches into it).
  std::vector<formats::Half> shared(4 * 128 + 64);
  AttentionWeights w = h.weights();
  w.bk = TensorView::vector(shared.data() + 4 * 128 - 1, DType::f16, Device::cpu, 64);
  EXPECT_LOWBIT_ERROR(call(h.x_view(), w, c, over(shared.data())), "out: overlaps bk");
  EXPECT_LOWBIT_ERROR(call(h.x_view(), h.weights(), c, over(h.x.data())), "out: overlaps x");
}

TEST_F(AttentionBadInput, Tensors) {
  const AttentionConfig c = h.config;
  TensorView x = h.x_view();
  x.data = nullptr;
  EXPECT_LOWBIT_ERROR(call(x, h.weights(), c, out_view()), "x: data pointer is null");
  x = h.x_view(), x.dtype = DType::f32;
  EXPECT_LOWBIT_ERROR(call(x, h.weights(), c, out_view()), "x: expected dtype f16, got f32");
  AttentionConfig longer = c;
  longer.seq_len = 5;
  EXPECT_LOWBIT_ERROR(call(h.x_view(), h.weights(), longer, out_view()), "x: expected shape [5, 64], got [4, 64]");
  TensorView o = out_view();
  o.shape[1] = 64;
  EXPECT_LOWBIT_ERROR(call(h.x_view(), h.weights(), c, o), "out: expected shape [4, 128], got [4, 64]");
  AttentionWeights w = h.weights();
  w.wk = h.wq.view();  // [128 x 64] where Hkv * hd = 64 rows are expected
  EXPECT_LOWBIT_ERROR(call(h.x_view(), w, c, out_view()), "wk: expected shape [64, 32], got [128, 32]");
  w = h.weights();
  w.wq.scales.data = nullptr;
  EXPECT_LOWBIT_ERROR(call(h.x_view(), w, c, out_view()), "wq.scales: data pointer is null");
  w = h.weights();
  w.bk.shape[0] = 32;
  EXPECT_LOWBIT_ERROR(call(h.x_view(), w, c, out_view()), "bk: expected a contiguous vector of 64 elements");
  w = h.weights();
  w.bq.dtype = DType::f32;
  EXPECT_LOWBIT_ERROR(call(h.x_view(), w, c, out_view()), "bq: expected dtype f16, got f32");
  AttentionConfig other = c;
  other.format = BlockFormat::mxfp4;  // nf4 scales are f32, mxfp4 takes u8
  EXPECT_LOWBIT_ERROR(call(h.x_view(), h.weights(), other, out_view()), "wq: expected dtype u8, got f32");
}

TEST(AttentionApi, WorkspaceGrowsWithTheBaselinesIntermediates) {
  const AttentionConfig c{100, 256, 4, 2, 64, true, BlockFormat::mxfp4};
#if LOWBIT_WITH_CUDA
  const std::size_t qkv = 100 * 512 * 2, w = 512 * 256 * 2, scores = 4 * 100 * 100 * 4;
  EXPECT_GE(attention_workspace_bytes(c, AttentionVariant::fused_two_kernel), qkv);
  EXPECT_LT(attention_workspace_bytes(c, AttentionVariant::fused_two_kernel), qkv + 256);
  EXPECT_GE(attention_workspace_bytes(c, AttentionVariant::tiled_fused), qkv + w);
  EXPECT_GE(attention_workspace_bytes(c, AttentionVariant::naive_sequential), qkv + w + scores);
  EXPECT_EQ(attention_workspace_bytes(c, AttentionVariant::naive_sequential),
            attention_workspace_bytes(c, AttentionVariant::tiled_sequential));
#else
  EXPECT_EQ(attention_workspace_bytes(c, AttentionVariant::naive_sequential), 0u);
#endif
  EXPECT_STREQ(attention_variant_name(AttentionVariant::fused_two_kernel), "ours");
}

}  // namespace
}  // namespace lowbit::test

// flash_attention's CPU path (src/cpu/flash_attention.h, the GPU tests' oracle) against
// the definition computed another way (each sequence's whole score matrix, the causal
// mask by position), for batches of sequences of mixed lengths, causal chunks (fewer
// queries than keys), GQA groups, both dtypes and a given scale; the output rounded once
// from it; and the API's errors for bad arguments.
#include <gtest/gtest.h>

#include <cmath>
#include <utility>
#include <vector>

#include "common/expect_error.h"
#include "common/flash_inputs.h"
#include "common/random.h"
#include "cpu/flash_attention.h"
#include "lowbit/flash_attention.h"

namespace lowbit::test {
namespace {

// The definition: sequence by sequence, head by head, S = scale Q K^T with the causal
// mask by position (query i at k_len - q_len + i), softmax over each row, times V.
std::vector<double> by_definition(const FlashInputs& in) {
  const FlashAttentionParams& p = in.params;
  const std::int64_t hd = p.head_dim, group = p.heads / p.kv_heads;
  const double scale = p.scale > 0 ? p.scale : 1.0 / std::sqrt(static_cast<double>(hd));
  std::vector<double> out(static_cast<std::size_t>(in.rows_q() * in.q_cols()));
  for (std::size_t b = 0; b + 1 < in.cu_q.size(); ++b) {
    const std::int64_t q0 = in.cu_q[b], nq = in.cu_q[b + 1] - q0, k0 = in.cu_k[b], nk = in.cu_k[b + 1] - k0;
    for (std::int64_t h = 0; h < p.heads; ++h) {
      std::vector<double> s(static_cast<std::size_t>(nq * nk));
      for (std::int64_t i = 0; i < nq; ++i) {
        for (std::int64_t j = 0; j < nk; ++j) {
          double dot = 0;
          for (std::int64_t d = 0; d < hd; ++d) {
            dot += in.value(in.q[static_cast<std::size_t>((q0 + i) * in.ldq + h * hd + d)]) *
                   in.value(in.k[static_cast<std::size_t>((k0 + j) * in.ldk + (h / group) * hd + d)]);
          }
          const bool masked = p.causal && j > nk - nq + i;
          s[static_cast<std::size_t>(i * nk + j)] = masked ? -INFINITY : dot * scale;
        }
        double top = -INFINITY, sum = 0;
        for (std::int64_t j = 0; j < nk; ++j) top = std::max(top, s[static_cast<std::size_t>(i * nk + j)]);
        for (std::int64_t j = 0; j < nk; ++j) sum += std::exp(s[static_cast<std::size_t>(i * nk + j)] - top);
        for (std::int64_t d = 0; d < hd; ++d) {
          double o = 0;
          for (std::int64_t j = 0; j < nk; ++j) {
            o += std::exp(s[static_cast<std::size_t>(i * nk + j)] - top) / sum *
                 in.value(in.v[static_cast<std::size_t>((k0 + j) * in.ldk + (h / group) * hd + d)]);
          }
          out[static_cast<std::size_t>((q0 + i) * in.q_cols() + h * hd + d)] = o;
        }
      }
    }
  }
  return out;
}

TEST(FlashAttentionCpu, EqualsTheDefinition) {
  LOWBIT_TEST_RNG(rng);
  struct Case {
    FlashAttentionParams p;
    std::vector<std::pair<std::int32_t, std::int32_t>> lengths;
  };
  const std::vector<Case> cases = {
      {{4, 4, 64, true, 0.0f}, {{5, 5}}},
      {{6, 2, 64, true, 0.0f}, {{1, 1}, {3, 9}, {7, 7}, {2, 40}}},  // chunks of 3 and 2 at the ends of their keys
      {{6, 3, 64, false, 0.0f}, {{4, 11}, {9, 2}}},                  // more queries than keys: not causal
      {{8, 1, 128, true, 0.3f}, {{17, 30}}},
  };
  for (const Case& c : cases) {
    for (DType dtype : {DType::f16, DType::bf16}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " heads " + std::to_string(c.p.heads) + "/" +
                   std::to_string(c.p.kv_heads) + (c.p.causal ? " causal" : ""));
      FlashInputs in(rng, c.p, dtype, c.lengths, 1.5f);
      const std::vector<double> want = by_definition(in);
      const std::vector<double> got = cpu::flash_attention_f64(
          in.view(in.q, in.rows_q(), in.q_cols(), in.ldq), in.view(in.k, in.rows_k(), in.kv_cols(), in.ldk),
          in.view(in.v, in.rows_k(), in.kv_cols(), in.ldk), in.cu_q, in.cu_k, c.p);
      ASSERT_EQ(got.size(), want.size());
      for (std::size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-12 * (1 + std::fabs(want[i]))) << i;
      // The API's CPU path: that, rounded once to the dtype; the rows' padding untouched.
      std::vector<std::uint16_t> out(static_cast<std::size_t>(in.rows_q() * in.ldo), 0x5a5a);
      flash_attention(in.view(in.q, in.rows_q(), in.q_cols(), in.ldq), in.view(in.k, in.rows_k(), in.kv_cols(), in.ldk),
                      in.view(in.v, in.rows_k(), in.kv_cols(), in.ldk), in.view(out, in.rows_q(), in.q_cols(), in.ldo),
                      in.cu_q, in.cu_k, c.p, Workspace{}, nullptr);
      for (std::int64_t r = 0; r < in.rows_q(); ++r) {
        for (std::int64_t col = 0; col < in.ldo; ++col) {
          const std::uint16_t bits = out[static_cast<std::size_t>(r * in.ldo + col)];
          if (col >= in.q_cols()) {
            ASSERT_EQ(bits, 0x5a5a) << "row " << r << " padding";
            continue;
          }
          const float v = static_cast<float>(got[static_cast<std::size_t>(r * in.q_cols() + col)]);
          const std::uint16_t expect =
              dtype == DType::bf16 ? formats::float_to_bf16(v).bits : formats::float_to_half(v).bits;
          ASSERT_EQ(bits, expect) << "row " << r << " column " << col;
        }
      }
    }
  }
}

TEST(FlashAttentionCpu, BadArgumentsAreNamed) {
  LOWBIT_TEST_RNG(rng);
  const FlashAttentionParams p{4, 2, 64, true, 0.0f};
  FlashInputs in(rng, p, DType::f16, {{3, 5}, {2, 2}});
  std::vector<std::uint16_t> out(static_cast<std::size_t>(in.rows_q() * in.ldo));
  auto call = [&](FlashAttentionParams params, std::vector<std::int32_t> cu_q, std::vector<std::int32_t> cu_k,
                  TensorView o) {
    flash_attention(in.view(in.q, in.rows_q(), in.q_cols(), in.ldq), in.view(in.k, in.rows_k(), in.kv_cols(), in.ldk),
                    in.view(in.v, in.rows_k(), in.kv_cols(), in.ldk), o, cu_q, cu_k, params, Workspace{}, nullptr);
  };
  const TensorView o = in.view(out, in.rows_q(), in.q_cols(), in.ldo);
  auto with = [&](auto change) {
    FlashAttentionParams q = p;
    change(q);
    return q;
  };
  EXPECT_LOWBIT_ERROR(call(with([](auto& q) { q.head_dim = 80; }), in.cu_q, in.cu_k, o),
                      "head_dim: expected 64 or 128");
  EXPECT_LOWBIT_ERROR(call(with([](auto& q) { q.kv_heads = 5; }), in.cu_q, in.cu_k, o), "kv_heads: expected 1..heads");
  EXPECT_LOWBIT_ERROR(call(with([](auto& q) { q.heads = 6; q.kv_heads = 4; }), in.cu_q, in.cu_k, o),
                      "is not a multiple of kv_heads");
  EXPECT_LOWBIT_ERROR(call(with([](auto& q) { q.scale = -1.0f; }), in.cu_q, in.cu_k, o), "scale: expected a finite");
  EXPECT_LOWBIT_ERROR(call(with([](auto& q) { q.scale = NAN; }), in.cu_q, in.cu_k, o), "scale: expected a finite");
  EXPECT_LOWBIT_ERROR(call(p, {0}, {0}, o), "cu_q: expected 2..65536 prefix sums");
  EXPECT_LOWBIT_ERROR(call(p, in.cu_q, {0, 5}, o), "cu_k: 2 prefix sums, but cu_q has 3");
  EXPECT_LOWBIT_ERROR(call(p, {1, 3, 5}, {0, 5, 7}, o), "cu_q, cu_k: the prefix sums start at 0");
  EXPECT_LOWBIT_ERROR(call(p, {0, 3, 3}, {0, 5, 7}, o), "cu_q: sequence 1 has 0 queries");
  EXPECT_LOWBIT_ERROR(call(p, {0, 3, 5}, {0, 5, 5}, o), "cu_k: sequence 1 has 0 keys");
  EXPECT_LOWBIT_ERROR(call(p, {0, 3, 5}, {0, 2, 7}, o), "sequence 0 has 3 queries and only 2 keys");
  EXPECT_LOWBIT_ERROR(call(p, {0, 3, 4}, {0, 5, 7}, o), "q: expected shape [4, 256], got [5, 256]");
  // Mixed dtypes, and out on top of an input.
  std::vector<std::uint16_t> out_bf16(out.size());
  const TensorView o_bf16 =
      TensorView::matrix(out_bf16.data(), DType::bf16, Device::cpu, in.rows_q(), in.q_cols(), in.ldo);
  EXPECT_LOWBIT_ERROR(call(p, in.cu_q, in.cu_k, o_bf16), "out: expected dtype f16");
  EXPECT_LOWBIT_ERROR(call(p, in.cu_q, in.cu_k, in.view(in.q, in.rows_q(), in.q_cols(), in.ldq)), "out: overlaps q");
  EXPECT_LOWBIT_ERROR(flash_attention_workspace_bytes(0), "batch: expected 1..65535");
}

}  // namespace
}  // namespace lowbit::test

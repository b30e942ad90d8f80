// The CPU engine's blocks form on models of every synthetic matrix type (engine/synth):
// K-quant matrices (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) and, where rows are not whole
// super-blocks, their fallback types (Q4_0, Q5_0, Q5_1, Q8_0) are held as blocks, never
// as f32; a short batch (8-bit activations) stays close to the f32 form's logits, and a
// long one (rows decoded to f32) equals them exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common/tokenizer_source.h"
#include "engine/cpu_matmul.h"
#include "engine/cpu_session.h"
#include "engine/model.h"
#include "engine/synth/synth_model.h"

namespace lowbit::test {
namespace {

using engine::GgmlType;
using engine::Model;

constexpr std::int64_t k_vocab = 320;

struct Models {
  Model f32, blocks;
};

Models synth_models(const char* preset, GgmlType type) {
  const engine::SynthModel synth(engine::find_synth_preset(preset), type, 7, tokenizer_source(k_vocab));
  const std::vector<std::uint8_t> bytes = synth.to_bytes();
  return {Model::from_gguf(engine::GgufFile::from_bytes(bytes), engine::WeightForm::f32),
          Model::from_gguf(engine::GgufFile::from_bytes(bytes), engine::WeightForm::blocks)};
}

std::vector<std::int32_t> tokens(std::int64_t n) {
  std::vector<std::int32_t> t;
  for (std::int64_t i = 0; i < n; ++i) t.push_back(static_cast<std::int32_t>((i * 37 + 5) % k_vocab));
  return t;
}

// max |a - b| / max |b| over one position's logits.
double relative_error(std::span<const float> a, std::span<const float> b) {
  double err = 0, scale = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    err = std::max(err, static_cast<double>(std::fabs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(b[i])));
  }
  return err / scale;
}

const GgmlType k_types[] = {GgmlType::q2_k, GgmlType::q3_k, GgmlType::q4_k, GgmlType::q5_k, GgmlType::q6_k};

TEST(EngineBlockTypes, EveryMatrixIsHeldAsBlocks) {
  for (const char* preset : {"tiny", "tiny-qwen2"}) {
    for (GgmlType type : k_types) {
      SCOPED_TRACE(std::string(preset) + " " + std::string(engine::ggml_type_name(type)));
      const Models m = synth_models(preset, type);
      EXPECT_TRUE(m.blocks.token_embedding().holds_blocks());
      for (const engine::LayerWeights& w : m.blocks.layers()) {
        for (const engine::WeightMatrix* x : {&w.wq, &w.wk, &w.wv, &w.wo, &w.w_gate, &w.w_up, &w.w_down}) {
          EXPECT_TRUE(x->holds_blocks());
        }
      }
      // At most 40 bytes a block of 32 (q5_f32) against 128 in f32.
      EXPECT_LT(m.blocks.weight_bytes() * 3, m.f32.weight_bytes());
    }
  }
}

// 1, 3, 5 and 7 tokens at a time: the 8-bit route (fewer than kBatchTokens). Max
// |difference| over max |logit| of the f32 form, a position: measured 1.1-2.7% (median
// 1.6%; Q2_K at most 2.3%, mean 1.7%) on these random weights, bound 5% (a wrong scale
// or code is tens of %; the kernels' exactness is block_dot_test's). A batch of
// kBatchTokens + 3 tokens decodes the rows to f32 and gives the f32 form's logits exactly.
TEST(EngineBlockTypes, LogitsStayCloseToTheF32Form) {
  for (const char* preset : {"tiny", "tiny-qwen2"}) {
    for (GgmlType type : k_types) {
      SCOPED_TRACE(std::string(preset) + " " + std::string(engine::ggml_type_name(type)));
      const Models m = synth_models(preset, type);
      for (std::int64_t n : {1, 3, 5, 7}) {
        engine::CpuSession f32(m.f32, {}, 64), blocks(m.blocks, {}, 64);
        const std::vector<std::int32_t> t = tokens(n);
        const std::vector<float> want = f32.forward(t, true), got = blocks.forward(t, true);
        ASSERT_EQ(want.size(), got.size());
        for (std::int64_t p = 0; p < n; ++p) {
          const std::span<const float> w(want.data() + p * k_vocab, k_vocab), g(got.data() + p * k_vocab, k_vocab);
          const double err = relative_error(g, w);
          EXPECT_LE(err, 5e-2) << n << " tokens, position " << p;
        }
      }
      const std::vector<std::int32_t> batch = tokens(engine::kBatchTokens + 3);
      engine::CpuSession f32(m.f32, {}, 64), blocks(m.blocks, {}, 64);
      EXPECT_EQ(blocks.forward(batch, true), f32.forward(batch, true));
    }
  }
}

}  // namespace
}  // namespace lowbit::test

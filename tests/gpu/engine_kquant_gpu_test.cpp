// The GPU session on K-quant and Q5 models (the weight-only GGML block forms) against the
// CPU session: a synthesized llama (SynthModel, preset "tiny": d_model 256, ffn 512,
// every matrix in the chosen type, the tied Q8_0 embedding as head) in Q4_K, Q5_K, Q6_K,
// Q5_0, Q5_1, Q3_K and Q2_K. Prefill logits (M = 40: the tiled kernel), decode logits (M = 1: the
// streaming GEMV), and greedy tokens, fed the CPU's, must agree: the GPU's weights are
// ggml's values rounded to f16 in prefill (the tiled kernel), exact at decode (the GEMV's
// sub-block decode, M <= 2), its activations f16, the CPU's ggml's f32 values, so the
// logits differ by f16 rounding through 2 layers (the tolerance of engine_gpu_test, kept:
// prefill still rounds the weights); a greedy token may differ only at a near-tie. Q4_K
// loads as the grouped INT4 form (KQuantPacking::groups: its factors rounded to f16 once,
// engine/gguf/repack.h), within the same tolerance.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "common/compare.h"
#include "common/gpu.h"
#include "common/tokenizer_source.h"
#include "engine/cpu_session.h"
#include "engine/generate.h"
#include "engine/gpu_session.h"
#include "engine/synth/synth_model.h"

namespace lowbit::test {
namespace {

using engine::GgmlType;

constexpr double kLogitTolerance = 1e-2;  // engine_gpu_test's, for the same f16 roundings
constexpr std::int64_t kVocab = 500;      // the head: N not a multiple of 8

// A synthesized "tiny" llama with every matrix in `type`, loaded for both engines.
struct SynthPair {
  engine::GgufFile file;
  engine::Model cpu;
  engine::GpuModel gpu;
  SynthPair(GgmlType type, std::uint64_t seed)
      : file(engine::GgufFile::from_bytes(
            engine::SynthModel(engine::find_synth_preset("tiny"), type, seed, tokenizer_source(kVocab)).to_bytes())),
        cpu(engine::Model::from_gguf(file)),
        gpu(engine::GpuModel::from_gguf(file)) {}
};

engine::KvCacheOptions full_cache() {
  engine::KvCacheOptions options;
  options.policy = KvPolicy::full;
  return options;
}

class EngineKQuantGpu : public GpuTest {};

TEST_F(EngineKQuantGpu, LogitsAndGreedyTokensMatchTheCpu) {
  for (const GgmlType type : {GgmlType::q4_k, GgmlType::q5_k, GgmlType::q6_k, GgmlType::q5_0, GgmlType::q5_1,
                              GgmlType::q3_k, GgmlType::q2_k}) {
    SCOPED_TRACE(engine::ggml_type_name(type));
    const SynthPair models(type, 11);
    std::size_t of_type = 0;
    for (const engine::GgufTensor& t : models.file.tensors()) of_type += t.type == type;
    ASSERT_GE(of_type, 7u * 2) << "every layer matrix in the type";
    ASSERT_EQ(models.gpu.layers()[0].down.spec.blocks == WeightBlocks::none, type == GgmlType::q4_k)
        << "Q4_K, and only Q4_K, loads as the grouped form";
    engine::CpuSession cpu(models.cpu, full_cache(), 128);
    engine::GpuSession gpu(models.gpu, full_cache(), 128);
    std::vector<std::int32_t> prompt;
    for (int i = 0; i < 40; ++i) prompt.push_back(static_cast<std::int32_t>((i * 37 + 11) % kVocab));
    std::vector<float> c_logits = cpu.forward(prompt, false);
    const double prefill = max_relative_error(gpu.forward(prompt, false), c_logits);
    EXPECT_LT(prefill, kLogitTolerance);
    double decode = 0;
    int near_ties = 0;
    for (int step = 0; step < 24; ++step) {
      const std::int32_t token = engine::argmax(c_logits);
      c_logits = cpu.forward(std::span<const std::int32_t>(&token, 1), false);
      const std::vector<float> g_logits = gpu.forward(std::span<const std::int32_t>(&token, 1), false);
      decode = std::max(decode, max_relative_error(g_logits, c_logits));
      const std::int32_t g = engine::argmax(g_logits), c = engine::argmax(c_logits);
      if (g != c) {
        // Only a near-tie may differ: the GPU's choice within the tolerance of the max.
        double scale = 0;
        for (const float v : c_logits) scale = std::max(scale, static_cast<double>(std::fabs(v)));
        EXPECT_LT(c_logits[static_cast<std::size_t>(c)] - c_logits[static_cast<std::size_t>(g)],
                  kLogitTolerance * scale)
            << "step " << step;
        ++near_ties;
      }
    }
    EXPECT_LT(decode, kLogitTolerance);
    EXPECT_LE(near_ties, 1);
    std::printf("%-5s prefill max rel. logit error %.2e, decode %.2e, greedy near-ties %d of 24\n",
                std::string(engine::ggml_type_name(type)).c_str(), prefill, decode, near_ties);
  }
}

// Greedy generation end to end (the GPU's run-ahead decode through its CUDA graph) gives
// the CPU's tokens on a K-quant model.
TEST_F(EngineKQuantGpu, GreedyGenerationEqualsTheCpus) {
  const SynthPair models(GgmlType::q4_k, 5);
  engine::CpuSession cpu(models.cpu, full_cache(), 64);
  engine::GpuSession gpu(models.gpu, full_cache(), 64);
  const std::vector<std::int32_t> prompt = {1, 17, 300, 42, 9, 100, 7};
  const engine::GenerationResult c = engine::generate_greedy(cpu, prompt, 16, nullptr, [](std::int32_t) {});
  const engine::GenerationResult g = engine::generate_greedy(gpu, prompt, 16, nullptr, [](std::int32_t) {});
  EXPECT_EQ(g.tokens, c.tokens);
}

}  // namespace
}  // namespace lowbit::test

// Synthetic models (engine/synth): the file's layout (names, shapes, types, metadata,
// the tokenizer copied exactly), reproducibility, the decoded weights' statistics, and
// that the CPU engine runs the tiny preset to finite, non-degenerate logits.
#include <gtest/gtest.h>

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common/expect_error.h"
#include "common/gguf_writer.h"
#include "common/tokenizer_source.h"
#include "engine/cpu_session.h"
#include "engine/gguf/dequant.h"
#include "engine/gguf/reader.h"
#include "engine/model.h"
#include "engine/synth/random_blocks.h"
#include "engine/synth/synth_model.h"

namespace lowbit::engine {
namespace {

constexpr std::int64_t k_vocab = 320;

GgufFile tokenizer_source() { return test::tokenizer_source(k_vocab); }

const SynthPreset& tiny() { return find_synth_preset("tiny"); }

TEST(SynthModel, LaysOutALlamaModelOfThePresetsShape) {
  const GgufFile source = tokenizer_source();
  const SynthModel synth(tiny(), GgmlType::q4_0, 1, source);
  const GgufFile file = GgufFile::from_bytes(synth.to_bytes());
  EXPECT_EQ(file.file_size(), synth.file_size());
  EXPECT_EQ(file.get_string("general.architecture"), "llama");
  EXPECT_EQ(file.get_u32("general.file_type"), 2u);  // llama.cpp's MOSTLY_Q4_0
  EXPECT_EQ(file.get_u32("llama.block_count"), 2u);
  EXPECT_EQ(file.get_u32("llama.embedding_length"), 256u);
  EXPECT_EQ(file.get_u32("llama.vocab_size"), static_cast<std::uint32_t>(k_vocab));
  const ModelConfig c = ModelConfig::from_gguf(file);
  EXPECT_EQ(c.n_heads, 4);
  EXPECT_EQ(c.n_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.ffn_dim, 512);
  EXPECT_EQ(c.vocab, k_vocab);
  EXPECT_EQ(c.rope_base, 10000.0);

  // Every tokenizer.* key copied with its bytes, nothing else of the source's.
  std::size_t copied = 0;
  for (const GgufValue& v : source.metadata()) {
    if (!v.key().starts_with("tokenizer.")) continue;
    const GgufValue& got = file.metadata(v.key());
    ++copied;
    EXPECT_EQ(got.type(), v.type());
    EXPECT_TRUE(std::equal(got.payload().begin(), got.payload().end(), v.payload().begin(), v.payload().end()));
  }
  EXPECT_EQ(copied, 6u);
  EXPECT_EQ(file.find_metadata("llama.block_count")->as_u32(), 2u);

  // Names, shapes and types: the embedding Q8_0, norms F32, matrices in the type, tied output.
  EXPECT_EQ(file.tensors().size(), 1u + 2u * 9u + 1u);
  EXPECT_EQ(file.tensor("token_embd.weight").type, GgmlType::q8_0);
  EXPECT_EQ(file.find_tensor("output.weight"), nullptr);
  EXPECT_EQ(file.tensor("output_norm.weight").type, GgmlType::f32);
  for (const char* name : {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"}) {
    EXPECT_EQ(file.tensor("blk.1." + std::string(name) + ".weight").type, GgmlType::q4_0) << name;
  }
  EXPECT_EQ(file.tensor("blk.0.attn_k.weight").dims[1], 128u);
  EXPECT_EQ(file.tensor("blk.0.ffn_down.weight").dims[0], 512u);
  EXPECT_EQ(file.tensor("blk.0.attn_norm.weight").type, GgmlType::f32);
}

TEST(SynthModel, TheSameSeedGivesTheSameBytesAtAnyThreadCount) {
  const GgufFile source = tokenizer_source();
  const SynthModel a(tiny(), GgmlType::q4_1, 7, source);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const std::vector<std::uint8_t> one_thread = a.to_bytes();
  omp_set_num_threads(std::max(threads, 3));
  const std::vector<std::uint8_t> many_threads = a.to_bytes();
  omp_set_num_threads(threads);
  EXPECT_EQ(one_thread, many_threads);
  const SynthModel b(tiny(), GgmlType::q4_1, 8, source);
  const std::vector<std::uint8_t> other_seed = b.to_bytes();
  ASSERT_EQ(other_seed.size(), one_thread.size());
  const GgufFile file = GgufFile::from_bytes(one_thread);  // alive while t is used
  const GgufTensor& t = file.tensor("blk.0.ffn_up.weight");
  EXPECT_FALSE(std::equal(other_seed.begin() + static_cast<std::ptrdiff_t>(t.file_offset),
                          other_seed.begin() + static_cast<std::ptrdiff_t>(t.file_offset + t.byte_size),
                          one_thread.begin() + static_cast<std::ptrdiff_t>(t.file_offset)));
}

struct Moments {
  double mean, stddev;
};

Moments moments(const std::vector<float>& v) {
  double sum = 0, sq = 0;
  for (const float x : v) sum += x, sq += static_cast<double>(x) * x;
  const double n = static_cast<double>(v.size()), mean = sum / n;
  return {mean, std::sqrt(sq / n - mean * mean)};
}

// Decoded through the engine's dequantizer: matrices have stddev 1/sqrt(fan_in) and
// mean ~0 in every synth type, norms mean 1.
TEST(SynthModel, DecodedWeightsHaveTheIntendedScale) {
  const GgufFile source = tokenizer_source();
  for (const GgmlType type : synth_matrix_types()) {
    SCOPED_TRACE(std::string(ggml_type_name(type)));
    const SynthModel synth(tiny(), type, 3, source);
    const GgufFile file = GgufFile::from_bytes(synth.to_bytes());
    for (const char* name : {"blk.0.attn_q.weight", "blk.1.ffn_down.weight"}) {
      const GgufTensor& t = file.tensor(name);
      const Moments m = moments(dequantize_tensor(t));
      const double want = 1.0 / std::sqrt(static_cast<double>(t.dims[0]));
      EXPECT_NEAR(m.stddev / want, 1.0, 0.05) << name;
      EXPECT_LT(std::fabs(m.mean), 0.05 * want) << name;
    }
    const Moments norm = moments(dequantize_tensor(file.tensor("blk.0.ffn_norm.weight")));
    EXPECT_NEAR(norm.mean, 1.0, 0.02);
    EXPECT_NEAR(norm.stddev, 0.05, 0.01);
    const Moments embd = moments(dequantize_tensor(file.tensor("token_embd.weight")));
    EXPECT_NEAR(embd.stddev * 16.0, 1.0, 0.05);  // 1/sqrt(256)
  }
}

// Q4_K_M and Q5_K_M, llama.cpp's mixes: Q4_K (Q5_K) matrices but attn_v and ffn_down of
// the layers its use_more_bits names in Q6_K (of 16 layers: 0, 1, 4, 7, 10, 13, 14, 15),
// file type 15 (17).
TEST(SynthModel, KMMixesGiveTheMoreBitsLayersQ6K) {
  const GgufFile source = tokenizer_source();
  EXPECT_EQ(find_synth_types("Q4_K").name(), "Q4_K");
  EXPECT_LOWBIT_ERROR(SynthTypes::k_m_mix_of(GgmlType::q6_k), "no _M mix has base type Q6_K");
  struct Mix {
    const char* name;
    GgmlType base;
    std::uint32_t file_type;
  };
  for (const Mix mix : {Mix{"Q4_K_M", GgmlType::q4_k, 15}, Mix{"Q5_K_M", GgmlType::q5_k, 17}}) {
    SCOPED_TRACE(mix.name);
    EXPECT_EQ(find_synth_types(mix.name).name(), mix.name);
    SynthPreset sixteen = tiny();
    sixteen.n_layers = 16;
    const GgufFile file = GgufFile::from_bytes(SynthModel(sixteen, find_synth_types(mix.name), 2, source).to_bytes());
    EXPECT_EQ(file.find_metadata("general.file_type")->as_u32(), mix.file_type);
    const std::vector<int> more = {0, 1, 4, 7, 10, 13, 14, 15};
    for (int l = 0; l < 16; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      const bool q6 = std::find(more.begin(), more.end(), l) != more.end();
      for (const char* name : {"attn_v.weight", "ffn_down.weight"}) {
        EXPECT_EQ(file.tensor(p + name).type, q6 ? GgmlType::q6_k : mix.base) << p << name;
      }
      for (const char* name :
           {"attn_q.weight", "attn_k.weight", "attn_output.weight", "ffn_gate.weight", "ffn_up.weight"}) {
        EXPECT_EQ(file.tensor(p + name).type, mix.base) << p << name;
      }
    }
  }
}

// The CPU forward pass over a few tokens: every logit finite, and logits that vary
// across the vocabulary and across positions at a sane scale.
TEST(SynthModel, TheTinyPresetsRunToFiniteLogits) {
  const GgufFile source = tokenizer_source();
  for (const char* preset : {"tiny", "tiny-qwen2"})
  for (const GgmlType type : synth_matrix_types()) {
    SCOPED_TRACE(std::string(preset) + " " + std::string(ggml_type_name(type)));
    const SynthModel synth(find_synth_preset(preset), type, 1, source);
    const Model model = Model::from_gguf(GgufFile::from_bytes(synth.to_bytes()));
    CpuSession session(model, KvCacheOptions{}, 16);
    const std::vector<std::int32_t> tokens = {1, 17, 200, 5, 319, 42};
    const std::vector<float> logits = session.forward(tokens, /*all_logits=*/true);
    ASSERT_EQ(logits.size(), tokens.size() * static_cast<std::size_t>(k_vocab));
    for (const float x : logits) ASSERT_TRUE(std::isfinite(x));
    for (std::size_t t = 0; t < tokens.size(); ++t) {
      const std::vector<float> row(logits.begin() + static_cast<std::ptrdiff_t>(t * k_vocab),
                                   logits.begin() + static_cast<std::ptrdiff_t>((t + 1) * k_vocab));
      const Moments m = moments(row);
      EXPECT_GT(m.stddev, 0.2) << "position " << t;
      EXPECT_LT(m.stddev, 20.0) << "position " << t;
      if (t > 0) {
        EXPECT_NE(std::vector<float>(logits.begin() + static_cast<std::ptrdiff_t>((t - 1) * k_vocab),
                                     logits.begin() + static_cast<std::ptrdiff_t>(t * k_vocab)),
                  row);
      }
    }
  }
}

// K-quant rows must be whole super-blocks of 256: tiny-qwen2's 384-wide inputs take
// llama.cpp's fallback types (Q2_K / Q3_K: Q4_0 for its IQ4_NL), its 512-wide ffn_down
// input the K-quant; qwen2 biases in F32.
TEST(SynthModel, KQuantsFallBackWhereRowsAreNotWholeSuperBlocks) {
  const GgufFile source = tokenizer_source();
  const std::pair<GgmlType, GgmlType> fallbacks[] = {
      {GgmlType::q4_k, GgmlType::q5_0}, {GgmlType::q5_k, GgmlType::q5_1}, {GgmlType::q6_k, GgmlType::q8_0},
      {GgmlType::q2_k, GgmlType::q4_0}, {GgmlType::q3_k, GgmlType::q4_0}};
  for (const auto& [type, fallback] : fallbacks) {
    const SynthModel synth(find_synth_preset("tiny-qwen2"), type, 1, source);
    const GgufFile file = GgufFile::from_bytes(synth.to_bytes());
    EXPECT_EQ(file.get_string("general.architecture"), "qwen2");
    EXPECT_EQ(file.get_u32("qwen2.embedding_length"), 384u);
    for (const char* name : {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up"}) {
      EXPECT_EQ(file.tensor("blk.0." + std::string(name) + ".weight").type, fallback) << name;
    }
    EXPECT_EQ(file.tensor("blk.1.ffn_down.weight").type, type);
    EXPECT_EQ(file.tensor("blk.1.attn_k.bias").type, GgmlType::f32);
    EXPECT_EQ(file.tensor("blk.1.attn_k.bias").dims[0], 128u);
    const ModelConfig c = ModelConfig::from_gguf(file);
    EXPECT_EQ(c.rope_style, RopeStyle::neox);
    EXPECT_TRUE(c.qkv_bias);
  }
  // The full-size qwen2 preset, laid out only: the shape of Qwen2.5-0.5B.
  const SynthModel qwen(find_synth_preset("qwen2.5-0.5b"), GgmlType::q4_k, 1, source);
  EXPECT_EQ(qwen.config().d_model, 896);
  EXPECT_EQ(qwen.config().n_heads, 14);
  EXPECT_EQ(qwen.config().n_kv_heads, 2);
  EXPECT_EQ(qwen.config().ffn_dim, 4864);
  std::size_t k_quants = 0;
  for (const GgufWriter::Tensor& t : qwen.layout().tensors()) k_quants += t.type == GgmlType::q4_k;
  EXPECT_EQ(k_quants, 24u);  // every ffn_down (4864 = 19 x 256), nothing else
}

TEST(SynthModel, RefusesUnknownPresetsAndTypesByName) {
  EXPECT_LOWBIT_ERROR(find_synth_preset("llama9"),
                      "model preset 'llama9' does not exist (presets: tiny, tiny-qwen2, smollm2-135m, qwen2.5-0.5b, llama3.2-1b");
  EXPECT_LOWBIT_ERROR(find_synth_matrix_type("BF16"), "model type 'BF16' is not one synth writes (types: Q4_1");
  EXPECT_LOWBIT_ERROR(find_synth_types("Q4_K_S"), "model type 'Q4_K_S' is not one synth writes (types: Q4_1");
  EXPECT_LOWBIT_ERROR(find_synth_types("Q4_K_S"), "Q6_K, Q4_K_M, Q5_K_M)");
  const GgufFile source = tokenizer_source();
  EXPECT_LOWBIT_ERROR(SynthModel(tiny(), GgmlType::iq2_xs, 1, source), "'IQ2_XS' is not one synth writes");
  test::GgufWriter w;
  w.add_string("general.architecture", "llama");
  EXPECT_LOWBIT_ERROR(SynthModel(tiny(), GgmlType::q4_1, 1, GgufFile::from_bytes(w.bytes())),
                      "has no tokenizer (tokenizer.ggml.tokens) to copy");
}

TEST(RandomBlocks, RefusesWhatItCannotWrite) {
  std::vector<std::uint8_t> out(18);
  EXPECT_LOWBIT_ERROR(fill_random_blocks(GgmlType::q4_0, 1.0f, 0.1f, 1, out), "Q4_0 blocks take mean 0");
  EXPECT_LOWBIT_ERROR(fill_random_blocks(GgmlType::q4_0, 0.0f, 0.1f, 1, std::span(out).first(17)),
                      "17 bytes is not a whole number of Q4_0 blocks");
  EXPECT_LOWBIT_ERROR(fill_random_blocks(GgmlType::iq1_s, 0.0f, 0.1f, 1, out), "type IQ1_S is not written");
}

}  // namespace
}  // namespace lowbit::engine

// What a model file's parts must agree on, and values that must be finite: NaN or Inf
// weights are named at load (CPU decode and GPU repack), non-finite logits are an
// error where they are produced, the tokenizer's vocabulary matches the embedding, and
// a run longer than the model's context length is refused.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/expect_error.h"
#include "common/gguf_writer.h"
#include "common/tiny_llama.h"
#include "engine/cpu_session.h"
#include "engine/finite_logits.h"
#include "engine/gguf/repack.h"
#include "engine/model.h"
#include "engine/model_checks.h"
#include "engine/perplexity.h"
#include "engine/tokenizer/bpe.h"

namespace lowbit::test {
namespace {

using engine::GgufFile;
using engine::Model;

// The tiny model's file with `bytes` written over tensor `name`'s data at `offset`.
std::vector<std::uint8_t> patched(const TinyLlama& m, const std::string& name, std::size_t offset,
                                  const std::vector<std::uint8_t>& bytes) {
  const GgufFile file = GgufFile::from_bytes(m.gguf);
  const engine::GgufTensor* t = file.find_tensor(name);
  EXPECT_NE(t, nullptr) << name;
  std::vector<std::uint8_t> out = m.gguf;
  std::memcpy(out.data() + t->file_offset + offset, bytes.data(), bytes.size());
  return out;
}

std::vector<std::uint8_t> f32_bytes(float v) {
  std::vector<std::uint8_t> b(4);
  std::memcpy(b.data(), &v, 4);
  return b;
}

TEST(ModelChecks, NonFiniteF32WeightIsNamedAtLoad) {
  const TinyLlama m = make_tiny_llama();
  const auto nan = patched(m, "blk.1.ffn_norm.weight", 5 * 4, f32_bytes(std::numeric_limits<float>::quiet_NaN()));
  EXPECT_LOWBIT_ERROR(Model::from_gguf(GgufFile::from_bytes(nan)),
                      "tensor 'blk.1.ffn_norm.weight': element 5 (row 0, column 5) is nan; the weights must be finite");
  const auto inf = patched(m, "output_norm.weight", 63 * 4, f32_bytes(-std::numeric_limits<float>::infinity()));
  EXPECT_LOWBIT_ERROR(Model::from_gguf(GgufFile::from_bytes(inf)), "tensor 'output_norm.weight': element 63 (row 0, "
                                                                   "column 63) is -inf");
}

// Q4_1 blocks are 20 bytes: f16 d, f16 m, 16 bytes of codes. Block 3 of attn_q (64
// inputs: two blocks a row) is row 1's second block, elements 96..127.
TEST(ModelChecks, NonFiniteBlockScaleIsNamedByTheDecodeAndTheRepack) {
  const TinyLlama m = make_tiny_llama();
  const std::vector<std::uint8_t> inf_f16 = {0x00, 0x7c};
  const auto bad_scale = patched(m, "blk.0.attn_q.weight", 3 * 20, inf_f16);
  const GgufFile file = GgufFile::from_bytes(bad_scale);
  EXPECT_LOWBIT_ERROR(Model::from_gguf(file), "tensor 'blk.0.attn_q.weight': element 96 (row 1, column 32) is ");
  EXPECT_LOWBIT_ERROR(engine::repack_ggml_weight(*file.find_tensor("blk.0.attn_q.weight")),
                      "tensor 'blk.0.attn_q.weight': the scale of block 1 of row 1 is inf");
  const auto bad_min = patched(m, "blk.0.attn_q.weight", 3 * 20 + 2, {0x00, 0x7e});  // NaN
  const GgufFile min_file = GgufFile::from_bytes(bad_min);
  EXPECT_LOWBIT_ERROR(engine::repack_ggml_weight(*min_file.find_tensor("blk.0.attn_q.weight")),
                      "tensor 'blk.0.attn_q.weight': the min of block 1 of row 1 is nan");
  // Stacked parts name the part at fault.
  const engine::GgufTensor* parts[] = {min_file.find_tensor("blk.0.attn_k.weight"),
                                       min_file.find_tensor("blk.0.attn_q.weight")};
  EXPECT_LOWBIT_ERROR(engine::repack_ggml_weights(parts),
                      "tensor 'blk.0.attn_q.weight': the min of block 1 of row 1 is nan");
}

// Finite weights whose activations overflow: the final norm's weights at 1e38.
TEST(ModelChecks, NonFiniteLogitsAreAnErrorNotNanPerplexity) {
  const TinyLlama m = make_tiny_llama();
  std::vector<std::uint8_t> huge;
  for (int i = 0; i < 64; ++i) {
    const auto b = f32_bytes(1e38f);
    huge.insert(huge.end(), b.begin(), b.end());
  }
  const Model model = Model::from_gguf(GgufFile::from_bytes(patched(m, "output_norm.weight", 0, huge)));
  engine::CpuSession session(model, {}, 16);
  const std::vector<std::int32_t> tokens = {3, 1, 4, 1, 5};
  EXPECT_LOWBIT_ERROR(session.forward(tokens, true), "logits at position 0: token ");
  session.reset();
  EXPECT_LOWBIT_ERROR(session.forward(tokens, false), "logits at position 4: token ");
  engine::PerplexityOptions options;
  options.context = 5;
  EXPECT_LOWBIT_ERROR(engine::perplexity(model, tokens, options), "logits at position 0: token ");
}

TEST(ModelChecks, LogitCheckNamesPositionAndToken) {
  std::vector<float> logits(3 * 10, 0.5f);
  EXPECT_NO_THROW(engine::check_finite_logits(logits, 10, 7));
  logits[2 * 10 + 4] = std::numeric_limits<float>::infinity();
  EXPECT_LOWBIT_ERROR(engine::check_finite_logits(logits, 10, 7), "logits at position 9: token 4 has logit inf");
  logits[10 + 9] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_LOWBIT_ERROR(engine::check_finite_logits(logits, 10, 7), "logits at position 8: token 9 has logit nan");
  EXPECT_LOWBIT_ERROR(engine::fail_non_finite_logits(12), "logits at position 12: NaN or Inf");
}

// A byte-level tokenizer of `tokens` entries: the 256 bytes, then filler words.
engine::Tokenizer tokenizer_of(std::size_t tokens) {
  std::vector<std::string> words;
  for (int b = 0; b < 256; ++b) words.push_back(engine::byte_level_encode(std::string(1, static_cast<char>(b))));
  for (std::size_t i = 256; i < tokens; ++i) words.push_back("w" + std::to_string(i));
  GgufWriter w;
  w.add_string("tokenizer.ggml.model", "gpt2");
  w.add_string("tokenizer.ggml.pre", "gpt2");
  w.add_string_array("tokenizer.ggml.tokens", words);
  w.add_string_array("tokenizer.ggml.merges", {});
  return engine::Tokenizer::from_gguf(GgufFile::from_bytes(w.bytes()));
}

TEST(ModelChecks, TokenizerVocabularyMustMatchTheEmbedding) {
  engine::ModelConfig config;
  config.vocab = 300;
  EXPECT_NO_THROW(engine::check_tokenizer_fits_model(tokenizer_of(300), config));
  EXPECT_LOWBIT_ERROR(engine::check_tokenizer_fits_model(tokenizer_of(301), config),
                      "tokenizer.ggml.tokens: 301 tokens, but tensor 'token_embd.weight' has 300 rows (vocab)");
  EXPECT_LOWBIT_ERROR(engine::check_tokenizer_fits_model(tokenizer_of(256), config),
                      "tokenizer.ggml.tokens: 256 tokens, but tensor 'token_embd.weight' has 300 rows");
}

TEST(ModelChecks, RunsLongerThanTheContextLengthAreRefused) {
  engine::ModelConfig config;
  config.architecture = "llama";
  config.context_length = 256;
  EXPECT_NO_THROW(engine::check_within_context_length(256, config, "--context 256"));
  EXPECT_LOWBIT_ERROR(engine::check_within_context_length(257, config, "--context 257"),
                      "--context 257 (257 tokens) exceeds the model's context length 256 (llama.context_length)");
  config.context_length = 0;  // unknown: any length
  EXPECT_NO_THROW(engine::check_within_context_length(1 << 20, config, "--context"));
}

}  // namespace
}  // namespace lowbit::test

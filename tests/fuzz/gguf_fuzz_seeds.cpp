// Writes small valid GGUF files into a directory, as seeds for gguf_fuzz: every
// metadata type, nested arrays, tensors of several types (every K-quant the engine
// decodes among them), two alignments, and whole tiny models with their tokenizer
// (tests/common/tiny_llama.h), tied and untied.
#include <cstdint>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "common/gguf_writer.h"
#include "common/tiny_llama.h"

namespace {

using lowbit::test::ByteWriter;
using lowbit::test::GgufWriter;
namespace vt = lowbit::test::gguf_type;
namespace gt = lowbit::test::ggml_id;

std::vector<std::uint8_t> filled(std::size_t n) { return std::vector<std::uint8_t>(n, 0x3c); }

GgufWriter scalars() {
  GgufWriter w;
  w.add<std::uint8_t>("u8", vt::u8, 200);
  w.add<std::int8_t>("i8", vt::i8, -3);
  w.add<std::uint16_t>("u16", vt::u16, 60000);
  w.add<std::int16_t>("i16", vt::i16, -300);
  w.add<std::uint32_t>("u32", vt::u32, 70000);
  w.add<std::int32_t>("i32", vt::i32, -70000);
  w.add<float>("f32", vt::f32, 0.5f);
  w.add<std::uint8_t>("bool", vt::boolean, 1);
  w.add_string("general.architecture", "llama");
  w.add<std::uint64_t>("u64", vt::u64, 1ull << 40);
  w.add<std::int64_t>("i64", vt::i64, -(1ll << 40));
  w.add<double>("f64", vt::f64, 1e-3);
  return w;
}

GgufWriter tokenizer() {
  GgufWriter w;
  w.add_string("tokenizer.ggml.model", "gpt2");
  w.add_string_array("tokenizer.ggml.tokens", {"<s>", "a", "b", "ab", "\xc4\xa0"});
  w.add_string_array("tokenizer.ggml.merges", {"a b"});
  w.add_array<std::int32_t>("tokenizer.ggml.token_type", vt::i32, {3, 1, 1, 1, 1});
  w.add_array<float>("tokenizer.ggml.scores", vt::f32, {0, -1, -2, -3, -4});
  ByteWriter nested;
  nested.u32(vt::array).u64(2).u32(vt::string).u64(1).str("x").u32(vt::i16).u64(1).put<std::int16_t>(7);
  w.add_raw("nested", vt::array, nested.bytes());
  return w;
}

GgufWriter tensors(std::uint32_t alignment) {
  GgufWriter w;
  w.layout_alignment = alignment;
  w.add<std::uint32_t>("general.alignment", vt::u32, alignment);
  w.add_string("general.architecture", "llama");
  w.add_tensor("token_embd.weight", {4, 2}, gt::f32, filled(32));
  w.add_tensor("blk.0.attn_q.weight", {32, 2}, gt::q4_1, filled(40));
  w.add_tensor("blk.0.ffn_up.weight", {32}, gt::q8_0, filled(34));
  w.add_tensor("output_norm.weight", {4}, gt::f16, filled(8));
  w.add_tensor("blk.0.q6", {256}, gt::q6_k, filled(210));
  return w;
}

std::vector<std::uint8_t> tiny_model(bool tied) {
  lowbit::test::TinyLlamaSpec spec;
  spec.layers = 1, spec.d_model = 32, spec.heads = 2, spec.kv_heads = 1, spec.head_dim = 16, spec.ffn = 32;
  spec.vocab = 280, spec.tied = tied, spec.with_tokenizer = true;
  return lowbit::test::make_tiny_llama(spec).gguf;
}

// One tensor of each type a Q4_K_M / Q5_K_M file holds, several blocks each.
GgufWriter k_quants() {
  GgufWriter w;
  w.add_string("general.architecture", "qwen2");
  w.add_tensor("q5_0", {64, 2}, gt::q5_0, filled(4 * 22));
  w.add_tensor("q5_1", {32, 3}, gt::q5_1, filled(3 * 24));
  w.add_tensor("q2_k", {256}, gt::q2_k, filled(84));
  w.add_tensor("q3_k", {256, 2}, gt::q3_k, filled(2 * 110));
  w.add_tensor("q4_k", {512}, gt::q4_k, filled(2 * 144));
  w.add_tensor("q5_k", {256, 1, 2}, gt::q5_k, filled(2 * 176));
  w.add_tensor("q6_k", {256, 3}, gt::q6_k, filled(3 * 210));
  return w;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: gguf_fuzz_seeds DIRECTORY\n";
    return 2;
  }
  const std::vector<std::pair<std::string, std::vector<std::uint8_t>>> seeds = {
      {"scalars.gguf", scalars().bytes()},       {"tokenizer.gguf", tokenizer().bytes()},
      {"tensors32.gguf", tensors(32).bytes()},   {"tensors8.gguf", tensors(8).bytes()},
      {"k_quants.gguf", k_quants().bytes()},     {"model_tied.gguf", tiny_model(true)},
      {"model_untied.gguf", tiny_model(false)},
  };
  for (const auto& [name, bytes] : seeds) {
    const std::string path = std::string(argv[1]) + "/" + name;
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    if (!out) {
      std::cerr << "gguf_fuzz_seeds: cannot write " << path << "\n";
      return 1;
    }
  }
  return 0;
}

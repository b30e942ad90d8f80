// `lowbit model synth`: writes a GGUF model of a real shape with random weights
// (engine/synth), so that speed at 1B-8B shapes is measured without a download.
// `lowbit model dequant`: one tensor of a GGUF file decoded to raw f32, as the CPU
// engine decodes it, by ggml's decoder or through its blocks form (for checks against
// other decoders).
// `lowbit model tokenize`: a text's token ids under a model's tokenizer (for checks
// against other tokenizers).
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "commands.h"
#include "core/file_io.h"
#include "dispatch.h"
#include "cpu/weight_blocks.h"
#include "engine/cpu_block_repack.h"
#include "engine/gguf/dequant.h"
#include "engine/gguf/reader.h"
#include "engine/synth/synth_model.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine_setup.h"
#include "lowbit/error.h"
#include "options.h"

namespace lowbit::cli {
namespace {

constexpr double k_gb = 1e9;

int model_synth(const Args& args) {
  std::string preset_name, type_name, out, tokenizer_from;
  std::int64_t seed = 1;
  bool force = false;
  std::vector<std::string> presets, types;
  for (const engine::SynthPreset& p : engine::synth_presets()) presets.emplace_back(p.name);
  types = engine::synth_type_names();
  Options cli("lowbit model synth",
              "Writes a GGUF model of a real model's shape with random weights (token embedding Q8_0, norms F32,\n"
              "matrices in --type) and the default model's tokenizer, for benchmarks at scale without a download.\n"
              "The file is the same for the same preset, type and seed; it loads in lowbit and in llama.cpp.");
  cli.choice("--preset", &preset_name, presets, "the shape (required)");
  cli.choice("--type", &type_name, types, "the matrices' ggml type, or Q4_K_M / Q5_K_M: llama.cpp's mixes (required)");
  cli.text("--out", &out, "FILE", "the GGUF file to write (required; written whole or not at all)");
  cli.integer("--seed", &seed, 0, std::numeric_limits<std::int64_t>::max(), "random seed (default 1)");
  cli.flag("--force", &force, "overwrite FILE if it exists");
  cli.text("--tokenizer-from", &tokenizer_from, "FILE",
           "the GGUF file whose tokenizer.* keys are copied (default: the cached SmolLM2-135M-Instruct)");
  if (const auto status = cli.parse(args)) return *status;
  LOWBIT_CHECK(!preset_name.empty(), "--preset: required (one of the presets in --help)");
  LOWBIT_CHECK(!type_name.empty(), "--type: required (one of the types in --help)");
  LOWBIT_CHECK(!out.empty(), "--out: required");
  // Every check before any work: the output path, then the tokenizer's file.
  check_output_path(out, force, "--out", "pass --force to overwrite it");
  if (tokenizer_from.empty()) {
    tokenizer_from = default_model_path();
    LOWBIT_CHECK(std::filesystem::is_regular_file(tokenizer_from), "lowbit model synth: the tokenizer is copied ",
                 "from the default model, which is not at '", tokenizer_from,
                 "': run scripts/fetch-model.sh to fetch it (or pass --tokenizer-from FILE)");
  } else {
    LOWBIT_CHECK(std::filesystem::is_regular_file(tokenizer_from), "--tokenizer-from: no file at '", tokenizer_from,
                 "'");
  }
  const engine::GgufFile tokenizer = engine::GgufFile::open(tokenizer_from);
  const engine::SynthPreset& preset = engine::find_synth_preset(preset_name);
  const engine::SynthModel model(preset, engine::find_synth_types(type_name), static_cast<std::uint64_t>(seed),
                                 tokenizer);
  const std::size_t tensors = model.layout().tensors().size();
  std::fprintf(stderr, "[model synth] %s (%s shape): %s, %zu tensors, %.2f GB -> %s\n", preset_name.c_str(),
               std::string(preset.shape_of).c_str(), model.config().describe().c_str(), tensors,
               static_cast<double>(model.file_size()) / k_gb, out.c_str());
  const auto start = std::chrono::steady_clock::now();
  Progress progress("[model synth] writing", static_cast<std::int64_t>(tensors));
  model.write(out, force, [&](std::size_t done, std::uint64_t bytes) {
    progress.update(static_cast<std::int64_t>(done), std::to_string(bytes / 1000000) + " MB");
  });
  progress.finish();
  const double seconds = seconds_since(start);
  std::fprintf(stderr, "[model synth] wrote %s: %llu bytes in %.1f s (%.2f GB/s)\n", out.c_str(),
               static_cast<unsigned long long>(model.file_size()), seconds,
               static_cast<double>(model.file_size()) / k_gb / seconds);
  return 0;
}

// The tensor's values through the CPU engine's blocks form: repacked as a model load
// does (engine/cpu_block_repack.h), then decoded (cpu/weight_blocks.h).
std::vector<float> decode_through_blocks(const engine::GgufTensor& tensor) {
  const std::optional<cpu::WeightBlockType> type = engine::cpu_block_type(tensor.type);
  LOWBIT_CHECK(type.has_value(), "--form blocks: tensor '", tensor.name, "' is ",
               engine::ggml_type_name(tensor.type), ", which has no CPU block form");
  const auto count = static_cast<std::int64_t>(tensor.element_count);
  std::vector<std::uint8_t> blocks(
      static_cast<std::size_t>(count / cpu::kValuesPerBlock * cpu::weight_block_bytes(*type)));
  engine::repack_cpu_blocks(tensor.type, tensor.data, count, blocks.data());
  std::vector<float> values(static_cast<std::size_t>(count));
  cpu::decode_weight_blocks(*type, blocks.data(), count, values.data());
  return values;
}

int model_dequant(const Args& args) {
  std::string path, tensor_name, out, form = "f32";
  bool force = false;
  Options cli("lowbit model dequant",
              "Decodes one tensor of a GGUF file to f32 (little-endian, dims[0] fastest) as the CPU engine does,\n"
              "and writes the values to --out, NaN and Inf included where ggml's decoder gives them (loading the\n"
              "file as a model refuses those).");
  cli.text("--model", &path, "PATH|NAME", std::string(k_model_option_help) + " (required)");
  cli.text("--tensor", &tensor_name, "NAME", "the tensor's name (required)");
  cli.text("--out", &out, "FILE", "where the f32 values go (required; written whole or not at all)");
  cli.choice("--form", &form, {"f32", "blocks"},
             "f32: ggml's decoder, as --cpu-weights f32 loads (default); blocks: repacked into the CPU engine's "
             "blocks form and decoded from it, as --cpu-weights blocks holds the tensor");
  cli.flag("--force", &force, "overwrite FILE if it exists");
  if (const auto status = cli.parse(args)) return *status;
  LOWBIT_CHECK(!path.empty(), "--model: required");
  LOWBIT_CHECK(!tensor_name.empty(), "--tensor: required");
  LOWBIT_CHECK(!out.empty(), "--out: required");
  check_output_path(out, force, "--out", "pass --force to overwrite it");
  const engine::GgufFile file = engine::GgufFile::open(resolve_model_path(path));
  const engine::GgufTensor& tensor = file.tensor(tensor_name);
  const std::vector<float> values =
      form == "blocks" ? decode_through_blocks(tensor) : engine::dequantize_tensor(tensor, engine::NonFinite::keep);
  OutputFile output(out, force);
  output.write({reinterpret_cast<const std::uint8_t*>(values.data()), values.size() * sizeof(float)});
  output.commit();
  std::fprintf(stderr, "[model dequant] %s (%s, %zu values) -> %s\n", tensor_name.c_str(),
               std::string(engine::ggml_type_name(tensor.type)).c_str(), values.size(), out.c_str());
  return 0;
}

int model_tokenize(const Args& args) {
  std::string model, text;
  bool no_special = false;
  Options cli("lowbit model tokenize",
              "Prints the token ids of --text under the model's tokenizer (no BOS added), space-separated.");
  cli.text("--model", &model, "PATH|NAME", k_model_option_help);
  cli.text("--text", &text, "TEXT", "the text (required)");
  cli.flag("--no-special", &no_special, "treat control tokens in the text as plain text");
  if (const auto status = cli.parse(args)) return *status;
  const engine::GgufFile file = engine::GgufFile::open(resolve_model_path(model));
  const engine::Tokenizer tokenizer = engine::Tokenizer::from_gguf(file);
  const std::vector<std::int32_t> ids = tokenizer.encode(text, /*add_bos=*/false, !no_special);
  for (std::size_t i = 0; i < ids.size(); ++i) std::cout << (i ? " " : "") << ids[i];
  std::cout << "\n";
  return 0;
}

}  // namespace

int cmd_model(const Args& args) {
  return run_subcommand(
      "lowbit model",
      {{"synth", "writes a GGUF model of a real shape (Llama 3 1B-8B, ...) with random weights", model_synth},
       {"dequant", "decodes one tensor of a GGUF file to raw f32, as the CPU engine does", model_dequant},
       {"tokenize", "a text's token ids under a model's tokenizer", model_tokenize}},
      args);
}

}  // namespace lowbit::cli

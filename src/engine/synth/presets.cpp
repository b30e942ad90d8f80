#include "engine/synth/presets.h"

#include <array>
#include <string>

#include "lowbit/error.h"

namespace lowbit::engine {
namespace {

// Llama 3.1 / 3.2 declare 131072 tokens of context through llama3 RoPE scaling; the
// presets declare the length (so that long-context benchmarks may run) without the
// scaling, which random weights cannot tell from none.
// tiny-qwen2's width (384) is not a whole number of K-quant super-blocks (256), as
// Qwen2.5-0.5B's (896) and SmolLM2-135M's (576) are not: their K-quant files hold the
// fallback types too. smollm2-135m is the default model's shape (its GPU speed measured
// where the real file cannot be carried).
constexpr std::array<SynthPreset, 8> k_presets{{
    {"tiny", "llama", "test-sized", 256, 2, 4, 2, 64, 512, 10000.0, 4096, 1e-5f, false},
    {"tiny-qwen2", "qwen2", "test-sized", 384, 2, 6, 2, 64, 512, 1000000.0, 4096, 1e-6f, true},
    {"smollm2-135m", "llama", "SmolLM2-135M", 576, 30, 9, 3, 64, 1536, 100000.0, 8192, 1e-5f, false},
    {"qwen2.5-0.5b", "qwen2", "Qwen2.5-0.5B", 896, 24, 14, 2, 64, 4864, 1000000.0, 32768, 1e-6f, true},
    {"llama3.2-1b", "llama", "Llama-3.2-1B", 2048, 16, 32, 8, 64, 8192, 500000.0, 131072, 1e-5f, false},
    {"llama3.2-3b", "llama", "Llama-3.2-3B", 3072, 28, 24, 8, 128, 8192, 500000.0, 131072, 1e-5f, false},
    {"llama3-8b", "llama", "Llama-3-8B", 4096, 32, 32, 8, 128, 14336, 500000.0, 131072, 1e-5f, false},
    {"llama3-70b", "llama", "Llama-3-70B", 8192, 80, 64, 8, 128, 28672, 500000.0, 131072, 1e-5f, false},
}};

}  // namespace

std::span<const SynthPreset> synth_presets() { return k_presets; }

const SynthPreset& find_synth_preset(std::string_view name) {
  std::string names;
  for (const SynthPreset& p : k_presets) {
    if (p.name == name) return p;
    names += (names.empty() ? "" : ", ") + std::string(p.name);
  }
  LOWBIT_FAIL("model preset '", name, "' does not exist (presets: ", names, ")");
}

}  // namespace lowbit::engine

// RoPE angles of a model for positions 0..max_tokens-1: cos and sin of
// pos * position_scale * base^(-2i / rope_dims) / freq_factor[i], i < rope_dims / 2 (the
// scaling as ModelConfig states it; 1 and none without), computed in double (float
// loses digits at long contexts) and stored as f32 [max_tokens x rope_dims / 2]. One
// table for the CPU reference and the GPU session, so that both rotate by the same
// values. Which channels pair i rotates is ModelConfig::rope_style's.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "engine/model.h"

namespace lowbit::engine {

struct RopeTable {
  std::vector<float> cos, sin;
};

inline RopeTable rope_table(const ModelConfig& c, std::int64_t max_tokens) {
  const std::int64_t half = c.rope_dims / 2;
  RopeTable t;
  t.cos.resize(static_cast<std::size_t>(max_tokens * half));
  t.sin.resize(t.cos.size());
  for (std::int64_t i = 0; i < half; ++i) {
    const double factor = c.rope_freq_factors.empty() ? 1.0 : c.rope_freq_factors[static_cast<std::size_t>(i)];
    const double freq = c.rope_position_scale *
                        std::pow(c.rope_base, -2.0 * static_cast<double>(i) / static_cast<double>(c.rope_dims)) / factor;
    for (std::int64_t p = 0; p < max_tokens; ++p) {
      const double angle = static_cast<double>(p) * freq;
      t.cos[static_cast<std::size_t>(p * half + i)] = static_cast<float>(std::cos(angle));
      t.sin[static_cast<std::size_t>(p * half + i)] = static_cast<float>(std::sin(angle));
    }
  }
  return t;
}

}  // namespace lowbit::engine

// The sampling options of the engine commands (llama.cpp's names): --temp, --top-k,
// --top-p, --min-p, --repeat-penalty, --repeat-last-n, --presence-penalty,
// --frequency-penalty, --seed, --stop.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/sampling.h"
#include "options.h"

namespace lowbit::cli {

struct SamplingFlags {
  double temperature = 0.0, top_p = 0.95, min_p = 0.05, repeat_penalty = 1.0;
  double presence_penalty = 0.0, frequency_penalty = 0.0;
  std::int64_t top_k = 40, repeat_last_n = 64, seed = -1;
  std::string stop;

  // default_temperature: the --temp default this command states in its help.
  void declare(Options& options, double default_temperature);
  // Validated; seed -1 draws one from std::random_device.
  engine::SamplingParams params() const;
  std::vector<std::string> stops() const;  // --stop, when given
};

}  // namespace lowbit::cli

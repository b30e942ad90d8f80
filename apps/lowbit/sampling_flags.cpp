#include "sampling_flags.h"

#include <limits>
#include <random>
#include <sstream>

namespace lowbit::cli {

void SamplingFlags::declare(Options& options, double default_temperature) {
  temperature = default_temperature;
  std::ostringstream help;
  help << "sampling temperature; 0 is greedy (default " << default_temperature << ")";
  options.number("--temp", &temperature, 0.0, 1e6, help.str());
  options.integer("--top-k", &top_k, 0, std::numeric_limits<std::int32_t>::max(),
                  "keep the k most likely tokens (default 40, 0: off)");
  options.number("--top-p", &top_p, 1e-9, 1.0, "keep the most likely tokens up to this probability (default 0.95, 1: off)");
  options.number("--min-p", &min_p, 0.0, 1.0, "drop tokens below this fraction of the top one's probability (default 0.05)");
  options.number("--repeat-penalty", &repeat_penalty, 1e-6, 1e6,
                 "divide (or multiply, if negative) the logits of recent tokens (default 1: off)");
  options.integer("--repeat-last-n", &repeat_last_n, -1, std::numeric_limits<std::int32_t>::max(),
                  "generated tokens the penalties look back on (default 64, -1: all, 0: none)");
  options.number("--presence-penalty", &presence_penalty, -2.0, 2.0, "subtract from the logit of a recent token (default 0)");
  options.number("--frequency-penalty", &frequency_penalty, -2.0, 2.0,
                 "subtract this times a recent token's count from its logit (default 0)");
  options.integer("-s, --seed", &seed, -1, std::numeric_limits<std::int64_t>::max(),
                  "random seed of the sampler (default -1: a random one); the same seed gives the same text");
  options.text("--stop", &stop, "TEXT", "end the generation before this text");
}

engine::SamplingParams SamplingFlags::params() const {
  engine::SamplingParams p;
  p.temperature = static_cast<float>(temperature);
  p.top_k = static_cast<std::int32_t>(top_k);
  p.top_p = static_cast<float>(top_p);
  p.min_p = static_cast<float>(min_p);
  p.repeat_penalty = static_cast<float>(repeat_penalty);
  p.presence_penalty = static_cast<float>(presence_penalty);
  p.frequency_penalty = static_cast<float>(frequency_penalty);
  p.penalty_last_n = static_cast<std::int32_t>(repeat_last_n);
  p.seed = seed >= 0 ? static_cast<std::uint64_t>(seed)
                     : (static_cast<std::uint64_t>(std::random_device{}()) << 32) | std::random_device{}();
  p.validate();
  return p;
}

std::vector<std::string> SamplingFlags::stops() const {
  return stop.empty() ? std::vector<std::string>{} : std::vector<std::string>{stop};
}

}  // namespace lowbit::cli

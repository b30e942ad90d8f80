// The ten T x D cases of the KV-cache seed, in its order.
#pragma once

#include <cstdint>
#include <vector>

namespace lowbit::bench {

struct KvCase {
  const char* name;
  std::int64_t rows;  // T: tokens
  std::int64_t cols;  // D: channels
  std::int64_t elements() const { return rows * cols; }
};

inline const std::vector<KvCase>& kv_cases() {
  static const std::vector<KvCase> cases = {
      {"trivial", 1024, 64},
      {"small", 2048, 128},
      {"medium", 16384, 256},
      {"large", 65536, 256},
      {"very_large", 131072, 256},
      {"llm_small", 131072, 1024},
      {"llm_medium", 131072, 2048},
      {"llm_large", 131072, 4096},
      {"llm_very_large", 131072, 8192},
      {"massive_attention", 262144, 128},
  };
  return cases;
}

}  // namespace lowbit::bench

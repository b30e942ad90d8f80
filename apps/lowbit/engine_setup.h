// What the engine commands share: finding and loading the model (GGUF file, decoded
// weights, tokenizer), the KV-cache options every command takes, the default text,
// and a progress line for long runs.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "core/file_io.h"  // read_file, for the texts the commands read
#include "engine/gguf/reader.h"
#include "engine/kv_cache.h"
#include "engine/model.h"
#include "engine/tokenizer/tokenizer.h"
#include "options.h"

namespace lowbit::cli {

struct LoadedModel {
  engine::GgufFile file;
  engine::Model model;
  engine::Tokenizer tokenizer;
};

// --model: a GGUF file, or the short name of a model scripts/fetch-model.sh fetches
// (smollm2-135m, the default, or qwen2.5-0.5b); absent, $LOWBIT_MODEL, else the default
// model. A clear error naming what was looked for (and the fetch command) when none is a file.
std::string resolve_model_path(const std::string& model_option);
// The help line of --model.
inline constexpr const char* k_model_option_help =
    "a llama-family or qwen2 GGUF file, or a fetched model's short name: smollm2-135m (default: "
    "SmolLM2-135M-Instruct Q4_1), qwen2.5-0.5b (Qwen2.5-Coder-0.5B-Instruct Q4_K_M)";
// Where scripts/fetch-model.sh puts the default model ($LOWBIT_CACHE/models/..., default
// ~/.cache/lowbit), whether or not it is there.
std::string default_model_path();
// The CPU forward's weights in `form`: the file's blocks (fast) or the FP32 reference.
std::unique_ptr<LoadedModel> load_model(const std::string& path,
                                        engine::WeightForm form = engine::WeightForm::blocks);

// The WikiText-2 test split shipped in data/ (or $LOWBIT_WIKITEXT).
std::string default_text_path();

// --kv-cache, --sink, --window, --kv-bits, --kv-group, --kv-rotate, --kv-symmetric,
// parsed into KvCacheOptions.
struct KvCacheFlags {
  std::string policy = "full";
  std::int64_t sink = 16, window = 32, kv_bits = 8, kv_group = 0, kv_key_block = 0;
  std::string kv_rotate = "off", kv_symmetric = "off";
  void declare(Options& options, bool with_policy);
  // Usage errors the option ranges cannot express (--kv-key-block 1).
  void validate() const;
  // validate(), then warns for each option the user gave that --kv-cache `policy` does not
  // use; a --kv-bits against the bits selective8 / selective4 name is a usage error.
  void warn_ignored(const Options& options) const;
  // The bits --kv-cache selective8 / selective4 name (0 for the other policies).
  int named_bits() const;
  engine::KvCacheOptions options() const;  // validated: names the flag at fault
  engine::KvCacheOptions options_for(KvPolicy policy, int kv_bits) const;
};

// "\r[#####.....] 12/50 label  ETA 1m05s" on a terminal; a line per ~10% otherwise.
// The estimate is the time so far per item times the items left.
class Progress {
 public:
  Progress(std::string label, std::int64_t total);
  void set_total(std::int64_t total) { total_ = total > 0 ? total : 1; }
  void update(std::int64_t done, const std::string& note = "");
  void finish();

 private:
  std::string label_;
  std::int64_t total_;
  bool tty_;
  std::int64_t last_decile_ = -1;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

double seconds_since(std::chrono::steady_clock::time_point start);

}  // namespace lowbit::cli

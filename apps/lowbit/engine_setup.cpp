#include "engine_setup.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <string_view>

#include "engine/model_checks.h"
#include "lowbit/error.h"

namespace lowbit::cli {
namespace {

// The models scripts/fetch-model.sh fetches, by the short name it and --model take; the
// first is the default.
struct KnownModel {
  std::string_view name, file;
};
constexpr KnownModel k_known_models[] = {
    {"smollm2-135m", "SmolLM2-135M-Instruct.Q4_1.gguf"},
    {"qwen2.5-0.5b", "Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf"},
};

std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

std::string cached_model_path(const KnownModel& model) {
  const std::string cache = env("LOWBIT_CACHE").empty() ? env("HOME") + "/.cache/lowbit" : env("LOWBIT_CACHE");
  return cache + "/models/" + std::string(model.file);
}

std::string known_names() {
  std::string names;
  for (const KnownModel& m : k_known_models) names += (names.empty() ? "" : ", ") + std::string(m.name);
  return names;
}

}  // namespace

std::string resolve_model_path(const std::string& model_option) {
  if (!model_option.empty()) {
    if (std::filesystem::is_regular_file(model_option)) return model_option;
    for (const KnownModel& m : k_known_models) {
      if (m.name != model_option) continue;
      const std::string cached = cached_model_path(m);
      LOWBIT_CHECK(std::filesystem::is_regular_file(cached), "--model ", m.name, ": not fetched (no file at '", cached,
                   "'): run scripts/fetch-model.sh ", m.name);
      return cached;
    }
    LOWBIT_FAIL("--model: no file at '", model_option, "' and no known model of that name (", known_names(), ")");
  }
  const std::string from_env = env("LOWBIT_MODEL");
  if (!from_env.empty()) {
    LOWBIT_CHECK(std::filesystem::is_regular_file(from_env), "LOWBIT_MODEL: no file at '", from_env, "'");
    return from_env;
  }
  const std::string cached = default_model_path();
  LOWBIT_CHECK(std::filesystem::is_regular_file(cached), "no model: pass --model PATH, set LOWBIT_MODEL, or run ",
               "scripts/fetch-model.sh to put the default model at '", cached, "'");
  return cached;
}

std::string default_model_path() { return cached_model_path(k_known_models[0]); }

std::unique_ptr<LoadedModel> load_model(const std::string& path, engine::WeightForm form) {
  engine::GgufFile file = engine::GgufFile::open(path);
  engine::Model model = engine::Model::from_gguf(file, form);
  engine::Tokenizer tokenizer = engine::Tokenizer::from_gguf(file);
  engine::check_tokenizer_fits_model(tokenizer, model.config());
  return std::make_unique<LoadedModel>(LoadedModel{std::move(file), std::move(model), std::move(tokenizer)});
}

std::string default_text_path() {
  const std::string from_env = env("LOWBIT_WIKITEXT");
  return from_env.empty() ? std::string(LOWBIT_SOURCE_DIR) + "/data/wikitext-2-raw/wiki.test.raw" : from_env;
}

void KvCacheFlags::declare(Options& options, bool with_policy) {
  if (with_policy) {
    options.choice("--kv-cache", &policy, {"full", "window", "selective", "selective8", "selective4", "int8", "int4"},
                   "KV-cache policy (default full): window drops old tokens, selective quantizes them "
                   "(selective8 / selective4, the benchmarks' names: selective with --kv-bits 8 / 4)");
  }
  options.integer("--sink", &sink, 0, 1 << 20, "attention-sink tokens kept in FP16 (default 16)");
  options.integer("--window", &window, 1, 1 << 20, "recent tokens kept in FP16 (default 32)");
  options.integer_of("--kv-bits", &kv_bits, {8, 4}, "bits of the quantized body for selective (default 8)");
  options.integer("--kv-group", &kv_group, 0, 1 << 20,
                  "channels per quantization scale (and min) (default 0: head_dim, one per token per head)");
  options.choice("--kv-rotate", &kv_rotate, {"off", "k", "kv"},
                 "rotate keys (k) or keys and values (kv) by a Walsh-Hadamard transform along head_dim before "
                 "they are quantized (default off)");
  options.integer("--kv-key-block", &kv_key_block, 0, 1024,
                  "keys quantized per channel over blocks of N tokens, KIVI's form (GPU: even N; the batched "
                  "engine, serve: a multiple of 16; default 0: per token)");
  options.choice("--kv-symmetric", &kv_symmetric, {"off", "on"},
                 "INT4 codes symmetric (scale only) instead of asymmetric (scale + min) (default off)");
}

void KvCacheFlags::validate() const {
  usage_check(kv_key_block == 0 || kv_key_block >= 2, "--kv-key-block: expected 0 (off) or 2..1024, got ",
              kv_key_block);
}

void KvCacheFlags::warn_ignored(const Options& options) const {
  validate();
  const int named = named_bits();
  usage_check(named == 0 || !options.given("--kv-bits") || kv_bits == named, "--kv-bits ", kv_bits,
              " conflicts with --kv-cache ", policy);
  const std::string why = "with --kv-cache " + policy;
  if (policy == "full") {
    options.warn_ignored({"--sink", "--window", "--kv-bits", "--kv-group", "--kv-rotate", "--kv-symmetric", "--kv-key-block"}, why);
  }
  if (policy == "window") {
    options.warn_ignored({"--kv-bits", "--kv-group", "--kv-rotate", "--kv-symmetric", "--kv-key-block"},
                         why + " (nothing is quantized)");
  }
  if (policy == "int8" || policy == "int4") {
    options.warn_ignored({"--sink", "--window"}, why + " (every token is quantized)");
    options.warn_ignored({"--kv-bits"}, why + " (the policy names its bits)");
  }
}

int KvCacheFlags::named_bits() const {
  return policy == "selective8" || policy == "selective4" ? parse_kv_policy_bits(policy.c_str()).bits : 0;
}

engine::KvCacheOptions KvCacheFlags::options() const {
  if (named_bits() != 0) {  // the benchmarks' names: policy and bits in one (parse_kv_policy_bits)
    const KvPolicyBits named = parse_kv_policy_bits(policy.c_str());
    return options_for(named.policy, named.bits);
  }
  return options_for(parse_kv_policy(policy.c_str()), static_cast<int>(kv_bits));
}

engine::KvCacheOptions KvCacheFlags::options_for(KvPolicy kv_policy, int bits) const {
  LOWBIT_CHECK(bits == 4 || bits == 8, "--kv-bits: expected 4 or 8, got ", bits);
  LOWBIT_CHECK(kv_key_block == 0 || kv_key_block >= 2, "--kv-key-block: expected 0 (off) or 2..1024, got ",
               kv_key_block);
  engine::KvCacheOptions o;
  o.policy = kv_policy;
  o.sink = sink;
  o.window = window;
  o.kv_bits = bits;
  o.kv_group = kv_group;
  o.kv_rotate = engine::parse_kv_rotate(kv_rotate.c_str());
  o.kv_symmetric = kv_symmetric == "on";
  o.kv_key_block = kv_key_block;
  return o;
}

Progress::Progress(std::string label, std::int64_t total)
    : label_(std::move(label)), total_(total > 0 ? total : 1), tty_(isatty(STDERR_FILENO) != 0) {}

void Progress::update(std::int64_t done, const std::string& given_note) {
  std::string note = given_note;
  if (done > 0 && done < total_) {
    const double left = seconds_since(start_) / static_cast<double>(done) * static_cast<double>(total_ - done);
    char eta[48];
    const auto s = static_cast<long long>(left + 0.5);
    if (s >= 60) std::snprintf(eta, sizeof eta, "ETA %lldm%02llds", s / 60, s % 60);
    else std::snprintf(eta, sizeof eta, "ETA %llds", s);
    note += (note.empty() ? "" : "  ") + std::string(eta);
  }
  const int width = 30;
  const auto filled = static_cast<int>(width * done / total_);
  if (tty_) {
    std::cerr << "\r" << label_ << " [" << std::string(static_cast<std::size_t>(filled), '#')
              << std::string(static_cast<std::size_t>(width - filled), '.') << "] " << done << "/" << total_
              << (note.empty() ? "" : "  " + note) << "\033[K" << std::flush;
    return;
  }
  const std::int64_t decile = 10 * done / total_;
  if (decile != last_decile_) {
    last_decile_ = decile;
    std::cerr << label_ << ": " << done << "/" << total_ << (note.empty() ? "" : "  " + note) << "\n";
  }
}

void Progress::finish() {
  if (tty_) std::cerr << "\n";
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace lowbit::cli

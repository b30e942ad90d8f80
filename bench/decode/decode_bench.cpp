#include "bench/decode/decode_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>

#include "bench/common/json.h"
#include "bench/common/run_info.h"
#include "bench/common/timing.h"
#include "lowbit/error.h"

#if LOWBIT_WITH_CUDA
#include <cuda_runtime.h>

#include "core/device.h"
#include "engine/gguf/reader.h"
#include "engine/gpu_model.h"
#include "engine/gpu_session.h"
#include "engine/kv_cache.h"
#include "lowbit/cuda_check.h"
#endif

namespace lowbit::bench {
namespace {

#if LOWBIT_WITH_CUDA

struct Stats {
  double median = 0, min = 0, max = 0;
};

Stats stats_of(const std::vector<double>& v) {
  if (v.empty()) return {};
  return Stats{median(v), *std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end())};
}

std::string fmt(const char* format, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, format, value);
  return buffer;
}

constexpr std::int64_t kWarmup = 4;  // decode steps before the timed runs (the decode graph is captured there)

// The cache options of a policy name of this benchmark.
engine::KvCacheOptions cache_options(const std::string& policy, const DecodeBenchOptions& o) {
  engine::KvCacheOptions c;
  c.sink = o.sink;
  c.window = o.window;
  const KvPolicyBits choice = parse_kv_policy_bits(policy.c_str());
  c.policy = choice.policy;
  c.kv_bits = choice.bits;
  c.kv_key_block = o.kv_key_block;  // quantizing policies only (full and window keep FP16 keys)
  return c;
}

double device_used_gb() {
  std::size_t free = 0, total = 0;
  LOWBIT_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return static_cast<double>(total - free) / 1e9;
}

DecodeRow measure(const engine::GpuModel& model, std::int64_t context, const std::string& policy,
                  const DecodeBenchOptions& o) {
  const engine::ModelConfig& c = model.config();
  DecodeRow row;
  row.context = context;
  row.policy = policy;
  const engine::KvCacheOptions cache = cache_options(policy, o);
  {
    // A kernel's first launch in the process loads it (lazy module loading): a short
    // prefill of the same policy first, so that the timed one is warm (the first row's
    // prefill at 2048 ran 12.7k tok/s cold against 17.4k warm on the H200).
    const std::int64_t warm_tokens = std::min<std::int64_t>(context, 512);
    engine::GpuSession warm(model, cache, warm_tokens + 1);
    (void)warm.forward(std::vector<std::int32_t>(static_cast<std::size_t>(warm_tokens), 0), false);
  }
  const std::int64_t need = context + kWarmup + o.steps * o.runs + 1;
  engine::GpuSession session(model, cache, std::max(need, o.max_tokens));
  row.memory_gb = device_used_gb();

  std::mt19937 rng(static_cast<std::uint32_t>(context));
  std::uniform_int_distribution<std::int32_t> id(0, static_cast<std::int32_t>(c.vocab - 1));
  std::vector<std::int32_t> prompt(static_cast<std::size_t>(context));
  for (std::int32_t& t : prompt) t = id(rng);
  const auto start = std::chrono::steady_clock::now();
  const std::vector<float> logits = session.forward(prompt, false);
  row.prefill_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::int32_t token = engine::argmax(logits);

  // Back-to-back runs of `steps` greedy steps: run r starts at context + r * steps.
  const auto keep_all = [](std::int32_t) { return true; };
  (void)session.decode_greedy_run(token, kWarmup, keep_all);
  for (int r = 0; r < o.runs; ++r) {
    const double device_before = session.decode_device_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    std::int64_t done = 0;
    std::int32_t last = token;
    done = session.decode_greedy_run(last, o.steps, [&](std::int32_t t) {
      last = t;
      return true;
    });
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    token = last;
    row.tokens_per_s.push_back(static_cast<double>(done) / wall);
    row.device_ms.push_back((session.decode_device_seconds() - device_before) * 1e3 / static_cast<double>(done));
  }
  row.weight_bytes = static_cast<double>(model.decode_bytes());
  const engine::KvShape shape{c.n_layers, c.n_kv_heads, c.head_dim};
  row.kv_bytes = static_cast<double>(engine::KvCache::bytes_at(shape, cache, context));
  return row;
}

#endif

}  // namespace

int run_decode_bench(const DecodeBenchOptions& o) {
#if LOWBIT_WITH_CUDA
  LOWBIT_CHECK(gpu_available(), "bench decode: needs a CUDA GPU (none found)");
  LOWBIT_CHECK(o.runs >= 1 && o.steps >= 1, "bench decode: runs ", o.runs, " and steps ", o.steps, " must be >= 1");
  for (const std::string& p : o.policies) (void)cache_options(p, o);  // every name checked before any work
  const RunInfo info = collect_run_info();
  const engine::GgufFile file = engine::GgufFile::open(o.model_path);
  const engine::ModelConfig config = engine::ModelConfig::from_gguf(file);
  for (const std::int64_t context : o.contexts) {
    LOWBIT_CHECK(context >= 1, "--context: expected a positive length, got ", context);
    const std::int64_t need = context + kWarmup + o.steps * o.runs + 1;
    LOWBIT_CHECK(config.context_length == 0 || need <= config.context_length, "--context ", context, ": with ",
                 o.runs, " runs of ", o.steps, " steps the sequence reaches ", need,
                 " tokens, past the model's context length ", config.context_length);
    LOWBIT_CHECK(o.max_tokens <= need || config.context_length == 0 || o.max_tokens <= config.context_length,
                 "--max-tokens ", o.max_tokens, ": past the model's context length ", config.context_length);
  }
  core::set_programmatic_launch(o.programmatic_launch);
  std::fprintf(stderr, "bench decode: uploading %s\n", o.model_path.c_str());
  const engine::GpuModel model = engine::GpuModel::from_gguf(file);
  cudaStream_t stream{};
  LOWBIT_CUDA_CHECK(cudaStreamCreate(&stream));
  const double copy_gbps = measure_copy_gbps(std::size_t{1} << 30, stream);
  LOWBIT_CUDA_CHECK(cudaStreamDestroy(stream));

  std::vector<DecodeRow> rows;
  for (const std::int64_t context : o.contexts) {
    for (const std::string& policy : o.policies) {
      std::fprintf(stderr, "bench decode: %s after %lld tokens\n", policy.c_str(), static_cast<long long>(context));
      rows.push_back(measure(model, context, policy, o));
    }
  }

  std::printf("# lowbit bench decode\n\ncommit %s, %s\ngpu: %s, driver %s\nmodel: %s (%s)\n\n", info.commit.c_str(),
              info.date.c_str(), info.gpu.c_str(), info.driver.c_str(), o.model_path.c_str(),
              config.describe().c_str());
  std::printf("ceiling: device-to-device copy %.0f GB/s (bytes read + written), measured in this run\n", copy_gbps);
  if (!o.programmatic_launch) std::printf("kernels launched without programmatic dependent launch (--no-pdl)\n");
  std::printf("decode: %d runs of %lld greedy steps after the prompt (run r starts r x %lld tokens later); "
              "tokens/s from the wall time, median [min, max]\n",
              o.runs, static_cast<long long>(o.steps), static_cast<long long>(o.steps));
  if (o.max_tokens > 0) {
    std::printf("sessions sized for %lld tokens (--max-tokens) where the runs need fewer\n",
                static_cast<long long>(o.max_tokens));
  }
  std::printf("\n");
  std::printf("| context | policy | decode tok/s | device ms/token | GB/token (weights + KV) | %% of copy ceiling | "
              "prefill tok/s | device memory GB |\n|---:|---|---:|---:|---:|---:|---:|---:|\n");
  Json results = Json::array();
  for (const DecodeRow& r : rows) {
    const Stats tps = stats_of(r.tokens_per_s), ms = stats_of(r.device_ms);
    const double gb = (r.weight_bytes + r.kv_bytes) / 1e9;
    const double achieved_gbps = gb / (ms.median / 1e3);
    std::printf("| %lld | %s | %s [%s, %s] | %s | %s + %s | %s | %s | %s |\n", static_cast<long long>(r.context),
                r.policy.c_str(), fmt("%.1f", tps.median).c_str(), fmt("%.1f", tps.min).c_str(),
                fmt("%.1f", tps.max).c_str(), fmt("%.3f", ms.median).c_str(), fmt("%.3f", r.weight_bytes / 1e9).c_str(),
                fmt("%.3f", r.kv_bytes / 1e9).c_str(), fmt("%.0f%%", 100.0 * achieved_gbps / copy_gbps).c_str(),
                fmt("%.0f", static_cast<double>(r.context) / r.prefill_s).c_str(), fmt("%.1f", r.memory_gb).c_str());
    Json j = Json::object();
    j.set("context", r.context).set("policy", r.policy);
    j.set("decode_tokens_per_s", tps.median).set("decode_tokens_per_s_min", tps.min).set("decode_tokens_per_s_max", tps.max);
    j.set("device_ms_per_token", ms.median).set("device_ms_per_token_min", ms.min).set("device_ms_per_token_max", ms.max);
    j.set("weight_bytes_per_token", r.weight_bytes).set("kv_bytes_per_token", r.kv_bytes);
    j.set("pct_copy", 100.0 * achieved_gbps / copy_gbps);
    j.set("prefill_tokens_per_s", static_cast<double>(r.context) / r.prefill_s);
    j.set("device_memory_gb", r.memory_gb);
    results.push(j);
  }
  std::printf("\n%% of copy ceiling: (weights + KV bytes a token) / (device ms a token) over the copy bandwidth.\n");
  if (!o.json_path.empty()) {
    Json doc = run_info_json("decode", info);
    doc.set("model", o.model_path).set("config", config.describe()).set("gpu_copy_gbps", copy_gbps);
    doc.set("steps", o.steps).set("runs", o.runs).set("programmatic_launch", o.programmatic_launch);
    doc.set("max_tokens", o.max_tokens);
    doc.set("kv_key_block", o.kv_key_block);
    doc.set("rows", results);
    doc.write_file(o.json_path);
  }
  return 0;
#else
  (void)o;
  LOWBIT_FAIL("bench decode: this build of lowbit has no CUDA support (LOWBIT_CUDA=OFF)");
#endif
}

}  // namespace lowbit::bench

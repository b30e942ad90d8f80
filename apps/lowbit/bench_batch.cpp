#include "bench_batch.h"

#include <chrono>
#include <cstdio>
#include <limits>
#include <random>

#include "bench/common/json.h"
#include "bench/common/run_info.h"
#include "engine/cpu_batch_engine.h"
#include "lowbit/error.h"

namespace lowbit::cli {
namespace {

double seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

BatchBenchRow run_case(const LoadedModel& loaded, const BatchBenchCase& c, std::int64_t pp, std::int64_t tg,
                       std::int64_t b) {
  const std::int64_t vocab = loaded.model.config().vocab;
  engine::CpuBatchEngine engine(loaded.model, c.cache, std::numeric_limits<std::size_t>::max() / 2, pp + tg);
  std::vector<std::vector<std::int32_t>> prompts(static_cast<std::size_t>(b));
  std::vector<std::int32_t> next(static_cast<std::size_t>(b));
  for (std::int64_t s = 0; s < b; ++s) {
    engine.add_sequence(s, pp + tg);
    std::mt19937 rng(static_cast<std::uint32_t>(1234 + s));
    std::uniform_int_distribution<std::int32_t> token(0, static_cast<std::int32_t>(vocab - 1));
    for (std::int64_t i = 0; i < pp; ++i) prompts[static_cast<std::size_t>(s)].push_back(token(rng));
  }
  std::vector<engine::StepRow> rows(static_cast<std::size_t>(b));
  std::vector<engine::StepOutput> out(rows.size());
  for (std::int64_t s = 0; s < b; ++s) {
    rows[static_cast<std::size_t>(s)] = {s, prompts[static_cast<std::size_t>(s)], true, {}};  // greedy
  }
  BatchBenchRow row{c.policy, pp, tg, b};
  auto start = std::chrono::steady_clock::now();
  engine.step(rows, out);
  row.prefill_seconds = seconds(start);
  start = std::chrono::steady_clock::now();
  for (std::int64_t step = 0; step < tg; ++step) {
    for (std::size_t s = 0; s < rows.size(); ++s) {
      next[s] = out[s].token;
      rows[s].tokens = std::span<const std::int32_t>(&next[s], 1);
    }
    engine.step(rows, out);
  }
  row.decode_seconds = seconds(start);
  row.kv_bytes = engine.kv_memory().used;
  return row;
}

}  // namespace

std::vector<BatchBenchRow> run_bench_batch(const LoadedModel& loaded, const BatchBenchOptions& options) {
  std::vector<BatchBenchRow> rows;
  std::printf("| policy | PP | TG | B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | T s | S t/s | KV MB |\n"
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const BatchBenchCase& c : options.policies) {
    for (const std::int64_t pp : options.prompt_tokens) {
      for (const std::int64_t tg : options.generated_tokens) {
        for (const std::int64_t b : options.batch_sizes) {
          const BatchBenchRow r = run_case(loaded, c, pp, tg, b);
          const double total = r.prefill_seconds + r.decode_seconds;
          std::printf("| %s | %lld | %lld | %lld | %lld | %.3f | %.1f | %.3f | %.1f | %.3f | %.1f | %.2f |\n",
                      r.policy.c_str(), static_cast<long long>(pp), static_cast<long long>(tg),
                      static_cast<long long>(b), static_cast<long long>(b * (pp + tg)), r.prefill_seconds,
                      r.prefill_tokens_per_second(), r.decode_seconds, r.decode_tokens_per_second(), total,
                      static_cast<double>(b * (pp + tg)) / total, static_cast<double>(r.kv_bytes) / 1e6);
          std::fflush(stdout);
          rows.push_back(r);
        }
      }
    }
  }
  if (!options.json_path.empty()) {
    bench::Json out = bench::run_info_json("batch", bench::collect_run_info());
    out.set("engine", "CPU reference");
    out.set("model", loaded.model.source());
    bench::Json results = bench::Json::array();
    for (const BatchBenchRow& r : rows) {
      bench::Json j = bench::Json::object();
      j.set("policy", r.policy).set("pp", r.pp).set("tg", r.tg).set("b", r.b);
      j.set("prefill_seconds", r.prefill_seconds).set("prefill_tokens_per_second", r.prefill_tokens_per_second());
      j.set("decode_seconds", r.decode_seconds).set("decode_tokens_per_second", r.decode_tokens_per_second());
      j.set("kv_bytes", static_cast<std::int64_t>(r.kv_bytes));
      results.push(j);
    }
    out.set("results", results);
    out.write_file(options.json_path);
  }
  return rows;
}

}  // namespace lowbit::cli

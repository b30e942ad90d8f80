#include "bench_batch.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <random>
#include <span>
#include <string>

#include "bench/common/json.h"
#include "bench/common/run_info.h"
#include "lowbit/error.h"

namespace lowbit::cli {
namespace {

double seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

struct RunSeconds {
  double prefill = 0, decode = 0;
  std::size_t kv_bytes = 0;
};

// B sequences of random prompts (with long_pp > 0, the first one long_pp tokens long,
// prefilled in a step of its own first): the prefill step(s), then tg decode steps
// (greedy); the sequences are freed at the end.
RunSeconds run_once(engine::BatchEngine& engine, std::int64_t pp, std::int64_t tg, std::int64_t b,
                    std::int64_t long_pp) {
  const std::int64_t vocab = engine.vocab();
  std::vector<std::vector<std::int32_t>> prompts(static_cast<std::size_t>(b));
  std::vector<std::int32_t> next(static_cast<std::size_t>(b));
  for (std::int64_t s = 0; s < b; ++s) {
    const std::int64_t length = s == 0 && long_pp > 0 ? long_pp : pp;
    engine.add_sequence(s, length + tg);
    std::mt19937 rng(static_cast<std::uint32_t>(1234 + s));
    std::uniform_int_distribution<std::int32_t> token(0, static_cast<std::int32_t>(vocab - 1));
    for (std::int64_t i = 0; i < length; ++i) prompts[static_cast<std::size_t>(s)].push_back(token(rng));
  }
  std::vector<engine::StepRow> rows(static_cast<std::size_t>(b));
  std::vector<engine::StepOutput> out(rows.size());
  for (std::int64_t s = 0; s < b; ++s) {
    rows[static_cast<std::size_t>(s)] = {s, prompts[static_cast<std::size_t>(s)], true, {}};  // greedy
  }
  RunSeconds run;
  auto start = std::chrono::steady_clock::now();
  if (long_pp > 0) {  // the long prompt alone, then the others' (their outputs land in place)
    engine.step(std::span(rows).first(1), std::span(out).first(1));
    if (b > 1) engine.step(std::span(rows).subspan(1), std::span(out).subspan(1));
  } else {
    engine.step(rows, out);
  }
  run.prefill = seconds(start);
  start = std::chrono::steady_clock::now();
  for (std::int64_t step = 0; step < tg; ++step) {
    for (std::size_t s = 0; s < rows.size(); ++s) {
      next[s] = out[s].token;
      rows[s].tokens = std::span<const std::int32_t>(&next[s], 1);
    }
    engine.step(rows, out);
  }
  run.decode = seconds(start);
  run.kv_bytes = engine.kv_memory().used;
  for (std::int64_t s = 0; s < b; ++s) engine.free_sequence(s);
  return run;
}

BatchBenchRow run_case(SessionMaker& maker, const BatchBenchCase& c, std::int64_t pp, std::int64_t tg, std::int64_t b,
                       std::int64_t long_pp, std::int64_t repeats, bool profile) {
  const std::unique_ptr<engine::BatchEngine> engine =
      maker.make_batch(c.cache, std::numeric_limits<std::size_t>::max() / 2, std::max(pp, long_pp) + tg);
  run_once(*engine, std::min<std::int64_t>(pp, 16), std::min<std::int64_t>(tg, 2), b, 0);  // warm-up
  BatchBenchRow row;
  row.policy = c.policy;
  row.pp = pp, row.tg = tg, row.b = b, row.long_pp = long_pp;
  for (std::int64_t r = 0; r < repeats; ++r) {
    const RunSeconds run = run_once(*engine, pp, tg, b, long_pp);
    row.prefill_seconds.push_back(run.prefill);
    row.decode_seconds.push_back(run.decode);
    row.kv_bytes = run.kv_bytes;
  }
  std::sort(row.prefill_seconds.begin(), row.prefill_seconds.end());
  std::sort(row.decode_seconds.begin(), row.decode_seconds.end());
  if (profile) {
    LOWBIT_CHECK(engine->set_profiling(true), "--profile: this batch engine does not time its steps (",
                 maker.describe(), ")");
    row.profiled_decode_seconds = run_once(*engine, pp, tg, b, long_pp).decode;
    row.profile = engine->step_profile();
    engine->set_profiling(false);
  }
  return row;
}

void print_profile(const BatchBenchRow& r) {
  std::printf("\n### Decode steps of %s, PP %lld, TG %lld, B %lld: where the time goes\n\n"
              "The profiled run: %.1f generated tok/s (unprofiled median %.1f: the difference is profiling's "
              "cost).\n\n%s",
              r.policy.c_str(), static_cast<long long>(r.pp), static_cast<long long>(r.tg),
              static_cast<long long>(r.b), r.decode_tokens_per_second(r.profiled_decode_seconds),
              r.decode_tokens_per_second(r.median_decode()), engine::format_step_profile(*r.profile).c_str());
}

bench::Json profile_json(const engine::StepProfile& p) {
  bench::Json j = bench::Json::object();
  const double steps = static_cast<double>(std::max<std::int64_t>(p.steps, 1));
  j.set("steps", p.steps).set("device_ms_per_step", p.device_ms / steps).set("wall_ms_per_step", p.wall_ms / steps);
  bench::Json parts = bench::Json::object();
  for (std::size_t i = 0; i < engine::kStepParts; ++i) {
    parts.set(engine::step_part_key(static_cast<engine::StepPart>(i)), p.ms[i] / steps);
  }
  j.set("ms_per_step", parts);
  return j;
}

}  // namespace

std::vector<BatchBenchRow> run_bench_batch(const LoadedModel& loaded, SessionMaker& maker,
                                           const BatchBenchOptions& options) {
  std::vector<BatchBenchRow> rows;
  // Throughputs: the median run's, then [min, max] over the runs.
  std::printf("| policy | PP | TG | B | N_KV | T_PP s | S_PP t/s | S_PP min-max | T_TG s | S_TG t/s | S_TG min-max | "
              "KV MB |\n"
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const BatchBenchCase& c : options.policies) {
    for (const std::int64_t pp : options.prompt_tokens) {
      for (const std::int64_t tg : options.generated_tokens) {
        for (const std::int64_t b : options.batch_sizes) {
          const BatchBenchRow r =
              run_case(maker, c, pp, tg, b, options.long_prompt, options.repeats, options.profile);
          // A skewed batch's PP reads "PP+1xLONG": B - 1 prompts of PP, one of LONG.
          const std::string pp_label =
              std::to_string(pp) + (r.long_pp > 0 ? "+1x" + std::to_string(r.long_pp) : std::string());
          std::printf("| %s | %s | %lld | %lld | %lld | %.3f | %.1f | %.1f-%.1f | %.3f | %.1f | %.1f-%.1f | %.2f |\n",
                      r.policy.c_str(), pp_label.c_str(), static_cast<long long>(tg), static_cast<long long>(b),
                      static_cast<long long>(r.prompt_tokens() + b * tg), r.median_prefill(),
                      r.prefill_tokens_per_second(r.median_prefill()),
                      r.prefill_tokens_per_second(r.prefill_seconds.back()),
                      r.prefill_tokens_per_second(r.prefill_seconds.front()), r.median_decode(),
                      r.decode_tokens_per_second(r.median_decode()), r.decode_tokens_per_second(r.decode_seconds.back()),
                      r.decode_tokens_per_second(r.decode_seconds.front()), static_cast<double>(r.kv_bytes) / 1e6);
          std::fflush(stdout);
          rows.push_back(r);
        }
      }
    }
  }
  for (const BatchBenchRow& r : rows) {
    if (r.profile) print_profile(r);
  }
  if (!options.json_path.empty()) {
    bench::Json out = bench::run_info_json("batch", bench::collect_run_info());
    out.set("engine", maker.describe());
    if (maker.gpu()) {
      out.set("cuda_graphs", maker.cuda_graphs())
          .set("programmatic_launch", options.programmatic_launch);
    }
    out.set("model", loaded.model.source());
    bench::Json results = bench::Json::array();
    for (const BatchBenchRow& r : rows) {
      bench::Json j = bench::Json::object();
      j.set("policy", r.policy).set("pp", r.pp).set("tg", r.tg).set("b", r.b);
      if (r.long_pp > 0) j.set("long_pp", r.long_pp);
      auto stats = [&](const std::vector<double>& secs, auto rate) {
        bench::Json s = bench::Json::object();
        s.set("seconds_median", secs[secs.size() / 2]).set("seconds_min", secs.front()).set("seconds_max", secs.back());
        s.set("tokens_per_second_median", rate(secs[secs.size() / 2]));
        s.set("tokens_per_second_min", rate(secs.back())).set("tokens_per_second_max", rate(secs.front()));
        return s;
      };
      j.set("prefill", stats(r.prefill_seconds, [&](double t) { return r.prefill_tokens_per_second(t); }));
      j.set("decode", stats(r.decode_seconds, [&](double t) { return r.decode_tokens_per_second(t); }));
      j.set("runs", static_cast<std::int64_t>(r.decode_seconds.size()));
      j.set("kv_bytes", static_cast<std::int64_t>(r.kv_bytes));
      if (r.profile) {
        j.set("profile", profile_json(*r.profile));
        j.set("profiled_decode_tokens_per_second", r.decode_tokens_per_second(r.profiled_decode_seconds));
      }
      results.push(j);
    }
    out.set("results", results);
    out.write_file(options.json_path);
  }
  return rows;
}

}  // namespace lowbit::cli

// `lowbit bench speed`: the engine's tokens per second as llama-bench measures them:
// prompt processing (pp: one batch of N prompt tokens into an empty cache) and text
// generation (tg: N tokens one at a time from an empty cache), on random token ids,
// after one warm-up run, repeated; min / median / max and mean +- standard deviation.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>

#include "bench/common/json.h"
#include "bench/common/run_info.h"
#include "commands.h"
#include "engine_session.h"
#include "engine_setup.h"
#include "lowbit/error.h"
#include "threads.h"

namespace lowbit::cli {
namespace {

struct Spread {
  double min = 0, median = 0, max = 0, mean = 0, sd = 0;
};

Spread spread(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  Spread s;
  s.min = v.front(), s.max = v.back();
  s.median = v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  for (double x : v) s.mean += x / static_cast<double>(v.size());
  for (double x : v) s.sd += (x - s.mean) * (x - s.mean);
  s.sd = v.size() > 1 ? std::sqrt(s.sd / static_cast<double>(v.size() - 1)) : 0.0;
  return s;
}

}  // namespace

int bench_speed(const Args& args) {
  std::string model_path, device = "auto", cpu_weights = "blocks", json_path;
  std::int64_t prompt_tokens = 512, gen_tokens = 128, repetitions = 5;
  bool no_graphs = false;
  ThreadsFlag threads;
  Options cli("lowbit bench speed",
              "Tokens per second of the engine as llama-bench measures them: prompt processing (ppN: one\n"
              "batch of N random tokens into an empty KV cache) and generation (tgN: N tokens one at a time\n"
              "from an empty cache), after a warm-up run, repeated (min / median / max, mean +- sd).");
  cli.text("-m, --model", &model_path, "PATH", "a llama-family GGUF file (default: the cached SmolLM2-135M-Instruct)");
  cli.integer("-p, --prompt-tokens", &prompt_tokens, 0, 1 << 16,
              "prompt tokens of the pp test (default 512; 0 skips it)");
  cli.integer("-n, --gen-tokens", &gen_tokens, 0, 1 << 16, "tokens of the tg test (default 128; 0 skips it)");
  cli.integer("-r, --repetitions", &repetitions, 1, 1000, "timed runs of each test (default 5)");
  cli.text("--json", &json_path, "FILE", "also write the results as JSON");
  SessionMaker::declare(cli, &device, &no_graphs, &cpu_weights);
  threads.declare(cli);
  if (const auto status = cli.parse(args)) return *status;
  usage_check(prompt_tokens > 0 || gen_tokens > 0, "--prompt-tokens and --gen-tokens are both 0: nothing to time");
  threads.apply();

  const auto loaded = load_model(resolve_model_path(model_path), engine::parse_weight_form(cpu_weights.c_str()));
  const engine::ModelConfig& config = loaded->model.config();
  SessionMaker maker(*loaded, device, !no_graphs);
  std::mt19937 rng(1234);
  std::uniform_int_distribution<std::int32_t> token(0, static_cast<std::int32_t>(config.vocab - 1));
  auto random_tokens = [&](std::int64_t n) {
    std::vector<std::int32_t> ids(static_cast<std::size_t>(n));
    for (std::int32_t& id : ids) id = token(rng);
    return ids;
  };
  const auto session = maker.make({}, std::max<std::int64_t>({prompt_tokens, gen_tokens + 1, 1}));

  struct Test {
    std::string name;
    std::int64_t tokens;
    std::vector<double> rates;
  };
  std::vector<Test> tests;
  if (prompt_tokens > 0) tests.push_back({"pp" + std::to_string(prompt_tokens), prompt_tokens, {}});
  if (gen_tokens > 0) tests.push_back({"tg" + std::to_string(gen_tokens), gen_tokens, {}});
  for (Test& test : tests) {
    const bool prompt = test.name.rfind("pp", 0) == 0;
    Progress progress(test.name, repetitions + 1);
    for (std::int64_t run = 0; run <= repetitions; ++run) {  // run 0 warms up
      session->reset();
      const std::vector<std::int32_t> ids = random_tokens(prompt ? test.tokens : 1);
      const auto start = std::chrono::steady_clock::now();
      if (prompt) {
        session->forward(ids, false);
      } else {
        session->decode_greedy_run(ids[0], test.tokens, [](std::int32_t) { return true; });
      }
      const double seconds = seconds_since(start);
      if (run > 0) test.rates.push_back(static_cast<double>(test.tokens) / seconds);
      progress.update(run + 1, run == 0 ? "warm-up" : "");
    }
    progress.finish();
  }

  std::printf("# Engine speed, %s\n\n%s\n%s\n\n", maker.describe().c_str(), config.describe().c_str(),
              loaded->model.source().c_str());
  std::printf("| test | what | tokens/s (median) | min | max | mean +- sd | runs |\n"
              "|---|---|---:|---:|---:|---:|---:|\n");
  bench::Json rows = bench::Json::array();
  for (const Test& test : tests) {
    const Spread s = spread(test.rates);
    const bool prompt = test.name.rfind("pp", 0) == 0;
    std::printf("| %s | %s | %.1f | %.1f | %.1f | %.1f +- %.1f | %zu |\n", test.name.c_str(),
                prompt ? "prompt processing, one batch" : "generation, one token a step", s.median, s.min, s.max,
                s.mean, s.sd, test.rates.size());
    bench::Json row = bench::Json::object();
    row.set("test", test.name).set("tokens", test.tokens).set("median", s.median).set("min", s.min);
    row.set("max", s.max).set("mean", s.mean).set("sd", s.sd);
    rows.push(std::move(row));
  }
  if (!json_path.empty()) {
    bench::Json root = bench::run_info_json("bench_speed", bench::collect_run_info());
    root.set("device", maker.describe()).set("model", config.describe()).set("file", loaded->model.source());
    root.set("threads", threads.count()).set("rows", std::move(rows));
    std::ofstream out(json_path);
    LOWBIT_CHECK(out.good(), "--json: cannot write '", json_path, "'");
    out << root.dump() << "\n";
  }
  return 0;
}

}  // namespace lowbit::cli

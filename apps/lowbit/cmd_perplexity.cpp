// `lowbit perplexity`: perplexity of a text file under a KV-cache policy, over
// windows of --context tokens every --stride tokens (llama.cpp's perplexity tool).
#include <algorithm>
#include <cstdio>
#include <iostream>

#include "bench/common/json.h"
#include "bench/common/run_info.h"
#include "commands.h"
#include "engine/model_checks.h"
#include "engine/perplexity.h"
#include "engine_session.h"
#include "engine_setup.h"
#include "lowbit/error.h"
#include "threads.h"

namespace lowbit::cli {

int cmd_perplexity(const Args& args) {
  std::string model_path, file = default_text_path(), json_path, device = "auto";
  std::int64_t context = 512, stride = 0, max_windows = 0;
  KvCacheFlags kv;
  Options cli("lowbit perplexity",
              "Perplexity of a text file (default: the WikiText-2 test split in data/) on the GPU or the CPU,\n"
              "scored as llama-perplexity scores it: each window of --context tokens is evaluated from an\n"
              "empty KV cache with the policy (BOS first where the model wants it) and its second half is\n"
              "scored, each token with at least --context / 2 tokens before it (--score-all: every\n"
              "prediction of the first window, the last --stride of the others). Prints the estimate +- its\n"
              "standard error, as llama-perplexity does.");
  ThreadsFlag threads;
  cli.input_file("-f, --file", &file, "the text (default: data/wikitext-2-raw/wiki.test.raw)");
  cli.text("-m, --model", &model_path, "PATH|NAME", k_model_option_help);
  cli.integer("-c, --context", &context, 2, 1 << 20, "tokens per window (default 512)");
  cli.integer("--stride", &stride, 0, 1 << 20, "tokens between windows (default: --context)");
  cli.integer("--max-windows", &max_windows, 0, 1LL << 40, "stop after N windows (default 0: all)");
  bool score_all = false;
  cli.flag("--score-all", &score_all, "score every position, not only the second half of each window");
  cli.text("--json", &json_path, "FILE", "also write the result as JSON");
  kv.declare(cli, /*with_policy=*/true);
  std::string cpu_weights = "blocks";
  SessionMaker::declare(cli, &device, nullptr, &cpu_weights);
  threads.declare(cli);
  if (const auto status = cli.parse(args)) return *status;
  check_input_file("--file", file,
                   cli.given("--file") ? "" : " (the default text; pass --file PATH or set LOWBIT_WIKITEXT)");
  usage_check(stride <= context, "--stride ", stride, " is longer than --context ", context,
              " (windows would skip tokens)");
  kv.warn_ignored(cli);
  threads.apply();

  const auto loaded = load_model(resolve_model_path(model_path), engine::parse_weight_form(cpu_weights.c_str()));
  engine::check_within_context_length(context, loaded->model.config(), "--context " + std::to_string(context));
  // The text is plain text: a control token's spelling in it is not the control token.
  const std::vector<std::int32_t> ids = loaded->tokenizer.encode(read_file(file), loaded->tokenizer.add_bos(), false);
  engine::PerplexityOptions options;
  options.context = context;
  options.stride = stride;
  options.max_windows = max_windows;
  options.cache = kv.options();
  options.scoring = score_all ? engine::PerplexityScoring::all : engine::PerplexityScoring::second_half;
  if (loaded->tokenizer.add_bos()) options.window_start_token = loaded->tokenizer.bos_id();
  const char* scoring = score_all ? "every position" : "the second half of each window, as llama-perplexity";
  Progress progress("perplexity", 1);
  options.progress = [&](std::int64_t done, std::int64_t total, double ppl) {
    progress.set_total(total);
    char note[64];
    std::snprintf(note, sizeof note, "ppl %.4f", ppl);
    progress.update(done, note);
  };
  SessionMaker maker(*loaded, device);
  const std::unique_ptr<engine::Session> session =
      maker.make(options.cache, std::max<std::int64_t>(1, std::min<std::int64_t>(context, ids.size())));
  const auto start = std::chrono::steady_clock::now();
  const engine::PerplexityResult r = engine::perplexity(*session, ids, options);
  progress.finish();
  const double seconds = seconds_since(start);
  std::printf("perplexity %.4f +/- %.4f (mean NLL %.5f +/- %.5f) over %lld tokens in %lld windows of %lld, "
              "scoring %s; kv-cache %s; %.1f s (%s)\n",
              r.ppl, r.ppl_error, r.mean_nll, r.nll_std_error, static_cast<long long>(r.tokens_scored),
              static_cast<long long>(r.windows), static_cast<long long>(context), scoring, kv.policy.c_str(), seconds,
              maker.describe().c_str());
  if (!json_path.empty()) {
    bench::Json root = bench::run_info_json("perplexity", bench::collect_run_info());
    root.set("device", maker.describe())
        .set("model", loaded->model.config().describe())
        .set("file", file)
        .set("tokens_in_file", static_cast<std::int64_t>(ids.size()))
        .set("context", context)
        .set("stride", stride ? stride : context)
        .set("kv_cache", kv.policy)
        .set("sink", kv.sink)
        .set("window", kv.window)
        .set("kv_bits", static_cast<std::int64_t>(options.cache.kv_bits))
        .set("kv_group", kv.kv_group)
        .set("kv_rotate", kv.kv_rotate)
        .set("kv_symmetric", kv.kv_symmetric)
        .set("kv_key_block", kv.kv_key_block)
        .set("scoring", score_all ? "all" : "second_half")
        .set("ppl", r.ppl)
        .set("ppl_error", r.ppl_error)
        .set("mean_nll", r.mean_nll)
        .set("nll_std_error", r.nll_std_error)
        .set("tokens_scored", r.tokens_scored)
        .set("windows", r.windows)
        .set("seconds", seconds);
    root.write_file(json_path);
  }
  return 0;
}

}  // namespace lowbit::cli

// `lowbit eval kvcache`: the KV-cache policies compared on one model: for each policy,
// perplexity on WikiText-2 (+- its standard error), a greedy generation from a prompt
// scored with ROUGE-L against the full cache's, decode tokens/s after a long prompt
// (repeated: median, min, max), KV-cache bytes, a verdict line, and the memory curve
// (KV-cache bytes against generated tokens) drawn as a PNG.
#include <algorithm>
#include <cstdio>
#include <iostream>

#include "bench/common/json.h"
#include "bench/common/run_info.h"
#include "commands.h"
#include "dispatch.h"
#include "engine/generate.h"
#include "engine/model_checks.h"
#include "engine/perplexity.h"
#include "eval/rouge.h"
#include "engine_session.h"
#include "engine_setup.h"
#include "lowbit/error.h"
#include "report/line_plot.h"
#include "threads.h"

namespace lowbit::cli {
namespace {

struct PolicyCase {
  std::string name;   // as --policies spells it
  std::string label;  // for tables and the legend
  KvPolicy policy;
  int kv_bits;
};

std::vector<PolicyCase> policy_cases(const KvCacheFlags& kv) {
  const std::string window = "sink " + std::to_string(kv.sink) + " + window " + std::to_string(kv.window);
  return {
      {"full", "full (FP16)", KvPolicy::full, 8},
      {"window", "window (" + window + ", older dropped)", KvPolicy::window, 8},
      {"selective8", "selective INT8 (" + window + " FP16)", KvPolicy::selective, 8},
      {"selective4", "selective INT4 (" + window + " FP16)", KvPolicy::selective, 4},
      {"int8", "INT8 (all tokens)", KvPolicy::int8, 8},
      {"int4", "INT4 (all tokens)", KvPolicy::int4, 4},
  };
}

struct PolicyResult {
  PolicyCase policy;
  engine::PerplexityResult ppl;
  engine::GenerationResult generation;
  engine::GenerationResult speed;  // decode after the long (--speed-prompt) prompt: the last run
  std::vector<double> speed_rates;  // its decode tokens/s, one per run
  std::string text;
  eval::RougeL rouge_words{}, rouge_tokens{};
  std::size_t bytes_at_n = 0;
};

}  // namespace

int cmd_eval_kvcache(const Args& args) {
  std::string model_path, file = default_text_path(), json_path, png_path = "kvcache-memory.png", device = "auto";
  std::string prompt = "Once upon a time, in a small village at the edge of a great forest, there lived";
  std::int64_t context = 512, max_windows = 8, max_new = 200, memory_tokens = 4096, speed_prompt = 2048,
               speed_new = 512;
  std::vector<std::string> only;
  KvCacheFlags kv;
  Options cli("lowbit eval kvcache",
              "The KV-cache policies compared on one model (on the GPU, or the CPU): perplexity over\n"
              "WikiText-2 windows, a greedy generation from --prompt scored with ROUGE-L against the\n"
              "full cache's, decode tokens/s after that prompt and after a --speed-prompt-token prompt,\n"
              "KV-cache bytes (and at --memory-tokens tokens against full), and a PNG of KV-cache bytes\n"
              "against generated tokens, one line per policy.");
  cli.text("-m, --model", &model_path, "PATH|NAME", k_model_option_help);
  cli.input_file("-f, --file", &file, "perplexity text (default: data/wikitext-2-raw/wiki.test.raw)");
  cli.integer("-c, --context", &context, 2, 1 << 20, "perplexity window (default 512)");
  cli.integer("--max-windows", &max_windows, 0, 1LL << 40, "perplexity windows per policy (default 8; 0: all)");
  cli.text("-p, --prompt", &prompt, "TEXT", "the generation prompt");
  cli.integer("-n, --max-new-tokens", &max_new, 1, 1 << 20, "tokens generated per policy (default 200)");
  cli.integer("--speed-prompt", &speed_prompt, 0, 1 << 20,
              "tokens of WikiText in the decode-speed prompt (default 2048; 0 skips the speed run)");
  cli.integer("--speed-new-tokens", &speed_new, 2, 1 << 20,
              "tokens decoded in the speed run (default 512; 128-token runs swung by 5% on the H100)");
  cli.integer("--memory-tokens", &memory_tokens, 1, 1LL << 30, "report KV bytes at this many tokens (default 4096)");
  std::int64_t speed_repeats = 3;
  cli.integer("--speed-repeats", &speed_repeats, 1, 100, "runs of the decode-speed test per policy (default 3)");
  std::string scoring = "all";
  cli.choice("--ppl-scoring", &scoring, {"all", "second-half"},
             "perplexity over every position of each window (default, as earlier eval kvcache results) or its "
             "second half (as lowbit perplexity and llama-perplexity)");
  cli.choices("--policy", &only, {"full", "window", "selective8", "selective4", "int8", "int4"},
              "evaluate only this policy (full always runs: it is the reference)");
  cli.text("--png", &png_path, "FILE", "the memory plot (default kvcache-memory.png)");
  cli.text("--json", &json_path, "FILE", "also write the results as JSON");
  kv.declare(cli, /*with_policy=*/false);
  bool no_graphs = false;
  std::string cpu_weights = "blocks";
  SessionMaker::declare(cli, &device, &no_graphs, &cpu_weights);
  ThreadsFlag threads;
  threads.declare(cli);
  if (const auto status = cli.parse(args)) return *status;
  check_input_file("--file", file,
                   cli.given("--file") ? "" : " (the default text; pass --file PATH or set LOWBIT_WIKITEXT)");
  cli.warn_ignored({"--kv-bits"}, "(eval kvcache runs selective at 8 bits and at 4)");
  kv.validate();
  threads.apply();

  const auto loaded = load_model(resolve_model_path(model_path), engine::parse_weight_form(cpu_weights.c_str()));
  const engine::Model& model = loaded->model;
  const engine::Tokenizer& tok = loaded->tokenizer;
  engine::check_within_context_length(context, model.config(), "--context " + std::to_string(context));
  // The text is plain text: a control token's spelling in it is not the control token.
  const std::vector<std::int32_t> text_ids = tok.encode(read_file(file), tok.add_bos(), /*parse_special=*/false);
  const std::vector<std::int32_t> prompt_ids = tok.encode(prompt, tok.add_bos());
  LOWBIT_CHECK(!prompt_ids.empty(), "--prompt: the prompt encodes to no tokens");
  LOWBIT_CHECK(speed_prompt <= static_cast<std::int64_t>(text_ids.size()), "--speed-prompt: ", speed_prompt,
               " tokens, the text has ", text_ids.size());
  SessionMaker maker(*loaded, device, !no_graphs);
  const engine::KvShape shape{model.config().n_layers, model.config().n_kv_heads, model.config().head_dim};
  std::fprintf(stderr, "eval kvcache: %s; %zu text tokens, prompt %zu tokens (%s)\n",
               model.config().describe().c_str(), text_ids.size(), prompt_ids.size(), maker.describe().c_str());

  std::vector<PolicyResult> results;
  for (const PolicyCase& pc : policy_cases(kv)) {
    if (!only.empty() && pc.name != "full" && std::find(only.begin(), only.end(), pc.name) == only.end()) continue;
    PolicyResult r;
    r.policy = pc;
    const engine::KvCacheOptions cache = kv.options_for(pc.policy, pc.kv_bits);
    engine::PerplexityOptions ppl_options;
    ppl_options.context = context;
    ppl_options.max_windows = max_windows;
    ppl_options.cache = cache;
    ppl_options.scoring = scoring == "all" ? engine::PerplexityScoring::all : engine::PerplexityScoring::second_half;
    if (scoring != "all" && tok.add_bos()) ppl_options.window_start_token = tok.bos_id();
    Progress progress("  " + pc.name + " perplexity", 1);
    ppl_options.progress = [&](std::int64_t done, std::int64_t total, double ppl) {
      progress.set_total(total);
      char note[48];
      std::snprintf(note, sizeof note, "ppl %.4f", ppl);
      progress.update(done, note);
    };
    {
      const auto session = maker.make(cache, std::min<std::int64_t>(context, text_ids.size()));
      r.ppl = engine::perplexity(*session, text_ids, ppl_options);
    }
    progress.finish();
    {
      const auto session = maker.make(cache, static_cast<std::int64_t>(prompt_ids.size()) + max_new);
      // No stop token: every policy generates the same number of tokens.
      r.generation = engine::generate_greedy(*session, prompt_ids, max_new, nullptr, nullptr);
    }
    if (speed_prompt > 0) {
      const auto session = maker.make(cache, speed_prompt + speed_new);
      for (std::int64_t run = 0; run < speed_repeats; ++run) {
        session->reset();
        r.speed = engine::generate_greedy(
            *session, std::span<const std::int32_t>(text_ids.data(), static_cast<std::size_t>(speed_prompt)),
            speed_new, nullptr, nullptr);
        r.speed_rates.push_back(r.speed.decode_tokens_per_second());
      }
      std::sort(r.speed_rates.begin(), r.speed_rates.end());
    }
    r.text = tok.decode(r.generation.tokens);
    r.bytes_at_n = engine::KvCache::bytes_at(shape, cache, memory_tokens);
    std::fprintf(stderr, "  %s: ppl %.4f, decode %.1f tok/s, %.1f tok/s after %lld prompt tokens", pc.name.c_str(),
                 r.ppl.ppl, r.generation.decode_tokens_per_second(), r.speed.decode_tokens_per_second(),
                 static_cast<long long>(speed_prompt));
    if (r.speed.decode_device_seconds > 0 && r.speed.decode_seconds > 0) {
      std::fprintf(stderr, " (device busy %.0f%% of it)", 100.0 * r.speed.decode_device_seconds / r.speed.decode_seconds);
    }
    std::fprintf(stderr, "\n");
    results.push_back(std::move(r));
  }
  const PolicyResult& full = results.front();
  for (PolicyResult& r : results) {
    r.rouge_words = eval::rouge_l_words(r.text, full.text);
    r.rouge_tokens = eval::rouge_l(r.generation.tokens, full.generation.tokens);
  }

  auto median = [](const std::vector<double>& v) {
    if (v.empty()) return 0.0;
    return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  };
  const double mib = 1024.0 * 1024.0;
  std::printf("# KV-cache policies, %s\n\n%s\n\n", maker.describe().c_str(), model.config().describe().c_str());
  std::printf("- perplexity: %lld windows of %lld tokens of %s, scoring %s; +- is the standard error "
              "(lower is better); vs full: the ratio over the same tokens, +- from the per-token differences\n",
              static_cast<long long>(full.ppl.windows), static_cast<long long>(context), file.c_str(),
              scoring == "all" ? "every position of each window (as earlier eval kvcache results; lowbit perplexity "
                                 "scores the second half, as llama-perplexity)"
                               : "the second half of each window (as lowbit perplexity and llama-perplexity)");
  const std::string key_blocks =
      kv.kv_key_block == 0 ? "per token" : "per channel over blocks of " + std::to_string(kv.kv_key_block) + " tokens";
  std::printf("- quantized forms: rotated: %s; INT4 codes %s; channels per scale: %s; keys %s\n",
              kv.kv_rotate == "off" ? "no" : kv.kv_rotate == "k" ? "keys (Walsh-Hadamard)" : "keys and values (Walsh-Hadamard)",
              kv.kv_symmetric == "on" ? "symmetric" : "asymmetric",
              kv.kv_group == 0 ? "head_dim" : std::to_string(kv.kv_group).c_str(), key_blocks.c_str());
  std::printf("- ROUGE-L: F1 of the words of a %lld-token greedy generation against the full cache's (1 = the same "
              "text)\n",
              static_cast<long long>(max_new));
  if (speed_prompt > 0) {
    std::printf("- decode speed: tokens/s generating %lld tokens after a %lld-token prompt, median (min - max) of %lld "
                "runs\n",
                static_cast<long long>(speed_new), static_cast<long long>(speed_prompt),
                static_cast<long long>(speed_repeats));
  }
  std::printf("- KV-cache memory: what the cache holds at %lld tokens (K and V of every layer), MiB\n\n",
              static_cast<long long>(memory_tokens));
  std::printf("| policy | perplexity | vs full | ROUGE-L | decode tokens/s | vs full | KV cache at %lld tokens | "
              "vs full |\n"
              "|---|---:|---:|---:|---:|---:|---:|---:|\n",
              static_cast<long long>(memory_tokens));
  const double full_speed = median(full.speed_rates);
  for (const PolicyResult& r : results) {
    const double speed = median(r.speed_rates);
    char speed_cell[96] = "-", speed_ratio[32] = "-";
    if (!r.speed_rates.empty()) {
      std::snprintf(speed_cell, sizeof speed_cell, "%.1f (%.1f - %.1f)", speed, r.speed_rates.front(),
                    r.speed_rates.back());
      std::snprintf(speed_ratio, sizeof speed_ratio, "%.2fx", full_speed > 0 ? speed / full_speed : 0.0);
    }
    const engine::PerplexityRatio vs = engine::perplexity_ratio(r.ppl, full.ppl);
    std::printf("| %s | %.3f +- %.3f | %+.2f%% +- %.2f%% | %.3f | %s | %s | %.2f MiB | %.3fx |\n",
                r.policy.label.c_str(), r.ppl.ppl, r.ppl.ppl_error, 100.0 * (vs.ratio - 1.0), 100.0 * vs.std_error,
                r.rouge_words.f1, speed_cell, speed_ratio,
                static_cast<double>(r.bytes_at_n) / mib,
                static_cast<double>(r.bytes_at_n) / static_cast<double>(full.bytes_at_n));
  }
  // One line: how the quantizing policies trade perplexity, memory and speed against full.
  std::string verdict;
  for (const PolicyResult& r : results) {
    if (r.policy.policy != KvPolicy::selective) continue;
    char part[256];
    const engine::PerplexityRatio vs = engine::perplexity_ratio(r.ppl, full.ppl);
    std::snprintf(part, sizeof part, "%s%s perplexity %+.2f%% +- %.2f%%, %.2fx the KV memory",
                  verdict.empty() ? "" : "; ", r.policy.name == "selective8" ? "selective INT8" : "selective INT4",
                  100.0 * (vs.ratio - 1.0), 100.0 * vs.std_error,
                  static_cast<double>(r.bytes_at_n) / static_cast<double>(full.bytes_at_n));
    verdict += part;
    if (!r.speed_rates.empty() && full_speed > 0) {
      std::snprintf(part, sizeof part, ", %.2fx the decode speed", median(r.speed_rates) / full_speed);
      verdict += part;
    }
  }
  if (!verdict.empty()) std::printf("\nVerdict, against the full cache: %s.\n", verdict.c_str());

  report::LinePlot plot;
  plot.title = "KV-cache memory vs generated tokens (" + model.config().architecture + ", prompt " +
               std::to_string(prompt_ids.size()) + " tokens)";
  plot.x_label = "generated tokens";
  plot.y_label = "KV-cache bytes";
  for (const PolicyResult& r : results) {
    report::PlotSeries series{r.policy.label, {}, {}, 0};
    for (std::size_t i = 0; i < r.generation.kv_bytes.size(); ++i) {
      series.x.push_back(static_cast<double>(i));
      series.y.push_back(static_cast<double>(r.generation.kv_bytes[i]));
    }
    plot.series.push_back(std::move(series));
  }
  report::write_line_plot_png(plot, png_path);
  std::printf("\nmemory plot: %s\n", png_path.c_str());

  if (!json_path.empty()) {
    bench::Json root = bench::run_info_json("eval_kvcache", bench::collect_run_info());
    root.set("device", maker.describe()).set("model", model.config().describe()).set("context", context);
    root.set("speed_prompt_tokens", speed_prompt).set("speed_new_tokens", speed_new);
    root.set("max_new_tokens", max_new).set("memory_tokens", memory_tokens).set("prompt", prompt);
    root.set("ppl_scoring", scoring == "all" ? "all" : "second_half").set("speed_repeats", speed_repeats);
    root.set("kv_rotate", kv.kv_rotate).set("kv_symmetric", kv.kv_symmetric).set("kv_group", kv.kv_group);
    root.set("kv_key_block", kv.kv_key_block);
    bench::Json rows = bench::Json::array();
    for (const PolicyResult& r : results) {
      bench::Json row = bench::Json::object();
      row.set("policy", r.policy.name).set("label", r.policy.label).set("ppl", r.ppl.ppl);
      row.set("tokens_scored", r.ppl.tokens_scored).set("rouge_l_words", r.rouge_words.f1);
      row.set("rouge_l_tokens", r.rouge_tokens.f1).set("decode_tokens_per_s", r.generation.decode_tokens_per_second());
      row.set("decode_tokens_per_s_long_prompt", median(r.speed_rates));
      bench::Json rates = bench::Json::array();
      for (double rate : r.speed_rates) rates.push(rate);
      row.set("decode_tokens_per_s_long_prompt_runs", std::move(rates));
      row.set("ppl_error", r.ppl.ppl_error);
      if (r.speed.decode_steps > 0) {
        row.set("decode_device_ms_per_token_long_prompt",
                1e3 * r.speed.decode_device_seconds / static_cast<double>(r.speed.decode_steps));
      }
      row.set("prefill_seconds_long_prompt", r.speed.prefill_seconds);
      row.set("kv_bytes_end", static_cast<std::int64_t>(r.generation.kv_bytes.back()));
      row.set("kv_bytes_at_memory_tokens", static_cast<std::int64_t>(r.bytes_at_n));
      row.set("kv_ratio_vs_full", static_cast<double>(r.bytes_at_n) / static_cast<double>(full.bytes_at_n));
      row.set("text", r.text);
      rows.push(std::move(row));
    }
    root.set("rows", std::move(rows));
    root.write_file(json_path);
  }
  return 0;
}

}  // namespace lowbit::cli

namespace lowbit::cli {

int cmd_eval(const Args& args) {
  return run_subcommand(
      "lowbit eval",
      {{"kvcache", "the KV-cache policies compared on one model: perplexity, ROUGE-L, tokens/s, KV-cache\n"
                   "memory, and the memory-vs-tokens plot (PNG)",
        cmd_eval_kvcache},
       {"attention", "quantized-weight attention (NF4 / MXFP4 / NVFP4): four pipelines timed and checked\n"
                     "against an FP64 reference, the formats' round trip and memory",
        cmd_eval_attention}},
      args);
}

}  // namespace lowbit::cli

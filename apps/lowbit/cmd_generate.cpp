// `lowbit generate`: generation with a chosen KV-cache policy, greedy or sampled,
// streaming the text as it is produced (the seed's generate.py), then the speed and the
// cache size.
#include <cstdio>
#include <iostream>

#include "commands.h"
#include "engine/generate.h"
#include "engine/model_checks.h"
#include "engine/text_stream.h"
#include "engine_session.h"
#include "engine_setup.h"
#include "lowbit/error.h"
#include "sampling_flags.h"
#include "threads.h"

namespace lowbit::cli {

int cmd_generate(const Args& args) {
  std::string prompt, model_path, device = "auto";
  std::int64_t max_new = 200;
  bool chat = false, no_graphs = false;
  KvCacheFlags kv;
  SamplingFlags sampling_flags;
  Options cli("lowbit generate",
              "Generation with a KV-cache policy, on the GPU (lowbit's kernels) or the CPU, greedy (--temp 0,\n"
              "the default) or sampled; the text streams to stdout, the statistics (prefill and decode speed,\n"
              "KV-cache bytes) to stderr.");
  ThreadsFlag threads;
  cli.text("-p, --prompt", &prompt, "TEXT", "the prompt (required)");
  cli.text("-m, --model", &model_path, "PATH|NAME", k_model_option_help);
  cli.integer("-n, --max-new-tokens", &max_new, 1, 1 << 20, "tokens to generate at most (default 200)");
  cli.flag("--chat", &chat, "wrap the prompt in the model's chat template (instruct models)");
  kv.declare(cli, /*with_policy=*/true);
  sampling_flags.declare(cli, /*default_temperature=*/0.0);
  std::string cpu_weights = "blocks";
  SessionMaker::declare(cli, &device, &no_graphs, &cpu_weights);
  threads.declare(cli);
  if (const auto status = cli.parse(args)) return *status;
  usage_check(cli.given("--prompt"), "--prompt: required (the text to continue)");
  kv.warn_ignored(cli);
  threads.apply();
  const engine::SamplingParams sampling = sampling_flags.params();

  const auto loaded = load_model(resolve_model_path(model_path), engine::parse_weight_form(cpu_weights.c_str()));
  const engine::Tokenizer& tok = loaded->tokenizer;
  const std::string text = chat ? tok.apply_chat_template(prompt) : prompt;
  const std::vector<std::int32_t> ids = tok.encode(text, tok.add_bos());
  LOWBIT_CHECK(!ids.empty(), "--prompt: the prompt encodes to no tokens");
  const std::int64_t capacity = static_cast<std::int64_t>(ids.size()) + max_new;
  engine::check_within_context_length(
      capacity, loaded->model.config(),
      "prompt (" + std::to_string(ids.size()) + " tokens) + --max-new-tokens " + std::to_string(max_new));

  SessionMaker maker(*loaded, device, !no_graphs);
  const std::unique_ptr<engine::Session> session = maker.make(kv.options(), capacity);
  if (!chat) std::cout << prompt << std::flush;
  // Each token's text goes through the stop strings; a token that completes one ends
  // the generation like an end-of-generation token.
  engine::TextStream shown(sampling_flags.stops());
  const engine::GenerationResult result = engine::generate(
      *session, ids, max_new, sampling,
      [&](std::int32_t id) {
        if (tok.is_end_of_generation(id)) return true;
        std::cout << shown.push(tok.token_bytes(id)) << std::flush;
        return shown.stopped();
      },
      {});
  std::cout << shown.finish() << std::endl;  // flushed before the statistics go to stderr
  if (!sampling.greedy()) {
    std::fprintf(stderr, "[generate] sampling: temp %g, top-k %d, top-p %g, min-p %g, seed %llu\n",
                 static_cast<double>(sampling.temperature), sampling.top_k, static_cast<double>(sampling.top_p),
                 static_cast<double>(sampling.min_p), static_cast<unsigned long long>(sampling.seed));
  }
  std::fprintf(stderr,
               "[generate] %s, kv-cache %s: prompt %zu tokens, prefill %.2f s (%.1f tok/s); %zu generated, "
               "decode %.1f tok/s; KV cache %zu bytes%s\n",
               maker.describe().c_str(), kv.policy.c_str(), ids.size(), result.prefill_seconds,
               static_cast<double>(ids.size()) / result.prefill_seconds, result.tokens.size(),
               result.decode_tokens_per_second(), session->kv_bytes(), result.stopped ? (shown.stopped() ? " (stopped at --stop)" : " (stopped at EOS)") : "");
  if (result.decode_device_seconds > 0 && result.decode_steps > 0) {
    std::fprintf(stderr, "[generate] decode on the device: %.3f ms a token, %.0f%% of the wall time\n",
                 1e3 * result.decode_device_seconds / static_cast<double>(result.decode_steps),
                 100.0 * result.decode_device_seconds / result.decode_seconds);
  }
  return 0;
}

}  // namespace lowbit::cli

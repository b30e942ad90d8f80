// `lowbit generate`: greedy generation with a chosen KV-cache policy, streaming the
// text as it is produced (the seed's generate.py), then the speed and the cache size.
#include <cstdio>
#include <iostream>

#include "commands.h"
#include "engine/generate.h"
#include "engine/model_checks.h"
#include "engine_session.h"
#include "engine_setup.h"
#include "lowbit/error.h"

namespace lowbit::cli {

int cmd_generate(const Args& args) {
  std::string prompt, model_path, device = "auto";
  std::int64_t max_new = 200;
  bool chat = false, no_graphs = false;
  KvCacheFlags kv;
  Options cli("lowbit generate",
              "Greedy generation with a KV-cache policy, on the GPU (lowbit's kernels) or the CPU reference;\n"
              "the text streams to stdout, the statistics (prefill and decode speed, KV-cache bytes) to stderr.");
  cli.text("--prompt", &prompt, "TEXT", "the prompt (required)");
  cli.text("--model", &model_path, "PATH|NAME", k_model_option_help);
  cli.integer("--max-new-tokens", &max_new, 1, 1 << 20, "tokens to generate at most (default 200)");
  cli.flag("--chat", &chat, "wrap the prompt in the model's chat template (instruct models)");
  kv.declare(cli, /*with_policy=*/true);
  SessionMaker::declare(cli, &device, &no_graphs);
  if (const auto status = cli.parse(args)) return *status;
  LOWBIT_CHECK(!prompt.empty(), "--prompt: expected a non-empty prompt");

  const auto loaded = load_model(resolve_model_path(model_path));
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
  const engine::GenerationResult result = engine::generate_greedy(
      *session, ids, max_new, [&](std::int32_t id) { return tok.is_end_of_generation(id); },
      [&](std::int32_t id) { std::cout << tok.token_bytes(id) << std::flush; });
  std::cout << std::endl;  // flushed before the statistics go to stderr
  std::fprintf(stderr,
               "[generate] %s, kv-cache %s: prompt %zu tokens, prefill %.2f s (%.1f tok/s); %zu generated, "
               "decode %.1f tok/s; KV cache %zu bytes%s\n",
               maker.describe().c_str(), kv.policy.c_str(), ids.size(), result.prefill_seconds,
               static_cast<double>(ids.size()) / result.prefill_seconds, result.tokens.size(),
               result.decode_tokens_per_second(), session->kv_bytes(), result.stopped ? " (stopped at EOS)" : "");
  if (result.decode_device_seconds > 0 && result.decode_steps > 0) {
    std::fprintf(stderr, "[generate] decode on the device: %.3f ms a token, %.0f%% of the wall time\n",
                 1e3 * result.decode_device_seconds / static_cast<double>(result.decode_steps),
                 100.0 * result.decode_device_seconds / result.decode_seconds);
  }
  return 0;
}

}  // namespace lowbit::cli

// `lowbit bench serve`: option parsing and the report of serve/load_generator.h.
#include <cstdio>

#include "bench/common/json.h"
#include "bench/common/run_info.h"
#include "list_options.h"
#include "commands.h"
#include "options.h"
#include "serve/load_generator.h"

namespace lowbit::cli {

int cmd_bench_serve(const Args& args) {
  serve::LoadOptions o;
  std::string concurrency = "1,8", json_path;
  std::int64_t port = o.port;
  Options cli("lowbit bench serve",
              "A load generator against a running lowbit serve (or any OpenAI-compatible server): at each\n"
              "concurrency level, that many clients send streaming completions back to back (prompts of random\n"
              "token ids, greedy, ignore_eos: each generates --max-tokens); requests/s, generated tokens/s, time\n"
              "to first token and inter-token latency, p50 and p99.");
  cli.text("--host", &o.host, "ADDRESS", "the server's address (default 127.0.0.1)");
  cli.integer("--port", &port, 1, 65535, "the server's port (default 8080)");
  cli.text("--model", &o.model, "NAME", "the model to ask for (default: the first GET /v1/models lists)");
  cli.text("--concurrency", &concurrency, "LIST", "clients at once, comma-separated levels (default 1,8)");
  cli.integer("--requests", &o.requests, 0, 1 << 24, "requests per level (default 0: 4 x the concurrency)");
  cli.integer("--prompt-tokens", &o.prompt_tokens, 1, 1 << 20, "prompt length in tokens (default 128)");
  cli.integer("--max-tokens", &o.max_tokens, 1, 1 << 20, "tokens each request generates (default 64)");
  cli.text("--json", &json_path, "FILE", "also write the results as JSON");
  if (const auto status = cli.parse(args)) return *status;
  o.port = static_cast<int>(port);
  o.concurrency = parse_positive_integers(concurrency, "--concurrency", 1 << 16);

  const std::vector<serve::LoadResult> results = serve::run_load(o);
  std::printf("lowbit bench serve: http://%s:%d, prompts of %lld tokens, %lld generated each\n\n", o.host.c_str(),
              o.port, static_cast<long long>(o.prompt_tokens), static_cast<long long>(o.max_tokens));
  std::printf("ITL: the gaps between a stream's tokens. Server steps (lowbit serve's /metrics, '-' from other "
              "servers): the engine steps of the level, decode rows only and with prompt tokens (chunked "
              "prefill, which every running stream waits for), as count x mean ms.\n\n");
  std::printf("| concurrency | requests | failed | s | req/s | gen tok/s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | "
              "ITL p99 ms | decode steps | prompt steps |\n"
              "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  int status = 0;
  for (const serve::LoadResult& r : results) {
    char decode[64] = "-", prompt[64] = "-";
    if (r.has_steps) {
      std::snprintf(decode, sizeof decode, "%.0f x %.2f", r.decode_steps, r.decode_step_ms);
      std::snprintf(prompt, sizeof prompt, "%.0f x %.2f", r.prompt_steps, r.prompt_step_ms);
    }
    std::printf("| %lld | %lld | %lld | %.2f | %.2f | %.1f | %.1f | %.1f | %.1f | %.1f | %s | %s |\n",
                static_cast<long long>(r.concurrency), static_cast<long long>(r.requests),
                static_cast<long long>(r.failed), r.seconds, r.requests_per_second(), r.tokens_per_second(),
                r.ttft_p50_ms, r.ttft_p99_ms, r.itl_p50_ms, r.itl_p99_ms, decode, prompt);
    if (r.failed > 0) {
      std::fprintf(stderr, "bench serve: %lld of %lld requests failed at concurrency %lld; the first: %s\n",
                   static_cast<long long>(r.failed), static_cast<long long>(r.requests),
                   static_cast<long long>(r.concurrency), r.first_error.c_str());
      status = 1;
    }
  }
  if (!json_path.empty()) {
    bench::Json out = bench::run_info_json("serve", bench::collect_run_info());
    out.set("url", "http://" + o.host + ":" + std::to_string(o.port));
    out.set("prompt_tokens", o.prompt_tokens).set("max_tokens", o.max_tokens);
    bench::Json levels = bench::Json::array();
    for (const serve::LoadResult& r : results) {
      bench::Json j = bench::Json::object();
      j.set("concurrency", r.concurrency).set("requests", r.requests).set("failed", r.failed);
      j.set("seconds", r.seconds).set("requests_per_second", r.requests_per_second());
      j.set("generated_tokens", r.generated_tokens).set("tokens_per_second", r.tokens_per_second());
      j.set("ttft_p50_ms", r.ttft_p50_ms).set("ttft_p99_ms", r.ttft_p99_ms);
      j.set("itl_p50_ms", r.itl_p50_ms).set("itl_p99_ms", r.itl_p99_ms);
      if (r.has_steps) {
        j.set("decode_steps", r.decode_steps).set("decode_step_ms", r.decode_step_ms);
        j.set("prompt_steps", r.prompt_steps).set("prompt_step_ms", r.prompt_step_ms);
      }
      levels.push(j);
    }
    out.set("results", levels);
    out.write_file(json_path);
  }
  return status;
}

}  // namespace lowbit::cli

// `lowbit serve`: an OpenAI-compatible HTTP server (serve/http_server.h) over the
// continuous-batching scheduler, with llama-server's option names. SIGINT / SIGTERM
// shut it down gracefully.
#include <pthread.h>
#include <signal.h>

#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <thread>

#include "commands.h"
#include "engine/scheduler.h"
#include "engine_session.h"
#include "engine_setup.h"
#include "lowbit/error.h"
#include "sampling_flags.h"
#include "serve/http_server.h"

namespace lowbit::cli {
namespace {

// --kv-memory: GB (0 < GB <= 1e6), or "P%" of the memory free once the model is loaded
// (0 < P <= 100).
struct KvMemoryFlag {
  double gb = 0, percent = 0;
};
KvMemoryFlag parse_kv_memory(const std::string& text) {
  const bool percent = !text.empty() && text.back() == '%';
  const std::string number = percent ? text.substr(0, text.size() - 1) : text;
  char* end = nullptr;
  const double value = number.empty() ? NAN : std::strtod(number.c_str(), &end);
  const bool parsed = !number.empty() && end == number.c_str() + number.size() && std::isfinite(value);
  usage_check(parsed && value > 0 && value <= (percent ? 100 : 1e6), "--kv-memory: expected GB (0 < GB <= 1e6) or a ",
              "percentage of the free memory (0% < P <= 100%, e.g. 90%), got '", text, "'");
  return percent ? KvMemoryFlag{0, value} : KvMemoryFlag{value, 0};
}

}  // namespace

int cmd_serve(const Args& args) {
  // SIGINT / SIGTERM go to one thread, which shuts the server down: they are blocked
  // here, before any thread exists (OpenMP's included), and every thread inherits that.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::string model_path, host = "127.0.0.1", device = "auto", alias;
  std::int64_t port = 8080, ctx_size = 0, parallel = 4, queue = 64, batch = 512, chunk = 256, n_predict = 256;
  std::int64_t timeout = 10, max_body = 1 << 20;
  std::string kv_memory_text = "1";
  double shutdown_timeout = 10.0;
  KvCacheFlags kv;
  SamplingFlags sampling_flags;
  Options cli("lowbit serve",
              "An OpenAI-compatible HTTP server (POST /v1/completions, /v1/chat/completions, streaming or not;\n"
              "GET /v1/models, /health, /metrics) over lowbit's continuous-batching scheduler: requests join and\n"
              "leave between steps, prompts are prefilled in chunks beside the decode steps, and when the KV budget\n"
              "is full the newest sequence is preempted and recomputed later. The sampling options are the\n"
              "defaults of the fields a request leaves out. SIGINT / SIGTERM: in-flight requests finish (or are\n"
              "cancelled after --shutdown-timeout), then the server exits.");
  cli.text("--model", &model_path, "PATH", "a llama-family GGUF file (default: the cached SmolLM2-135M-Instruct)");
  cli.text("--host", &host, "ADDRESS", "address to listen on (default 127.0.0.1)");
  cli.integer("--port", &port, 0, 65535, "port to listen on (default 8080; 0: any free port)");
  cli.text("--alias", &alias, "NAME", "the model's name in the API (default: the GGUF file's name)");
  cli.choice("--device", &device, {"auto", "cpu", "gpu"},
             "where the forward passes run: the CPU, the GPU (its batch engine), or auto (the GPU when present; "
             "default)");
  kv.declare(cli, /*with_policy=*/true);
  cli.text("--kv-memory", &kv_memory_text, "GB|P%",
           "KV cache all sequences share: GB, or a percentage of the memory free once the model is loaded "
           "(the GPU's; the host's with the CPU engine), e.g. 90% (default 1 GB)");
  cli.integer("--ctx-size", &ctx_size, 0, 1 << 24, "tokens a sequence may hold, prompt included (default 0: the model's)");
  cli.integer("--parallel", &parallel, 1, 4096, "sequences decoded together at most (default 4)");
  cli.integer("--queue-size", &queue, 1, 1 << 20, "requests waiting beyond those; more get 503 (default 64)");
  cli.integer("--batch-size", &batch, 2, 1 << 20, "tokens a step appends at most, prompt chunks and decode rows (default 512)");
  cli.integer("--prefill-chunk", &chunk, 1, 1 << 20, "prompt tokens a sequence appends a step at most (default 256)");
  cli.integer("--n-predict", &n_predict, 1, 1 << 24, "max_tokens of a request that gives none (default 256)");
  sampling_flags.declare(cli, /*default_temperature=*/0.8);
  cli.integer("--timeout", &timeout, 1, 3600, "seconds a streaming client may stall before it is dropped (default 10)");
  cli.integer("--max-body-bytes", &max_body, 1024, 1LL << 32, "largest request body accepted (default 1 MiB)");
  cli.number("--shutdown-timeout", &shutdown_timeout, 0.0, 86400.0,
             "seconds in-flight requests get to finish at SIGINT / SIGTERM (default 10)");
  if (const auto status = cli.parse(args)) return *status;
  const KvMemoryFlag kv_memory = parse_kv_memory(kv_memory_text);
  usage_check(parallel + chunk <= batch, "--batch-size (", batch, "): expected at least --parallel (", parallel,
              ") + --prefill-chunk (", chunk, ")");
  kv.warn_ignored(cli);
  const engine::SamplingParams sampling = sampling_flags.params();

  const std::string path = resolve_model_path(model_path);
  const auto loaded = load_model(path);
  const std::int64_t trained = loaded->model.config().context_length;
  const std::int64_t context = ctx_size > 0 ? ctx_size : trained;
  LOWBIT_CHECK(context > 0, "--ctx-size: the model states no context length; pass one");
  LOWBIT_CHECK(trained == 0 || context <= trained, "--ctx-size ", context, " exceeds the model's context length ",
               trained);
  SessionMaker maker(*loaded, device);
  std::size_t budget = static_cast<std::size_t>(std::llround(kv_memory.gb * 1e9));
  if (kv_memory.percent > 0) {
    const std::size_t free = maker.free_memory_bytes();
    budget = static_cast<std::size_t>(static_cast<double>(free) * kv_memory.percent / 100.0);
    std::fprintf(stderr, "[serve] KV budget %.2f GB: %g%% of the %.2f GB free\n", static_cast<double>(budget) / 1e9,
                 kv_memory.percent, static_cast<double>(free) / 1e9);
    LOWBIT_CHECK(budget > 0, "--kv-memory ", kv_memory_text, ": no memory is free for the KV cache");
  }
  const std::unique_ptr<engine::BatchEngine> engine = maker.make_batch(kv.options(), budget, context);
  engine::BatchEngine& batch_engine = *engine;

  engine::SchedulerOptions so;
  so.max_running = parallel;
  so.max_queued = queue;
  so.step_tokens = batch;
  so.prefill_chunk = chunk;
  const engine::Tokenizer& tokenizer = loaded->tokenizer;
  so.end_of_generation = [&tokenizer](std::int32_t id) { return tokenizer.is_end_of_generation(id); };
  engine::Scheduler scheduler(batch_engine, so);

  serve::ServeOptions options;
  options.host = host;
  options.port = static_cast<int>(port);
  options.model_id = alias.empty() ? std::filesystem::path(path).stem().string() : alias;
  options.sampling = sampling;
  options.default_max_tokens = n_predict;
  options.max_context = context;
  options.max_body_bytes = static_cast<std::size_t>(max_body);
  options.write_timeout_seconds = static_cast<int>(timeout);
  options.shutdown_timeout_seconds = shutdown_timeout;
  options.http_threads = static_cast<std::size_t>(parallel + queue + 8);

  serve::HttpServer server(tokenizer, scheduler, options);
  const int bound = server.bind();
  std::thread signal_thread([&] {
    int received = 0;
    sigwait(&signals, &received);
    std::cerr << "[serve] " << (received == SIGINT ? "SIGINT" : "SIGTERM") << ": shutting down\n";
    server.shutdown();
  });
  std::cerr << "[serve] " << options.model_id << " on " << batch_engine.describe() << "; parallel " << parallel
            << ", batch " << batch << " tokens, prefill chunk " << chunk << "\n"
            << "[serve] listening on http://" << host << ":" << bound << std::endl;
  server.run();
  pthread_kill(signal_thread.native_handle(), SIGTERM);  // wakes it if the listener ended by itself
  signal_thread.join();
  std::cerr << "[serve] stopped\n";
  return 0;
}

}  // namespace lowbit::cli

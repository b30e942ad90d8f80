// lowbit serve's HTTP side (cpp-httplib): the OpenAI routes over the engine's
// scheduler, one engine thread that runs its steps, and a graceful shutdown.
//   POST /v1/completions, /v1/chat/completions   (stream or not)
//   GET  /v1/models, /health                     (/health also reports the KV pool)
// Every refused request gets an OpenAI-style JSON error: 400 for a malformed or
// out-of-range one, 404 for an unknown model or route, 413 for an oversize body, 503
// when the queue is full or the server is shutting down. A streaming client that goes
// away (or reads too slowly past the write timeout) cancels its sequence.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "engine/sampling.h"
#include "engine/scheduler.h"
#include "engine/tokenizer/tokenizer.h"

namespace lowbit::serve {

struct ServeOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                          // 0: any free port (bind() says which)
  std::string model_id;                     // the name /v1/models lists and requests may give
  engine::SamplingParams sampling;          // defaults of the fields a request leaves out
  std::int64_t default_max_tokens = 256;    // for requests without max_tokens
  std::int64_t max_context = 0;             // prompt + max_tokens at most
  std::size_t max_body_bytes = 1 << 20;
  int write_timeout_seconds = 10;           // a client that reads nothing for this long is dropped
  double shutdown_timeout_seconds = 10.0;   // in-flight requests get this long to finish
  std::size_t http_threads = 32;
};

class HttpServer {
 public:
  // The tokenizer and scheduler are borrowed and must outlive the server.
  HttpServer(const engine::Tokenizer& tokenizer, engine::Scheduler& scheduler, ServeOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds the listening socket; returns the port. Throws lowbit::Error naming host:port.
  int bind();
  // Serves until shutdown(); runs the engine thread meanwhile.
  void run();
  // From any thread: refuses new requests (503), lets the ones in flight finish for up to
  // shutdown_timeout_seconds, cancels the rest, then stops listening; run() returns.
  void shutdown();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lowbit::serve

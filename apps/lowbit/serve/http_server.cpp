#include "serve/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <iostream>
#include <random>
#include <thread>

#include "lowbit/error.h"
#include "serve/api_error.h"
#include "serve/connection_pool.h"
#include "serve/metrics.h"
#include "serve/openai_request.h"
#include "serve/openai_response.h"
#include "serve/request_channel.h"

namespace lowbit::serve {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

constexpr auto kPoll = 200ms;  // how often a waiting HTTP thread looks again
constexpr std::size_t kMaxConnections = 1024;  // open connections served at once beyond http_threads

void reply(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(dump(body), "application/json");
}

void reply_error(httplib::Response& res, const ApiError& e) { reply(res, e.status, error_json(e)); }

std::uint64_t random_seed() {
  std::random_device device;
  return (static_cast<std::uint64_t>(device()) << 32) | device();
}

}  // namespace

struct HttpServer::Impl {
  const engine::Tokenizer* tokenizer;
  engine::Scheduler* scheduler;
  ServeOptions options;
  httplib::Server http;
  std::int64_t started = std::time(nullptr);
  std::atomic<std::int64_t> next_id{1};
  std::atomic<bool> stopping{false}, engine_stop{false};
  std::atomic<int> active_streams{0};
  std::thread engine_thread;
  socket_t listen_socket = INVALID_SOCKET;  // seen by the socket options, before bind
  std::mutex shutdown_mutex;
  bool shut_down = false;

  void routes();
  void generate(const httplib::Request& req, httplib::Response& res, Endpoint endpoint);
  engine::GenerationRequest to_generation(const ApiRequest& r) const;
  json health() const;
  void engine_loop();
};

void HttpServer::Impl::engine_loop() {
  while (!engine_stop.load()) {
    try {
      if (!scheduler->step()) scheduler->wait_for_work(100ms);
    } catch (const std::exception& e) {
      std::cerr << "[serve] engine step failed: " << e.what() << "\n";
    }
  }
}

json HttpServer::Impl::health() const {
  const engine::SchedulerStats s = scheduler->stats();
  return {{"status", stopping.load() ? "shutting_down" : "ok"},
          {"running", s.running},
          {"queued", s.queued},
          {"sequences", s.live_sequences},
          {"kv_used_bytes", s.kv.used},
          {"kv_budget_bytes", s.kv.budget},
          {"steps", s.steps},
          {"preemptions", s.preemptions},
          {"requests_finished", s.finished},
          {"requests_cancelled", s.cancelled},
          {"requests_failed", s.failed},
          {"prompt_tokens", s.prompt_tokens},
          {"generated_tokens", s.generated_tokens},
          {"streams", active_streams.load()}};
}

// The prompt's tokens and the request's limits, checked against the context.
engine::GenerationRequest HttpServer::Impl::to_generation(const ApiRequest& r) const {
  engine::GenerationRequest g;
  const engine::Tokenizer& tok = *tokenizer;
  if (r.endpoint == Endpoint::chat) {
    std::string text;
    try {
      text = tok.apply_chat_template(r.messages);
    } catch (const Error& e) {
      throw bad_request("messages", std::string("this model's chat template cannot be applied: ") + e.what());
    }
    g.prompt = tok.encode(text, tok.add_bos());
  } else if (r.prompt_is_tokens) {
    for (std::size_t i = 0; i < r.prompt_tokens.size(); ++i) {
      if (r.prompt_tokens[i] >= tok.vocab_size()) {
        throw bad_request("prompt", "token id " + std::to_string(r.prompt_tokens[i]) + " at index " + std::to_string(i) +
                                        " is outside the vocabulary (0.." + std::to_string(tok.vocab_size() - 1) + ")");
      }
    }
    g.prompt = r.prompt_tokens;
  } else {
    g.prompt = tok.encode(r.prompt, tok.add_bos());
  }
  if (g.prompt.empty()) throw bad_request("prompt", "encodes to no tokens");
  const auto prompt = static_cast<std::int64_t>(g.prompt.size());
  const std::int64_t context = options.max_context;
  if (prompt >= context) {
    throw bad_request("prompt",
                      "the prompt has " + std::to_string(prompt) + " tokens; this model's context is " +
                          std::to_string(context) + " tokens, which must also hold at least one generated token",
                      "context_length_exceeded");
  }
  if (r.max_tokens) {
    if (*r.max_tokens > context - prompt) {
      throw bad_request("max_tokens",
                        "this model's maximum context length is " + std::to_string(context) + " tokens; the request " +
                            "asks for " + std::to_string(prompt) + " prompt tokens + " +
                            std::to_string(*r.max_tokens) + " max_tokens",
                        "context_length_exceeded");
    }
    g.max_new_tokens = *r.max_tokens;
  } else {
    g.max_new_tokens = std::min(options.default_max_tokens, context - prompt);
  }
  g.sampling = r.sampling;
  if (!r.seed_given) g.sampling.seed = random_seed();
  g.stop_at_end_of_generation = !r.ignore_eos;
  g.logprobs = r.logprobs;
  return g;
}

void HttpServer::Impl::generate(const httplib::Request& req, httplib::Response& res, Endpoint endpoint) {
  ApiRequest r = parse_request(req.body, endpoint, options.sampling);
  if (!r.model.empty() && r.model != options.model_id) {
    throw ApiError(404, "The model `" + r.model + "` does not exist; this server serves `" + options.model_id + "`",
                   "model", "model_not_found");
  }
  engine::GenerationRequest g = to_generation(r);
  const std::int64_t prompt_tokens = static_cast<std::int64_t>(g.prompt.size());
  auto channel = std::make_shared<RequestChannel>(*tokenizer, r.stop);
  std::optional<engine::RequestId> id;
  try {
    id = scheduler->submit(std::move(g), channel);
  } catch (const Error& e) {
    throw bad_request("", e.what());
  }
  if (!id) {
    if (scheduler->closed()) throw ApiError(503, "the server is shutting down", "", "shutting_down", "server_error");
    throw ApiError(503, "the server is busy: its request queue is full; retry later", "", "queue_full", "server_error");
  }
  ResponseHead head{endpoint, (endpoint == Endpoint::chat ? "chatcmpl-" : "cmpl-") + std::to_string(*id),
                    static_cast<std::int64_t>(std::time(nullptr)), options.model_id};
  const bool logprobs = r.logprobs >= 0;

  if (!r.stream) {
    std::string text;
    std::vector<Piece> pieces;
    std::optional<engine::RequestSummary> end;
    while (!end) {
      RequestChannel::Taken t = channel->take(kPoll);
      for (Piece& p : t.pieces) {
        text += p.text;
        pieces.push_back(std::move(p));
      }
      end = t.finished;
    }
    if (end->reason == engine::FinishReason::cancelled) {
      throw ApiError(503, "the request was cancelled: the server is shutting down", "", "cancelled", "server_error");
    }
    if (end->reason == engine::FinishReason::error) {
      throw ApiError(500, "generation failed: " + end->error, "", "engine_error", "server_error");
    }
    reply(res, 200,
          completion_json(head, text, pieces, *tokenizer, logprobs, finish_reason(end->reason),
                          Usage{prompt_tokens, end->generated_tokens}));
    return;
  }

  // Streaming: server-sent events, one per batch of pieces taken, then the end.
  struct Stream {
    std::shared_ptr<RequestChannel> channel;
    ResponseHead head;
    bool logprobs, include_usage, first = true, done = false;
    std::int64_t prompt_tokens;
    std::size_t streamed = 0;  // bytes of text sent so far
  };
  auto stream =
      std::make_shared<Stream>(Stream{channel, head, logprobs, r.include_usage, true, false, prompt_tokens, 0});
  ++active_streams;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, stream](std::size_t, httplib::DataSink& sink) {
        if (stream->done) return false;
        RequestChannel::Taken t = stream->channel->take(kPoll);
        std::string text, out;
        bool any_token = false;
        for (const Piece& p : t.pieces) {
          text += p.text;
          any_token = any_token || p.token >= 0;
        }
        auto event = [&](const json& j) { out += "data: " + dump(j) + "\n\n"; };
        if (!text.empty() || (stream->logprobs && any_token) || (stream->first && stream->head.endpoint == Endpoint::chat)) {
          event(chunk_json(stream->head, text, t.pieces, *tokenizer, stream->logprobs, nullptr, stream->first,
                           stream->streamed));
          stream->first = false;
          stream->streamed += text.size();
        }
        if (t.finished) {
          const engine::RequestSummary& end = *t.finished;
          if (end.reason == engine::FinishReason::cancelled || end.reason == engine::FinishReason::error) {
            const bool cancelled = end.reason == engine::FinishReason::cancelled;
            event(error_json(ApiError(cancelled ? 503 : 500,
                                      cancelled ? "the request was cancelled: the server is shutting down"
                                                : "generation failed: " + end.error,
                                      "", cancelled ? "cancelled" : "engine_error", "server_error")));
          } else {
            event(chunk_json(stream->head, "", {}, *tokenizer, false, finish_reason(end.reason), stream->first));
            if (stream->include_usage) event(usage_chunk_json(stream->head, Usage{stream->prompt_tokens, end.generated_tokens}));
          }
          out += "data: [DONE]\n\n";
          stream->done = true;
        }
        if (!out.empty() && !sink.write(out.data(), out.size())) return false;  // the client is gone
        if (stream->done) sink.done();
        return true;
      },
      [this, stream, id = *id](bool) {
        if (!stream->done) scheduler->cancel(id);  // disconnected, too slow, or the listener stopped
        --active_streams;
      });
}

void HttpServer::Impl::routes() {
  http.Get("/health", [this](const httplib::Request&, httplib::Response& res) { reply(res, 200, health()); });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(prometheus_metrics(scheduler->stats(), active_streams.load()),
                    "text/plain; version=0.0.4; charset=utf-8");
  });
  http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    reply(res, 200, models_json(options.model_id, started));
  });
  http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    generate(req, res, Endpoint::completions);
  });
  http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    generate(req, res, Endpoint::chat);
  });
  http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    try {
      std::rethrow_exception(ep);
    } catch (const ApiError& e) {
      reply_error(res, e);
    } catch (const std::exception& e) {
      reply_error(res, ApiError(500, std::string("internal error: ") + e.what(), "", "internal_error", "server_error"));
    } catch (...) {
      reply_error(res, ApiError(500, "internal error", "", "internal_error", "server_error"));
    }
  });
  // Statuses httplib sets by itself (404 no route, 413 too large, 400 bad HTTP) get a JSON body.
  http.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    std::string message = "HTTP " + std::to_string(res.status);
    std::string code;
    if (res.status == 404) message = "no route for " + req.method + " " + req.path, code = "not_found";
    if (res.status == 413) message = "the request body is larger than the server accepts", code = "body_too_large";
    if (res.status == 405) message = "method " + req.method + " not allowed on " + req.path, code = "method_not_allowed";
    reply(res, res.status, error_json(ApiError(res.status, message, "", code)));
    return httplib::Server::HandlerResponse::Handled;
  }));
}

HttpServer::HttpServer(const engine::Tokenizer& tokenizer, engine::Scheduler& scheduler, ServeOptions options)
    : impl_(std::make_unique<Impl>()) {
  LOWBIT_CHECK(options.max_context > 0, "serve: max_context must be > 0");
  impl_->tokenizer = &tokenizer;
  impl_->scheduler = &scheduler;
  impl_->options = std::move(options);
  const std::size_t threads = impl_->options.http_threads;
  // Workers as connections need them (an idle keep-alive connection holds one), never
  // fewer than `threads`, at most kMaxConnections more.
  impl_->http.new_task_queue = [threads] {
    return new ConnectionPool(threads, threads + kMaxConnections, std::chrono::seconds(10));
  };
  impl_->http.set_payload_max_length(impl_->options.max_body_bytes);
  impl_->http.set_write_timeout(impl_->options.write_timeout_seconds, 0);
  impl_->http.set_read_timeout(30, 0);
  // SO_REUSEADDR alone: a restarted server binds past the old one's TIME_WAIT sockets.
  // cpp-httplib's default sets SO_REUSEPORT, with which a second server on the same
  // port binds too and silently takes half of the connections.
  impl_->http.set_socket_options([impl = impl_.get()](socket_t sock) {
    const int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    impl->listen_socket = sock;
  });
  impl_->routes();
}

HttpServer::~HttpServer() {
  impl_->engine_stop = true;
  impl_->scheduler->wake();
  if (impl_->engine_thread.joinable()) impl_->engine_thread.join();
}

int HttpServer::bind() {
  const ServeOptions& o = impl_->options;
  int port = o.port;
  if (port == 0) {
    port = impl_->http.bind_to_any_port(o.host);
    LOWBIT_CHECK(port > 0, "--host ", o.host, ": cannot listen on any port");
  } else {
    LOWBIT_CHECK(impl_->http.bind_to_port(o.host, port), "--host ", o.host, " --port ", port,
                 ": cannot listen there (in use, or not an address of this machine)");
  }
  // cpp-httplib listens with a backlog of 5, fixed in Debian's compiled library: a burst
  // of clients (64 connecting at once) overflows it, and the dropped SYNs cost those
  // clients a second or more, some their request. Listening again only resizes the queue.
  LOWBIT_CHECK(::listen(impl_->listen_socket, SOMAXCONN) == 0, "--host ", o.host, " --port ", port,
               ": cannot enlarge the listen backlog (", std::strerror(errno), ")");
  return port;
}

void HttpServer::run() {
  impl_->engine_thread = std::thread([this] { impl_->engine_loop(); });
  impl_->http.listen_after_bind();
  impl_->engine_stop = true;
  impl_->scheduler->wake();
  impl_->engine_thread.join();
}

void HttpServer::shutdown() {
  Impl& s = *impl_;
  {
    std::lock_guard<std::mutex> lock(s.shutdown_mutex);
    if (s.shut_down) return;
    s.shut_down = true;
  }
  s.stopping = true;
  s.scheduler->close();
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(s.options.shutdown_timeout_seconds);
  while (!s.scheduler->idle() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(50ms);
  if (!s.scheduler->idle()) {
    std::cerr << "[serve] cancelling the requests still in flight\n";
    s.scheduler->cancel_all();
    while (!s.scheduler->idle()) std::this_thread::sleep_for(20ms);
  }
  // Streams write their last events, then the listener stops.
  const auto drain = std::chrono::steady_clock::now() + 2s;
  while (s.active_streams.load() > 0 && std::chrono::steady_clock::now() < drain) std::this_thread::sleep_for(20ms);
  s.http.stop();
}

}  // namespace lowbit::serve

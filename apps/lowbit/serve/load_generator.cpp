#include "serve/load_generator.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "lowbit/error.h"
#include "serve/metrics.h"

namespace lowbit::serve {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

double ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

struct Sample {
  bool ok = false;
  std::string error;
  std::int64_t tokens = 0;
  double ttft_ms = 0;
  std::vector<double> gaps_ms;  // between consecutive chunks that carried text
};

std::string first_model(const LoadOptions& o) {
  httplib::Client client(o.host, o.port);
  client.set_connection_timeout(10, 0);
  const httplib::Result res = client.Get("/v1/models");
  LOWBIT_CHECK(res, "bench serve: cannot reach http://", o.host, ":", o.port, " (", httplib::to_string(res.error()),
               "); start lowbit serve first");
  LOWBIT_CHECK(res->status == 200, "bench serve: GET /v1/models answered ", res->status);
  const json models = json::parse(res->body, nullptr, false);
  LOWBIT_CHECK(models.is_object() && models.contains("data") && models["data"].is_array() && !models["data"].empty() &&
                   models["data"][0].contains("id"),
               "bench serve: GET /v1/models lists no model");
  return models["data"][0]["id"].get<std::string>();
}

// One streaming request: times the chunks as they arrive.
Sample one_request(httplib::Client& client, const std::string& body) {
  Sample s;
  std::string buffer;
  const Clock::time_point sent = Clock::now();
  Clock::time_point last{};
  bool done = false;
  auto on_event = [&](const std::string& data) {
    if (data == "[DONE]") {
      done = true;
      return;
    }
    const json event = json::parse(data, nullptr, false);
    if (event.is_discarded()) return;
    if (event.contains("error")) {
      s.error = event["error"].value("message", "an error event");
      return;
    }
    if (event.contains("usage") && event["usage"].is_object()) {
      s.tokens = event["usage"].value("completion_tokens", std::int64_t{0});
    }
    if (!event.contains("choices") || event["choices"].empty()) return;
    const json& choice = event["choices"][0];
    if (choice.value("text", std::string()).empty()) return;
    const Clock::time_point now = Clock::now();
    if (last == Clock::time_point{}) {
      s.ttft_ms = ms(now - sent);
    } else {
      s.gaps_ms.push_back(ms(now - last));
    }
    last = now;
  };
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.set_header("Content-Type", "application/json");
  req.body = body;
  req.content_receiver = [&](const char* data, std::size_t length, std::uint64_t, std::uint64_t) {
    buffer.append(data, length);
    for (std::size_t end; (end = buffer.find("\n\n")) != std::string::npos;) {
      const std::string line = buffer.substr(0, end);
      buffer.erase(0, end + 2);
      if (line.rfind("data: ", 0) == 0) on_event(line.substr(6));
    }
    return true;
  };
  const httplib::Result res = client.send(req);
  if (!res) {
    s.error = "no answer: " + httplib::to_string(res.error());
  } else if (res->status != 200) {
    const json e = json::parse(res->body, nullptr, false);
    s.error = "HTTP " + std::to_string(res->status) +
              (e.is_object() && e.contains("error") ? ": " + e["error"].value("message", std::string()) : "");
  } else if (!done && s.error.empty()) {
    s.error = "the stream ended without [DONE]";
  }
  s.ok = s.error.empty();
  return s;
}

std::string request_body(const LoadOptions& o, const std::string& model, std::int64_t index) {
  std::mt19937 rng(static_cast<std::uint32_t>(7919 * index + 1));
  std::uniform_int_distribution<std::int32_t> token(1000, 20000);  // ordinary words of a large vocabulary
  json prompt = json::array();
  for (std::int64_t i = 0; i < o.prompt_tokens; ++i) prompt.push_back(token(rng));
  return json{{"model", model},
              {"prompt", prompt},
              {"max_tokens", o.max_tokens},
              {"temperature", 0},
              {"ignore_eos", true},
              {"stream", true},
              {"stream_options", {{"include_usage", true}}}}
      .dump();
}

// The server's step totals now (not present: the server has no lowbit /metrics).
StepTotals step_totals(const LoadOptions& o) {
  httplib::Client client(o.host, o.port);
  client.set_connection_timeout(10, 0);
  const httplib::Result res = client.Get("/metrics");
  return res && res->status == 200 ? parse_step_totals(res->body) : StepTotals{};
}

LoadResult run_level(const LoadOptions& o, const std::string& model, std::int64_t concurrency) {
  const std::int64_t total = o.requests > 0 ? o.requests : 4 * concurrency;
  const StepTotals before = step_totals(o);
  std::atomic<std::int64_t> next{0};
  std::mutex mutex;
  std::vector<Sample> samples;
  const Clock::time_point start = Clock::now();
  std::vector<std::thread> clients;
  for (std::int64_t c = 0; c < concurrency; ++c) {
    clients.emplace_back([&] {
      httplib::Client client(o.host, o.port);
      client.set_connection_timeout(10, 0);
      client.set_read_timeout(static_cast<time_t>(o.timeout_seconds), 0);
      for (std::int64_t i; (i = next.fetch_add(1)) < total;) {
        Sample s = one_request(client, request_body(o, model, i));
        std::lock_guard<std::mutex> lock(mutex);
        samples.push_back(std::move(s));
      }
    });
  }
  for (std::thread& t : clients) t.join();
  LoadResult r;
  r.concurrency = concurrency;
  r.requests = total;
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<double> ttft, gaps;
  for (const Sample& s : samples) {
    if (!s.ok) {
      if (r.failed++ == 0) r.first_error = s.error;
      continue;
    }
    r.generated_tokens += s.tokens;
    ttft.push_back(s.ttft_ms);
    gaps.insert(gaps.end(), s.gaps_ms.begin(), s.gaps_ms.end());
  }
  r.ttft_p50_ms = percentile(ttft, 0.5);
  r.ttft_p99_ms = percentile(ttft, 0.99);
  r.itl_p50_ms = percentile(gaps, 0.5);
  r.itl_p99_ms = percentile(gaps, 0.99);
  const StepTotals after = step_totals(o);
  if (before.present && after.present) {
    r.has_steps = true;
    r.decode_steps = after.decode_steps - before.decode_steps;
    r.prompt_steps = after.prompt_steps - before.prompt_steps;
    const auto mean_ms = [](double seconds, double steps) { return steps > 0 ? 1e3 * seconds / steps : 0.0; };
    r.decode_step_ms = mean_ms(after.decode_seconds - before.decode_seconds, r.decode_steps);
    r.prompt_step_ms = mean_ms(after.prompt_seconds - before.prompt_seconds, r.prompt_steps);
  }
  return r;
}

}  // namespace

double percentile(std::vector<double> samples, double q) {
  if (samples.empty()) return 0.0;
  std::sort(samples.begin(), samples.end());
  const auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(samples.size())));
  return samples[std::clamp<std::size_t>(rank, 1, samples.size()) - 1];
}

std::vector<LoadResult> run_load(const LoadOptions& o) {
  const std::string model = o.model.empty() ? first_model(o) : o.model;
  std::vector<LoadResult> out;
  for (const std::int64_t c : o.concurrency) out.push_back(run_level(o, model, c));
  return out;
}

}  // namespace lowbit::serve

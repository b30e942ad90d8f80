#include "engine/generate.h"

#include <chrono>

#include "lowbit/error.h"

namespace lowbit::engine {
namespace {

double seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

std::int32_t argmax(std::span<const float> logits) {
  LOWBIT_CHECK(!logits.empty(), "argmax: empty logits");
  std::size_t best = 0;
  for (std::size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return static_cast<std::int32_t>(best);
}

std::int32_t Session::decode_greedy(std::int32_t token) {
  return argmax(forward(std::span<const std::int32_t>(&token, 1), /*all_logits=*/false));
}

std::int64_t Session::decode_greedy_run(std::int32_t token, std::int64_t steps,
                                        const std::function<bool(std::int32_t)>& keep) {
  for (std::int64_t i = 0; i < steps; ++i) {
    token = decode_greedy(token);
    if (!keep(token)) return i + 1;
  }
  return steps;
}

GenerationResult generate_greedy(Session& session, std::span<const std::int32_t> prompt, std::int64_t max_new,
                                 const std::function<bool(std::int32_t)>& is_stop,
                                 const std::function<void(std::int32_t)>& on_token) {
  LOWBIT_CHECK(!prompt.empty(), "prompt: expected at least one token");
  LOWBIT_CHECK(max_new >= 0, "max_new: expected >= 0, got ", max_new);
  LOWBIT_CHECK(session.position() == 0, "session: expected an empty session, it holds ", session.position(),
               " tokens");
  LOWBIT_CHECK(static_cast<std::int64_t>(prompt.size()) + max_new <= session.max_tokens(), "prompt (",
               prompt.size(), " tokens) + max_new (", max_new, ") exceeds the session's ", session.max_tokens(),
               " tokens");
  GenerationResult result;
  auto start = std::chrono::steady_clock::now();
  std::int32_t next = argmax(session.forward(prompt, /*all_logits=*/false));
  result.prefill_seconds = seconds(start);
  result.kv_bytes.push_back(session.kv_bytes());
  start = std::chrono::steady_clock::now();
  const double device_before = session.decode_device_seconds();
  // Each token is checked for a stop, kept and streamed; the last one needs no step.
  auto keep = [&](std::int32_t token) {
    if (is_stop && is_stop(token)) {
      result.stopped = true;
      return false;
    }
    result.tokens.push_back(token);
    if (on_token) on_token(token);
    return true;
  };
  if (max_new > 0 && keep(next)) {
    session.decode_greedy_run(next, max_new - 1, [&](std::int32_t token) {
      ++result.decode_steps;
      result.kv_bytes.push_back(session.kv_bytes());
      return keep(token);
    });
  }
  result.decode_seconds = seconds(start);
  result.decode_device_seconds = session.decode_device_seconds() - device_before;
  return result;
}

}  // namespace lowbit::engine

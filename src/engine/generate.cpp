#include "engine/generate.h"

#include <chrono>

#include "lowbit/error.h"

namespace lowbit::engine {
namespace {

double seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void check_generation(const Session& session, std::span<const std::int32_t> prompt, std::int64_t max_new) {
  LOWBIT_CHECK(!prompt.empty(), "prompt: expected at least one token");
  LOWBIT_CHECK(max_new >= 0, "max_new: expected >= 0, got ", max_new);
  LOWBIT_CHECK(session.position() == 0, "session: expected an empty session, it holds ", session.position(),
               " tokens");
  LOWBIT_CHECK(static_cast<std::int64_t>(prompt.size()) + max_new <= session.max_tokens(), "prompt (",
               prompt.size(), " tokens) + max_new (", max_new, ") exceeds the session's ", session.max_tokens(),
               " tokens");
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
  check_generation(session, prompt, max_new);
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

GenerationResult generate(Session& session, std::span<const std::int32_t> prompt, std::int64_t max_new,
                          const SamplingParams& sampling, const std::function<bool(std::int32_t)>& is_stop,
                          const std::function<void(std::int32_t)>& on_token) {
  if (sampling.greedy() && !sampling.penalized()) return generate_greedy(session, prompt, max_new, is_stop, on_token);
  check_generation(session, prompt, max_new);
  GenerationResult result;
  PenaltyWindow window(sampling.penalty_last_n);
  auto draw = [&](const std::vector<float>& logits) {
    const std::vector<TokenCount> counts = window.counts();
    return sample_token(logits, sampling.row(result.tokens.size()), counts);
  };
  auto start = std::chrono::steady_clock::now();
  const std::vector<float> first = session.forward(prompt, /*all_logits=*/false);
  std::int32_t next = max_new > 0 ? draw(first) : -1;
  result.prefill_seconds = seconds(start);
  result.kv_bytes.push_back(session.kv_bytes());
  start = std::chrono::steady_clock::now();
  for (std::int64_t i = 0; i < max_new; ++i) {
    if (is_stop && is_stop(next)) {
      result.stopped = true;
      break;
    }
    result.tokens.push_back(next);
    window.accept(next);
    if (on_token) on_token(next);
    if (i + 1 == max_new) break;
    next = draw(session.forward(std::span<const std::int32_t>(&next, 1), /*all_logits=*/false));
    ++result.decode_steps;
    result.kv_bytes.push_back(session.kv_bytes());
  }
  result.decode_seconds = seconds(start);
  return result;
}

}  // namespace lowbit::engine

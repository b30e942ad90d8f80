// Continuous batching over a BatchEngine: requests join and leave between steps; each
// step runs the decode rows of every running sequence and, in the token budget left,
// prompt chunks of the sequences still prefilling (oldest first) and of newly admitted
// requests (first come, first served). Prompts are cut into chunks at fixed multiples
// of prefill_chunk from their start, so a request's forward passes do not depend on
// what else runs. When a step's caches would not fit the KV budget, the most recently
// admitted sequence is preempted: its cache is freed and it goes back to the front of
// the queue with its prompt and the tokens generated so far, recomputed on readmission
// (sampling continues from the same draw; a greedy request whose prefill equals its
// decode steps, as on the CPU reference, produces the same tokens). A request is
// refused at submission if it could not fit the budget alone, so every admitted one
// can finish.
//
// Threads: submit, cancel, close and stats may be called from any thread; step (and
// wait_for_work) from one engine thread. Sinks are called on the engine thread,
// outside the scheduler's lock, and must not block.
#pragma once

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "engine/batch_engine.h"
#include "engine/sampling.h"

namespace lowbit::engine {

using RequestId = std::int64_t;

struct GenerationRequest {
  std::vector<std::int32_t> prompt;
  std::int64_t max_new_tokens = 16;
  SamplingParams sampling;
  std::vector<std::int32_t> stop_tokens;  // end generation without emitting them
  bool stop_at_end_of_generation = true;  // the model's end-of-generation tokens too
  int logprobs = -1;                      // -1: none; n >= 0 (at most 20): chosen + n most likely
};

enum class FinishReason { length, stop, cancelled, error };
const char* finish_reason_name(FinishReason reason);  // "length", "stop", "cancelled", "error"

struct RequestSummary {
  FinishReason reason = FinishReason::length;
  std::int64_t prompt_tokens = 0, generated_tokens = 0;
  std::int64_t preemptions = 0;
  std::string error;  // for FinishReason::error
};

// A request's events, on the engine thread. on_token returns false to end the request
// there (FinishReason::stop), e.g. at a stop string. Exactly one on_finish per request.
class RequestSink {
 public:
  virtual ~RequestSink() = default;
  virtual bool on_token(std::int32_t token, const Logprobs* logprobs) = 0;
  virtual void on_finish(const RequestSummary& summary) = 0;
};

struct SchedulerOptions {
  std::int64_t max_running = 4;     // sequences in the engine at once
  std::int64_t max_queued = 64;     // requests waiting for a slot beyond which submit refuses
  std::int64_t step_tokens = 512;   // tokens a step appends at most (decode rows count 1)
  std::int64_t prefill_chunk = 256; // prompt tokens a row appends at most
  std::function<bool(std::int32_t)> end_of_generation;  // may be empty: none
  // Throws lowbit::Error naming the option: values < 1, or max_running + prefill_chunk
  // over step_tokens (a prompt chunk must fit beside a full decode batch).
  void validate() const;
};

// Engine step times as a cumulative histogram over fixed bounds (Prometheus' form): what
// the running requests' inter-token latency is made of.
struct StepTimes {
  static constexpr std::array<double, 12> kBoundsSeconds{0.001, 0.002, 0.005, 0.01, 0.02, 0.05,
                                                         0.1,   0.2,   0.5,   1.0,  2.0,  5.0};
  std::array<std::int64_t, kBoundsSeconds.size()> at_most{};  // steps of <= kBoundsSeconds[i]
  std::int64_t count = 0;
  double sum_seconds = 0.0;
  void add(double seconds);
};

struct SchedulerStats {
  std::int64_t running = 0, queued = 0;  // queued: submitted, not running (preempted included)
  std::size_t live_sequences = 0;        // the engine's
  KvMemory kv;
  std::int64_t steps = 0, preemptions = 0, finished = 0, cancelled = 0, failed = 0;
  std::int64_t prompt_tokens = 0, generated_tokens = 0;  // of the steps run so far
  // Steps whose engine call returned, apart: decode rows only, and with prompt tokens (a
  // chunked prefill beside the decode rows makes the step, and every running request's
  // token, wait). A step that threw is counted in `steps` only.
  StepTimes decode_steps, prompt_steps;
};

class Scheduler {
 public:
  // The engine is borrowed and must outlive the scheduler; it must hold no sequences.
  Scheduler(BatchEngine& engine, SchedulerOptions options);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a request. Throws lowbit::Error naming the field for a request that can never
  // run: an empty prompt, a token outside the vocabulary, max_new_tokens < 1, prompt +
  // max_new_tokens over the engine's sequence limit or over the KV budget alone, bad
  // sampling or logprobs. Returns nothing (and keeps no sink) when the queue is full or
  // the scheduler is closed.
  std::optional<RequestId> submit(GenerationRequest request, std::shared_ptr<RequestSink> sink);
  // Ends the request at the next step (FinishReason::cancelled) and frees its cache;
  // unknown or finished ids are ignored.
  void cancel(RequestId id);
  void cancel_all();
  // Refuses submissions from now on (requests in flight go on).
  void close();
  bool closed() const;

  // One scheduling step: cancellations, admissions, preemptions, one engine step, then
  // the sinks. Returns false when there was nothing to do.
  bool step();
  // Blocks until there is work (a submission or a cancellation) or the timeout passes.
  void wait_for_work(std::chrono::milliseconds timeout);
  // Wakes a wait_for_work (e.g. to shut down).
  void wake();

  SchedulerStats stats() const;  // as of the end of the last step
  bool idle() const;             // nothing running, queued or submitted

 private:
  struct Active;
  void absorb_submissions();
  void apply_cancellations();
  void plan(std::vector<Active*>& rows);
  void preempt(Active& victim);
  void finish(Active& a, FinishReason reason, const std::string& error = {});
  void retire_finished();
  void publish_stats();

  BatchEngine* engine_;
  SchedulerOptions options_;
  std::size_t kv_budget_;  // read once: submit (any thread) must not query the engine's state

  mutable std::mutex mutex_;  // guards the members up to stats_
  std::condition_variable work_;
  std::deque<std::unique_ptr<Active>> submitted_;
  std::set<RequestId> cancels_;
  bool cancel_all_ = false, closed_ = false, wake_ = false;
  RequestId next_id_ = 1;
  std::int64_t queued_ = 0;  // waiting_ at the end of the last step
  SchedulerStats stats_;

  // Engine thread only.
  std::deque<std::unique_ptr<Active>> waiting_;
  std::vector<std::unique_ptr<Active>> running_;  // in admission order
  std::vector<std::unique_ptr<Active>> leaving_;  // finished, sinks not yet told
  SchedulerStats totals_;
};

}  // namespace lowbit::engine

#include "engine/scheduler.h"

#include <algorithm>
#include <exception>

#include "lowbit/error.h"

namespace lowbit::engine {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::length: return "length";
    case FinishReason::stop: return "stop";
    case FinishReason::cancelled: return "cancelled";
    case FinishReason::error: return "error";
  }
  return "?";
}

void SchedulerOptions::validate() const {
  LOWBIT_CHECK(max_running >= 1, "max_running: expected >= 1, got ", max_running);
  LOWBIT_CHECK(max_queued >= 1, "max_queued: expected >= 1, got ", max_queued);
  LOWBIT_CHECK(step_tokens >= 1, "step_tokens: expected >= 1, got ", step_tokens);
  LOWBIT_CHECK(prefill_chunk >= 1, "prefill_chunk: expected >= 1, got ", prefill_chunk);
  LOWBIT_CHECK(max_running + prefill_chunk <= step_tokens, "step_tokens (", step_tokens,
               "): expected at least max_running (", max_running, ") + prefill_chunk (", prefill_chunk, ")");
}

// A request in the scheduler: its context (prompt, then each generated token) and how
// much of it the engine's cache holds.
struct Scheduler::Active {
  RequestId id = 0;
  GenerationRequest request;
  std::shared_ptr<RequestSink> sink;
  std::vector<std::int32_t> context;
  std::int64_t cached = 0;     // tokens of context in the engine's cache
  std::int64_t generated = 0;  // tokens of context after the prompt
  PenaltyWindow window;
  bool in_engine = false;
  std::int64_t preemptions = 0;
  // This step's row: tokens appended, whether it samples, the penalty counts it reads.
  std::int64_t row_tokens = 0;
  bool row_samples = false, row_decode = false;
  std::vector<TokenCount> counts;
  // Set when the request ends this step.
  std::optional<FinishReason> finish;
  std::string error;

  std::int64_t capacity() const {
    return static_cast<std::int64_t>(request.prompt.size()) + request.max_new_tokens;
  }
  bool decoding() const {
    return in_engine && generated > 0 && cached == static_cast<std::int64_t>(context.size()) - 1;
  }
  // The next chunk: up to the next multiple of prefill_chunk, or the one pending token.
  std::int64_t next_chunk(std::int64_t prefill_chunk) const {
    const auto size = static_cast<std::int64_t>(context.size());
    return std::min(size, (cached / prefill_chunk + 1) * prefill_chunk) - cached;
  }
};

Scheduler::Scheduler(BatchEngine& engine, SchedulerOptions options)
    : engine_(&engine), options_(std::move(options)), kv_budget_(engine.kv_memory().budget) {
  options_.validate();
  LOWBIT_CHECK(engine.live_sequences() == 0, "scheduler: the engine already holds ", engine.live_sequences(),
               " sequences");
  publish_stats();
}

Scheduler::~Scheduler() {
  // Every request still known ends here, cancelled, and the engine gets its memory back.
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& a : submitted_) waiting_.push_back(std::move(a));
    submitted_.clear();
  }
  for (auto& a : running_) finish(*a, FinishReason::cancelled);
  for (auto& a : waiting_) finish(*a, FinishReason::cancelled);
  retire_finished();
}

std::optional<RequestId> Scheduler::submit(GenerationRequest request, std::shared_ptr<RequestSink> sink) {
  LOWBIT_CHECK(sink != nullptr, "submit: no sink");
  LOWBIT_CHECK(!request.prompt.empty(), "prompt: expected at least one token");
  const std::int64_t vocab = engine_->vocab();
  for (std::size_t i = 0; i < request.prompt.size(); ++i) {
    LOWBIT_CHECK(request.prompt[i] >= 0 && request.prompt[i] < vocab, "prompt[", i, "]: token id ", request.prompt[i],
                 " outside the vocabulary (0..", vocab - 1, ")");
  }
  LOWBIT_CHECK(request.max_new_tokens >= 1, "max_tokens: expected >= 1, got ", request.max_new_tokens);
  const auto prompt = static_cast<std::int64_t>(request.prompt.size());
  LOWBIT_CHECK(request.max_new_tokens <= engine_->max_sequence_tokens() - prompt, "prompt (", prompt,
               " tokens) + max_tokens (", request.max_new_tokens, ") exceeds the context of ",
               engine_->max_sequence_tokens(), " tokens");
  const std::size_t alone = engine_->kv_bytes_for(prompt + request.max_new_tokens);
  LOWBIT_CHECK(alone <= kv_budget_, "prompt (", prompt, " tokens) + max_tokens (", request.max_new_tokens, ") need ",
               alone, " bytes of KV cache, more than the server's whole budget of ", kv_budget_, " bytes");
  request.sampling.validate();
  LOWBIT_CHECK(request.logprobs >= -1 && request.logprobs <= kMaxLogprobs, "logprobs: expected 0..", kMaxLogprobs,
               ", got ", request.logprobs);

  auto a = std::make_unique<Active>();
  a->context = request.prompt;
  a->window = PenaltyWindow(request.sampling.penalty_last_n);
  a->request = std::move(request);
  a->sink = std::move(sink);
  std::lock_guard<std::mutex> lock(mutex_);
  // Waiting requests beyond the free slots (as of the last step) form the queue.
  const std::int64_t free_slots = std::max<std::int64_t>(0, options_.max_running - stats_.running);
  const auto pending = static_cast<std::int64_t>(submitted_.size()) + queued_;
  if (closed_ || pending >= options_.max_queued + free_slots) return std::nullopt;
  a->id = next_id_++;
  const RequestId id = a->id;
  submitted_.push_back(std::move(a));
  work_.notify_all();
  return id;
}

void Scheduler::cancel(RequestId id) {
  std::lock_guard<std::mutex> lock(mutex_);
  cancels_.insert(id);
  work_.notify_all();
}

void Scheduler::cancel_all() {
  std::lock_guard<std::mutex> lock(mutex_);
  cancel_all_ = true;
  work_.notify_all();
}

void Scheduler::close() {
  std::lock_guard<std::mutex> lock(mutex_);
  closed_ = true;
}

bool Scheduler::closed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return closed_;
}

void Scheduler::wake() {
  std::lock_guard<std::mutex> lock(mutex_);
  wake_ = true;
  work_.notify_all();
}

void Scheduler::wait_for_work(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  work_.wait_for(lock, timeout,
                 [&] { return !submitted_.empty() || !cancels_.empty() || cancel_all_ || wake_; });
  wake_ = false;
}

void StepTimes::add(double seconds) {
  for (std::size_t i = 0; i < kBoundsSeconds.size(); ++i) {
    if (seconds <= kBoundsSeconds[i]) ++at_most[i];
  }
  ++count;
  sum_seconds += seconds;
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

bool Scheduler::idle() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return submitted_.empty() && stats_.running == 0 && stats_.queued == 0;
}

void Scheduler::absorb_submissions() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& a : submitted_) waiting_.push_back(std::move(a));
  submitted_.clear();
}

void Scheduler::apply_cancellations() {
  std::set<RequestId> ids;
  bool all = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ids.swap(cancels_);
    all = cancel_all_;
    cancel_all_ = false;
  }
  if (ids.empty() && !all) return;
  for (auto& a : running_) {
    if (all || ids.contains(a->id)) finish(*a, FinishReason::cancelled);
  }
  for (auto& a : waiting_) {
    if (all || ids.contains(a->id)) finish(*a, FinishReason::cancelled);
  }
  retire_finished();  // their memory is free for this step's plan
}

void Scheduler::finish(Active& a, FinishReason reason, const std::string& error) {
  if (a.finish) return;
  a.finish = reason;
  a.error = error;
}

void Scheduler::preempt(Active& victim) {
  engine_->free_sequence(victim.id);
  victim.in_engine = false;
  victim.cached = 0;
  victim.row_tokens = 0;
  victim.row_samples = false;
  ++victim.preemptions;
  ++totals_.preemptions;
  const auto it = std::find_if(running_.begin(), running_.end(), [&](const auto& p) { return p.get() == &victim; });
  waiting_.push_front(std::move(*it));
  running_.erase(it);
}

// Chooses this step's rows: decode rows first (oldest first), then prompt chunks of the
// running sequences still prefilling, then admissions from the queue, within the token
// budget; memory for a running sequence comes from preempting the newest ones.
void Scheduler::plan(std::vector<Active*>& rows) {
  std::int64_t tokens_left = options_.step_tokens;
  const KvMemory memory = engine_->kv_memory();
  std::size_t planned = memory.used;
  auto growth = [&](const Active& a, std::int64_t n) {
    return engine_->kv_bytes_for(a.cached + n) - engine_->kv_bytes_for(a.cached);
  };
  auto add_row = [&](Active& a, std::int64_t n) {
    a.row_decode = a.decoding();
    a.row_tokens = n;
    a.row_samples = a.cached + n == static_cast<std::int64_t>(a.context.size());
    tokens_left -= n;
    planned += growth(a, n);
    rows.push_back(&a);
  };
  // Preempts from the newest until `need` more bytes fit; false when `a` itself went.
  auto make_room = [&](Active& a, std::size_t need) {
    while (planned + need > memory.budget) {
      Active& victim = *running_.back();
      if (victim.row_tokens > 0) {
        planned -= growth(victim, victim.row_tokens);
        tokens_left += victim.row_tokens;
        rows.erase(std::find(rows.begin(), rows.end(), &victim));
      }
      planned -= engine_->kv_bytes_for(victim.cached);
      const bool self = &victim == &a;
      preempt(victim);
      if (self) return false;
    }
    return true;
  };

  for (std::size_t i = 0; i < running_.size(); ++i) {
    Active& a = *running_[i];
    if (!a.decoding()) continue;
    if (make_room(a, growth(a, 1))) add_row(a, 1);
  }
  bool blocked = false;
  for (std::size_t i = 0; i < running_.size() && !blocked; ++i) {
    Active& a = *running_[i];
    if (a.decoding()) continue;
    const std::int64_t n = a.next_chunk(options_.prefill_chunk);
    if (n > tokens_left) {
      blocked = true;
    } else if (make_room(a, growth(a, n))) {
      add_row(a, n);
    } else {
      blocked = true;  // `a` was preempted: it waits at the front of the queue
    }
  }
  while (!blocked && !waiting_.empty() && static_cast<std::int64_t>(running_.size()) < options_.max_running) {
    Active& a = *waiting_.front();
    const std::int64_t n = a.next_chunk(options_.prefill_chunk);
    if (n > tokens_left || planned + engine_->kv_bytes_for(n) > memory.budget) break;
    try {
      engine_->add_sequence(a.id, a.capacity());
    } catch (const std::exception& e) {
      finish(a, FinishReason::error, e.what());
      break;
    }
    a.in_engine = true;
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    add_row(a, n);
  }
}

bool Scheduler::step() {
  absorb_submissions();
  apply_cancellations();
  std::vector<Active*> rows;
  plan(rows);

  if (!rows.empty()) {
    std::vector<StepRow> step_rows(rows.size());
    for (std::size_t i = 0; i < rows.size(); ++i) {
      Active& a = *rows[i];
      StepRow& row = step_rows[i];
      row.seq = a.id;
      row.tokens = std::span<const std::int32_t>(a.context.data() + a.cached, static_cast<std::size_t>(a.row_tokens));
      row.sample = a.row_samples;
      if (a.row_samples) {
        a.counts = a.window.counts();
        row.sampling.params = a.request.sampling.row(static_cast<std::uint64_t>(a.generated));
        row.sampling.penalties = a.counts;
        row.sampling.logprobs = a.request.logprobs;
      }
    }
    std::vector<StepOutput> out(rows.size());
    bool ok = true;
    const auto started = std::chrono::steady_clock::now();
    try {
      engine_->step(step_rows, out);
    } catch (const std::exception& e) {
      ok = false;
      for (Active* a : rows) finish(*a, FinishReason::error, std::string("engine step failed: ") + e.what());
    }
    if (ok) {
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      const bool prompt = std::any_of(rows.begin(), rows.end(), [](const Active* a) { return !a->row_decode; });
      (prompt ? totals_.prompt_steps : totals_.decode_steps).add(seconds);
    }
    ++totals_.steps;
    // The engine's state as of this step (the sequences it holds) before any sink hears
    // of a token: a client that reads the stats once its first token arrives sees its
    // sequence live (they were published at the end of the step before, without it).
    publish_stats();
    for (std::size_t i = 0; ok && i < rows.size(); ++i) {
      Active& a = *rows[i];
      a.cached += a.row_tokens;
      if (!a.row_decode) totals_.prompt_tokens += a.row_tokens;
      if (!a.row_samples || a.finish) continue;
      const std::int32_t token = out[i].token;
      const bool stop_token =
          std::find(a.request.stop_tokens.begin(), a.request.stop_tokens.end(), token) !=
              a.request.stop_tokens.end() ||
          (a.request.stop_at_end_of_generation && options_.end_of_generation && options_.end_of_generation(token));
      if (stop_token) {
        finish(a, FinishReason::stop);
        continue;
      }
      a.context.push_back(token);
      ++a.generated;
      ++totals_.generated_tokens;
      a.window.accept(token);
      bool keep = true;
      try {
        keep = a.sink->on_token(token, a.request.logprobs >= 0 ? &out[i].logprobs : nullptr);
      } catch (const std::exception& e) {
        finish(a, FinishReason::error, std::string("request sink failed: ") + e.what());
        continue;
      }
      if (!keep) {
        finish(a, FinishReason::stop);
      } else if (a.generated == a.request.max_new_tokens) {
        finish(a, FinishReason::length);
      }
    }
    for (Active* a : rows) {
      a->row_tokens = 0;
      a->row_samples = false;
    }
  }

  const bool any_finished = std::any_of(running_.begin(), running_.end(), [](const auto& p) { return p->finish; }) ||
                            std::any_of(waiting_.begin(), waiting_.end(), [](const auto& p) { return p->finish; });
  retire_finished();
  return !rows.empty() || any_finished;
}

// Finished requests leave the running set and the queue: caches freed, statistics
// published, then their sinks told (after the stats, so that a client that reads
// the stats when its request ends sees the memory returned).
void Scheduler::retire_finished() {
  auto move_finished = [&](auto& from) {
    for (auto it = from.begin(); it != from.end();) {
      if ((*it)->finish) {
        leaving_.push_back(std::move(*it));
        it = from.erase(it);
      } else {
        ++it;
      }
    }
  };
  move_finished(running_);
  move_finished(waiting_);
  for (auto& a : leaving_) {
    if (a->in_engine) {
      try {
        engine_->free_sequence(a->id);
      } catch (const std::exception&) {
        // The engine no longer knows it (a failed step may have dropped it): nothing to free.
      }
      a->in_engine = false;
    }
    const FinishReason reason = *a->finish;
    ++totals_.finished;
    if (reason == FinishReason::cancelled) ++totals_.cancelled;
    if (reason == FinishReason::error) ++totals_.failed;
  }
  publish_stats();
  std::vector<std::unique_ptr<Active>> leaving;
  leaving.swap(leaving_);
  for (auto& a : leaving) {
    try {
      a->sink->on_finish({*a->finish, static_cast<std::int64_t>(a->request.prompt.size()), a->generated,
                          a->preemptions, a->error});
    } catch (const std::exception&) {
      // A sink that fails at the end has nothing left to tell.
    }
  }
}

void Scheduler::publish_stats() {
  SchedulerStats s = totals_;
  s.running = static_cast<std::int64_t>(running_.size());
  s.queued = static_cast<std::int64_t>(waiting_.size());
  s.live_sequences = engine_->live_sequences();
  s.kv = engine_->kv_memory();
  std::lock_guard<std::mutex> lock(mutex_);
  queued_ = s.queued;
  stats_ = s;
}

}  // namespace lowbit::engine

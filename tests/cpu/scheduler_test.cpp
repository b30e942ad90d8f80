// The continuous-batching scheduler over a fake engine whose next token is a hash of the
// sequence's whole cache (so any cross-talk or lost token changes the output) and whose
// memory is counted in pages: joins and leaves, chunked prefill in the token budget,
// preemption and recompute, first come first served, cancellation, stops, refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "common/expect_error.h"
#include "engine/batch_engine.h"
#include "engine/scheduler.h"
#include "lowbit/error.h"

namespace lowbit::test {
namespace {

using namespace lowbit::engine;

constexpr std::int64_t kVocab = 1000;
constexpr std::int64_t kPage = 4;            // tokens a page
constexpr std::size_t kPageBytes = 100;

class FakeEngine final : public BatchEngine {
 public:
  explicit FakeEngine(std::size_t budget, std::int64_t max_tokens = 4096) : budget_(budget), max_(max_tokens) {}

  // What the fake model produces after `context`: a hash of all of it.
  static std::int32_t next_token(const std::vector<std::int32_t>& context) {
    std::uint64_t h = 1469598103934665603ull;
    for (const std::int32_t t : context) h = (h ^ static_cast<std::uint64_t>(t)) * 1099511628211ull;
    return static_cast<std::int32_t>(h % static_cast<std::uint64_t>(kVocab));
  }

  std::int64_t vocab() const override { return kVocab; }
  std::int64_t max_sequence_tokens() const override { return max_; }
  void add_sequence(SequenceId seq, std::int64_t max_tokens) override {
    LOWBIT_CHECK(!seqs_.contains(seq), "sequence ", seq, ": already live");
    seqs_[seq] = Seq{{}, max_tokens};
    ++adds_;
  }
  void free_sequence(SequenceId seq) override { LOWBIT_CHECK(seqs_.erase(seq) == 1, "sequence ", seq, ": unknown"); }
  std::int64_t sequence_length(SequenceId seq) const override {
    return static_cast<std::int64_t>(seqs_.at(seq).tokens.size());
  }
  std::size_t live_sequences() const override { return seqs_.size(); }
  std::size_t kv_bytes_for(std::int64_t tokens) const override {
    return static_cast<std::size_t>((tokens + kPage - 1) / kPage) * kPageBytes;
  }
  KvMemory kv_memory() const override {
    KvMemory m{0, budget_};
    for (const auto& [id, s] : seqs_) m.used += kv_bytes_for(static_cast<std::int64_t>(s.tokens.size()));
    return m;
  }
  void step(std::span<const StepRow> rows, std::span<StepOutput> out) override {
    std::size_t planned = kv_memory().used;
    StepLog log;
    for (const StepRow& row : rows) {
      const Seq& s = seqs_.at(row.seq);
      const auto n = static_cast<std::int64_t>(row.tokens.size());
      LOWBIT_CHECK(n > 0 && static_cast<std::int64_t>(s.tokens.size()) + n <= s.max_tokens, "bad row");
      planned += kv_bytes_for(static_cast<std::int64_t>(s.tokens.size()) + n) -
                 kv_bytes_for(static_cast<std::int64_t>(s.tokens.size()));
      log.rows.push_back({row.seq, n, row.sample});
    }
    LOWBIT_CHECK(planned <= budget_, "over budget: ", planned, " > ", budget_);
    for (std::size_t i = 0; i < rows.size(); ++i) {
      Seq& s = seqs_.at(rows[i].seq);
      s.tokens.insert(s.tokens.end(), rows[i].tokens.begin(), rows[i].tokens.end());
      out[i] = StepOutput{};
      if (rows[i].sample) {
        out[i].token = next_token(s.tokens);
        draws_[rows[i].seq].push_back(rows[i].sampling.params.draw);
      }
    }
    log.used_after = kv_memory().used;
    steps_.push_back(log);
  }
  std::string describe() const override { return "fake"; }

  struct RowLog {
    SequenceId seq;
    std::int64_t tokens;
    bool sample;
  };
  struct StepLog {
    std::vector<RowLog> rows;
    std::size_t used_after = 0;
  };
  std::vector<StepLog> steps_;
  std::map<SequenceId, std::vector<std::uint64_t>> draws_;
  int adds_ = 0;

 private:
  struct Seq {
    std::vector<std::int32_t> tokens;
    std::int64_t max_tokens;
  };
  std::size_t budget_;
  std::int64_t max_;
  std::map<SequenceId, Seq> seqs_;
};

struct Recorder final : RequestSink {
  std::vector<std::int32_t> tokens;
  std::optional<RequestSummary> summary;
  int finishes = 0;
  std::int64_t stop_after = -1;  // on_token returns false at this many tokens
  int finish_order = -1;
  static inline int finished_so_far = 0;
  bool on_token(std::int32_t token, const Logprobs*) override {
    tokens.push_back(token);
    return stop_after < 0 || static_cast<std::int64_t>(tokens.size()) < stop_after;
  }
  void on_finish(const RequestSummary& s) override {
    summary = s;
    ++finishes;
    finish_order = finished_so_far++;
  }
};

std::vector<std::int32_t> prompt_of(int length, int salt) {
  std::vector<std::int32_t> p;
  for (int i = 0; i < length; ++i) p.push_back((i * 37 + salt * 101 + 7) % static_cast<int>(kVocab));
  return p;
}

// What a request produces alone: the fake model's tokens after its prompt.
std::vector<std::int32_t> alone(const std::vector<std::int32_t>& prompt, std::int64_t n) {
  std::vector<std::int32_t> context = prompt, out;
  for (std::int64_t i = 0; i < n; ++i) {
    out.push_back(FakeEngine::next_token(context));
    context.push_back(out.back());
  }
  return out;
}

GenerationRequest request(std::vector<std::int32_t> prompt, std::int64_t max_new) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.max_new_tokens = max_new;
  return r;
}

void run_until_idle(Scheduler& s, int max_steps = 10000) {
  for (int i = 0; i < max_steps && !s.idle(); ++i) s.step();
  ASSERT_TRUE(s.idle()) << "the scheduler did not finish in " << max_steps << " steps";
}

SchedulerOptions options(std::int64_t running, std::int64_t step_tokens, std::int64_t chunk) {
  SchedulerOptions o;
  o.max_running = running;
  o.step_tokens = step_tokens;
  o.prefill_chunk = chunk;
  return o;
}

TEST(Scheduler, RequestsJoinAndLeaveWithTheirOwnTokens) {
  FakeEngine engine(1 << 20);
  Scheduler s(engine, options(3, 64, 16));
  std::vector<std::shared_ptr<Recorder>> sinks;
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 7; ++i) {
    reqs.push_back(request(prompt_of(5 + 9 * i, i), 3 + 2 * i));
    sinks.push_back(std::make_shared<Recorder>());
    ASSERT_TRUE(s.submit(reqs.back(), sinks.back()).has_value());
    if (i == 3) {
      for (int k = 0; k < 5; ++k) s.step();  // later ones join while others run
    }
  }
  run_until_idle(s);
  for (std::size_t i = 0; i < sinks.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(sinks[i]->tokens, alone(reqs[i].prompt, reqs[i].max_new_tokens));
    ASSERT_TRUE(sinks[i]->summary);
    EXPECT_EQ(sinks[i]->finishes, 1);
    EXPECT_EQ(sinks[i]->summary->reason, FinishReason::length);
    EXPECT_EQ(sinks[i]->summary->generated_tokens, reqs[i].max_new_tokens);
    EXPECT_EQ(sinks[i]->summary->prompt_tokens, static_cast<std::int64_t>(reqs[i].prompt.size()));
  }
  EXPECT_EQ(engine.live_sequences(), 0u);
  EXPECT_EQ(engine.kv_memory().used, 0u);
  EXPECT_EQ(s.stats().finished, 7);
  // Never more than max_running rows; the draw index is the token's index.
  for (const auto& step : engine.steps_) EXPECT_LE(step.rows.size(), 3u);
  for (const auto& [seq, draws] : engine.draws_) {
    for (std::size_t i = 0; i < draws.size(); ++i) EXPECT_EQ(draws[i], i);
  }
}

// A client that reads the statistics when its first token arrives (the server's /health
// after the first streamed event) sees its sequence live: the stats are published
// before the sinks hear of the step's tokens, not only at the end of the step.
TEST(Scheduler, StatsShowTheSequenceWhenItsFirstTokenArrives) {
  struct Watcher final : RequestSink {
    const Scheduler* scheduler = nullptr;
    std::vector<SchedulerStats> seen;  // at each token
    bool on_token(std::int32_t, const Logprobs*) override {
      seen.push_back(scheduler->stats());
      return true;
    }
    void on_finish(const RequestSummary&) override {}
  };
  FakeEngine engine(1 << 20);
  Scheduler s(engine, options(2, 64, 16));
  auto sink = std::make_shared<Watcher>();
  sink->scheduler = &s;
  ASSERT_TRUE(s.submit(request(prompt_of(9, 1), 4), sink).has_value());
  run_until_idle(s);
  ASSERT_EQ(sink->seen.size(), 4u);
  for (std::size_t i = 0; i < sink->seen.size(); ++i) {
    EXPECT_EQ(sink->seen[i].live_sequences, 1u) << "token " << i;
    EXPECT_EQ(sink->seen[i].running, 1) << "token " << i;
  }
  EXPECT_EQ(s.stats().live_sequences, 0u);
}

TEST(Scheduler, PromptsArePrefilledInChunksWithinTheTokenBudget) {
  FakeEngine engine(1 << 20);
  Scheduler s(engine, options(2, 12, 8));
  auto a = std::make_shared<Recorder>(), b = std::make_shared<Recorder>();
  s.submit(request(prompt_of(20, 1), 6), a);
  s.submit(request(prompt_of(11, 2), 4), b);
  run_until_idle(s);
  std::map<SequenceId, std::vector<std::int64_t>> chunks;
  for (const auto& step : engine.steps_) {
    std::int64_t total = 0;
    bool prefill_seen = false;
    for (const auto& row : step.rows) {
      total += row.tokens;
      chunks[row.seq].push_back(row.tokens);
      // Decode rows (1 token, after the prompt) come before prompt chunks.
      const bool decode = row.tokens == 1 && chunks[row.seq].size() > 1;
      if (decode) {
        EXPECT_FALSE(prefill_seen) << "a decode row after a prompt chunk";
      } else {
        prefill_seen = true;
      }
    }
    EXPECT_LE(total, 12);
  }
  // Fixed chunk boundaries: 8, 8, 4 for 20 tokens; 8, 3 for 11; then decode steps.
  EXPECT_EQ(std::vector<std::int64_t>(chunks[1].begin(), chunks[1].begin() + 3), (std::vector<std::int64_t>{8, 8, 4}));
  EXPECT_EQ(std::vector<std::int64_t>(chunks[2].begin(), chunks[2].begin() + 2), (std::vector<std::int64_t>{8, 3}));
  EXPECT_EQ(a->tokens, alone(prompt_of(20, 1), 6));
  EXPECT_EQ(b->tokens, alone(prompt_of(11, 2), 4));
}

// Every step that ran is timed once, as a decode step (decode rows only) or a prompt step
// (with a prompt chunk), the split /metrics shows.
TEST(Scheduler, StepTimesSeparateDecodeStepsFromPromptSteps) {
  FakeEngine engine(1 << 20);
  Scheduler s(engine, options(2, 12, 8));
  s.submit(request(prompt_of(20, 1), 6), std::make_shared<Recorder>());
  s.submit(request(prompt_of(11, 2), 4), std::make_shared<Recorder>());
  run_until_idle(s);
  const std::map<SequenceId, std::int64_t> prompt_length{{1, 20}, {2, 11}};
  std::map<SequenceId, std::int64_t> appended;
  std::int64_t prompt_steps = 0;
  for (const auto& step : engine.steps_) {
    bool prompt = false;
    for (const auto& row : step.rows) {
      prompt = prompt || appended[row.seq] < prompt_length.at(row.seq);
      appended[row.seq] += row.tokens;
    }
    prompt_steps += prompt ? 1 : 0;
  }
  const SchedulerStats stats = s.stats();
  const auto steps = static_cast<std::int64_t>(engine.steps_.size());
  EXPECT_GT(prompt_steps, 0);
  EXPECT_GT(steps - prompt_steps, 0);
  EXPECT_EQ(stats.prompt_steps.count, prompt_steps);
  EXPECT_EQ(stats.decode_steps.count, steps - prompt_steps);
  for (const StepTimes* t : {&stats.prompt_steps, &stats.decode_steps}) {
    EXPECT_GE(t->sum_seconds, 0.0);
    EXPECT_LE(t->at_most.back(), t->count);  // cumulative: never above the count
    EXPECT_TRUE(std::is_sorted(t->at_most.begin(), t->at_most.end()));
  }
}

TEST(Scheduler, StepTimesCountEachStepInEveryBucketItFits) {
  StepTimes t;
  t.add(0.0005);  // <= every bound
  t.add(0.003);   // <= 0.005 and up
  t.add(0.01);    // a bound itself: <= 0.01 and up
  t.add(7.0);     // beyond the last bound: only in the count
  EXPECT_EQ(t.count, 4);
  EXPECT_DOUBLE_EQ(t.sum_seconds, 0.0005 + 0.003 + 0.01 + 7.0);
  EXPECT_EQ(t.at_most[0], 1);  // 1 ms
  EXPECT_EQ(t.at_most[1], 1);  // 2 ms
  EXPECT_EQ(t.at_most[2], 2);  // 5 ms
  EXPECT_EQ(t.at_most[3], 3);  // 10 ms
  EXPECT_EQ(t.at_most.back(), 3);  // 5 s
}

TEST(Scheduler, ChunksDoNotDependOnWhatElseRuns) {
  auto chunks_of_first = [](bool crowded) {
    FakeEngine engine(1 << 20);
    Scheduler s(engine, options(4, 24, 8));
    auto first = std::make_shared<Recorder>();
    s.submit(request(prompt_of(30, 9), 5), first);
    if (crowded) {
      for (int i = 0; i < 3; ++i) s.submit(request(prompt_of(17 + i, i), 9), std::make_shared<Recorder>());
    }
    run_until_idle(s);
    std::vector<std::int64_t> chunks;
    for (const auto& step : engine.steps_) {
      for (const auto& row : step.rows) {
        if (row.seq == 1) chunks.push_back(row.tokens);
      }
    }
    return chunks;
  };
  EXPECT_EQ(chunks_of_first(false), chunks_of_first(true));
}

TEST(Scheduler, PreemptionRecomputesWithoutLosingAnything) {
  // Pages of 4 tokens, 100 bytes: 14 pages in all. Each request alone needs at most
  // ceil((10 + 24) / 4) = 9 pages, three of them cannot grow together.
  FakeEngine engine(14 * kPageBytes);
  Scheduler s(engine, options(3, 40, 16));
  std::vector<std::shared_ptr<Recorder>> sinks;
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 3; ++i) {
    reqs.push_back(request(prompt_of(10, 20 + i), 24));
    sinks.push_back(std::make_shared<Recorder>());
    s.submit(reqs.back(), sinks.back());
  }
  Recorder::finished_so_far = 0;
  run_until_idle(s);
  EXPECT_GT(s.stats().preemptions, 0);
  for (std::size_t i = 0; i < sinks.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(sinks[i]->tokens, alone(reqs[i].prompt, 24));  // nothing lost, nothing repeated
    EXPECT_EQ(sinks[i]->summary->reason, FinishReason::length);
  }
  // The oldest is never the victim, and finishes first.
  EXPECT_EQ(sinks[0]->summary->preemptions, 0);
  EXPECT_EQ(sinks[0]->finish_order, 0);
  EXPECT_GT(sinks[2]->summary->preemptions, 0);
  for (const auto& step : engine.steps_) EXPECT_LE(step.used_after, 14 * kPageBytes);
  EXPECT_EQ(engine.live_sequences(), 0u);
  // Draws continue across the recompute: each sequence's draws are 0, 1, 2, ... once each.
  // (The engine's sequence id is the request id, reused on readmission.)
  for (const auto& [seq, draws] : engine.draws_) {
    for (std::size_t i = 0; i < draws.size(); ++i) EXPECT_EQ(draws[i], i) << "sequence " << seq;
  }
}

TEST(Scheduler, FirstComeFirstServed) {
  FakeEngine engine(1 << 20);
  Scheduler s(engine, options(1, 16, 8));
  std::vector<std::shared_ptr<Recorder>> sinks;
  Recorder::finished_so_far = 0;
  for (int i = 0; i < 5; ++i) {
    sinks.push_back(std::make_shared<Recorder>());
    s.submit(request(prompt_of(3 + (5 - i) * 4, i), 2 + (5 - i)), sinks.back());  // later ones shorter
  }
  run_until_idle(s);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(sinks[static_cast<std::size_t>(i)]->finish_order, i);
  // With one slot, the sequences run one after the other.
  SequenceId last = 0;
  for (const auto& step : engine.steps_) {
    ASSERT_EQ(step.rows.size(), 1u);
    EXPECT_GE(step.rows[0].seq, last);
    last = step.rows[0].seq;
  }
}

TEST(Scheduler, CancelFreesAtTheNextStep) {
  FakeEngine engine(1 << 20);
  Scheduler s(engine, options(2, 32, 8));
  auto running = std::make_shared<Recorder>(), queued = std::make_shared<Recorder>(),
       other = std::make_shared<Recorder>(), later = std::make_shared<Recorder>();
  const RequestId a = *s.submit(request(prompt_of(6, 1), 100), running);
  s.submit(request(prompt_of(6, 2), 10), other);
  const RequestId c = *s.submit(request(prompt_of(6, 3), 10), queued);
  for (int i = 0; i < 4; ++i) s.step();
  EXPECT_EQ(engine.live_sequences(), 2u);
  s.cancel(a);
  s.cancel(c);
  s.cancel(999);  // unknown: ignored
  s.submit(request(prompt_of(4, 4), 3), later);
  s.step();
  ASSERT_TRUE(running->summary);
  EXPECT_EQ(running->summary->reason, FinishReason::cancelled);
  EXPECT_EQ(running->summary->generated_tokens, static_cast<std::int64_t>(running->tokens.size()));
  ASSERT_TRUE(queued->summary);
  EXPECT_EQ(queued->summary->reason, FinishReason::cancelled);
  EXPECT_TRUE(queued->tokens.empty());
  run_until_idle(s);
  EXPECT_EQ(other->tokens, alone(prompt_of(6, 2), 10));
  EXPECT_EQ(later->tokens, alone(prompt_of(4, 4), 3));
  EXPECT_EQ(running->finishes, 1);
  EXPECT_EQ(engine.live_sequences(), 0u);
  EXPECT_EQ(s.stats().cancelled, 2);
  // cancel_all ends everything, running and queued.
  auto x = std::make_shared<Recorder>(), y = std::make_shared<Recorder>();
  s.submit(request(prompt_of(6, 5), 50), x);
  s.step();
  s.submit(request(prompt_of(6, 6), 50), y);
  s.cancel_all();
  s.step();
  EXPECT_EQ(x->summary->reason, FinishReason::cancelled);
  EXPECT_EQ(y->summary->reason, FinishReason::cancelled);
  EXPECT_TRUE(s.idle());
  EXPECT_EQ(engine.live_sequences(), 0u);
}

TEST(Scheduler, StopTokensAndSinksEndRequests) {
  FakeEngine engine(1 << 20);
  SchedulerOptions o = options(2, 32, 8);
  const std::vector<std::int32_t> expected = alone(prompt_of(5, 7), 10);
  o.end_of_generation = [&](std::int32_t t) { return t == expected[6]; };
  Scheduler s(engine, o);
  auto eog = std::make_shared<Recorder>(), stop = std::make_shared<Recorder>(), sink_stop = std::make_shared<Recorder>(),
       ignore = std::make_shared<Recorder>();
  s.submit(request(prompt_of(5, 7), 10), eog);
  GenerationRequest with_stop = request(prompt_of(5, 7), 10);
  with_stop.stop_tokens = {expected[3]};
  s.submit(with_stop, stop);
  sink_stop->stop_after = 2;
  s.submit(request(prompt_of(5, 7), 10), sink_stop);
  GenerationRequest ignoring = request(prompt_of(5, 7), 10);
  ignoring.stop_at_end_of_generation = false;
  s.submit(ignoring, ignore);
  run_until_idle(s);
  const auto first = [&](std::int32_t t) {
    return std::vector<std::int32_t>(expected.begin(), std::find(expected.begin(), expected.end(), t));
  };
  EXPECT_EQ(eog->tokens, first(expected[6]));
  EXPECT_EQ(eog->summary->reason, FinishReason::stop);
  EXPECT_EQ(stop->tokens, first(expected[3]));
  EXPECT_EQ(stop->summary->reason, FinishReason::stop);
  EXPECT_EQ(sink_stop->tokens, std::vector<std::int32_t>(expected.begin(), expected.begin() + 2));
  EXPECT_EQ(sink_stop->summary->reason, FinishReason::stop);
  EXPECT_EQ(ignore->tokens, expected);
  EXPECT_EQ(ignore->summary->reason, FinishReason::length);
  EXPECT_EQ(engine.live_sequences(), 0u);
}

TEST(Scheduler, RefusesWhatCanNeverRunAndWhatDoesNotFitTheQueue) {
  FakeEngine engine(10 * kPageBytes, /*max_tokens=*/100);
  SchedulerOptions o = options(1, 16, 8);
  o.max_queued = 2;
  Scheduler s(engine, o);
  auto sink = std::make_shared<Recorder>();
  EXPECT_LOWBIT_ERROR(s.submit(request({}, 5), sink), "prompt: expected at least one token");
  EXPECT_LOWBIT_ERROR(s.submit(request({1, 2, static_cast<std::int32_t>(kVocab)}, 5), sink),
                      "prompt[2]: token id 1000 outside the vocabulary");
  EXPECT_LOWBIT_ERROR(s.submit(request({1}, 0), sink), "max_tokens: expected >= 1, got 0");
  EXPECT_LOWBIT_ERROR(s.submit(request(prompt_of(60, 1), 41), sink), "exceeds the context of 100 tokens");
  EXPECT_LOWBIT_ERROR(s.submit(request(prompt_of(30, 1), 11), sink), "more than the server's whole budget");
  GenerationRequest bad = request({1}, 5);
  bad.sampling.top_p = 2;
  EXPECT_LOWBIT_ERROR(s.submit(bad, sink), "top_p");
  bad = request({1}, 5);
  bad.logprobs = 21;
  EXPECT_LOWBIT_ERROR(s.submit(bad, sink), "logprobs: expected 0..20");
  // One slot and a queue of two: three are taken, the fourth refused.
  EXPECT_TRUE(s.submit(request({1}, 5), sink));
  EXPECT_TRUE(s.submit(request({2}, 5), std::make_shared<Recorder>()));
  EXPECT_TRUE(s.submit(request({3}, 5), std::make_shared<Recorder>()));
  EXPECT_FALSE(s.submit(request({4}, 5), std::make_shared<Recorder>())) << "one running and two queued";
  s.step();  // one is admitted; two still wait
  EXPECT_FALSE(s.submit(request({4}, 5), std::make_shared<Recorder>()));
  for (int i = 0; i < 100 && s.stats().finished == 0; ++i) s.step();
  EXPECT_TRUE(s.submit(request({4}, 5), std::make_shared<Recorder>())) << "the first one left: room again";
  s.close();
  EXPECT_FALSE(s.submit(request({5}, 5), std::make_shared<Recorder>()));
  run_until_idle(s);
  EXPECT_LOWBIT_ERROR(Scheduler(engine, options(4, 8, 8)), "step_tokens (8): expected at least max_running");
}

TEST(Scheduler, EngineFailureEndsItsRowsAndTheRestGoOn) {
  // An engine whose step throws once: the rows' requests fail, later ones run.
  struct Flaky final : BatchEngine {
    FakeEngine inner{1 << 20};
    int fail_at = 2, steps = 0;
    std::int64_t vocab() const override { return inner.vocab(); }
    std::int64_t max_sequence_tokens() const override { return inner.max_sequence_tokens(); }
    void add_sequence(SequenceId s, std::int64_t n) override { inner.add_sequence(s, n); }
    void free_sequence(SequenceId s) override { inner.free_sequence(s); }
    std::int64_t sequence_length(SequenceId s) const override { return inner.sequence_length(s); }
    std::size_t live_sequences() const override { return inner.live_sequences(); }
    void step(std::span<const StepRow> rows, std::span<StepOutput> out) override {
      if (++steps == fail_at) throw Error("device lost");
      inner.step(rows, out);
    }
    std::size_t kv_bytes_for(std::int64_t t) const override { return inner.kv_bytes_for(t); }
    KvMemory kv_memory() const override { return inner.kv_memory(); }
    std::string describe() const override { return "flaky"; }
  } engine;
  Scheduler s(engine, options(2, 32, 8));
  auto a = std::make_shared<Recorder>(), b = std::make_shared<Recorder>();
  s.submit(request(prompt_of(5, 1), 5), a);
  run_until_idle(s);
  s.submit(request(prompt_of(5, 2), 5), b);
  run_until_idle(s);
  EXPECT_EQ(a->summary->reason, FinishReason::error);
  EXPECT_NE(a->summary->error.find("device lost"), std::string::npos);
  EXPECT_EQ(b->summary->reason, FinishReason::length);
  EXPECT_EQ(b->tokens, alone(prompt_of(5, 2), 5));
  EXPECT_EQ(engine.live_sequences(), 0u);
}

TEST(Scheduler, DestroyingItCancelsAndFrees) {
  FakeEngine engine(1 << 20);
  auto a = std::make_shared<Recorder>(), b = std::make_shared<Recorder>();
  {
    Scheduler s(engine, options(1, 16, 8));
    s.submit(request(prompt_of(5, 1), 50), a);
    s.step();
    s.submit(request(prompt_of(5, 2), 50), b);
  }
  EXPECT_EQ(a->summary->reason, FinishReason::cancelled);
  EXPECT_EQ(b->summary->reason, FinishReason::cancelled);
  EXPECT_EQ(engine.live_sequences(), 0u);
}

}  // namespace
}  // namespace lowbit::test

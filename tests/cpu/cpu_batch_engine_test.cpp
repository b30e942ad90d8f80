// The CPU BatchEngine on a tiny random llama: a step over several sequences equals each
// sequence run alone; the scheduler over it reproduces generate() request by request
// (greedy and sampled), under preemption too; memory is accounted and returned; bad
// rows are refused before anything changes; it does not profile steps, and a step
// profile's table says what it holds.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "common/expect_error.h"
#include "common/tiny_llama.h"
#include "engine/cpu_batch_engine.h"
#include "engine/cpu_session.h"
#include "engine/generate.h"
#include "engine/scheduler.h"
#include "engine/step_profile.h"

namespace lowbit::test {
namespace {

using namespace lowbit::engine;

Model tiny_model() {
  static const TinyLlama m = make_tiny_llama();
  return Model::from_gguf(GgufFile::from_bytes(m.gguf));
}

std::vector<std::int32_t> tokens(std::int64_t n, int salt) {
  std::vector<std::int32_t> t;
  for (std::int64_t i = 0; i < n; ++i) t.push_back(static_cast<std::int32_t>((i * 13 + salt * 7 + 1) % 50));
  return t;
}

KvCacheOptions selective() {
  KvCacheOptions o;
  o.policy = KvPolicy::selective, o.sink = 2, o.window = 4, o.kv_bits = 4;
  return o;
}

struct Collect final : RequestSink {
  std::vector<std::int32_t> tokens;
  std::optional<RequestSummary> summary;
  bool on_token(std::int32_t t, const Logprobs*) override {
    tokens.push_back(t);
    return true;
  }
  void on_finish(const RequestSummary& s) override { summary = s; }
};

TEST(CpuBatchEngine, AStepEqualsEachSequenceAlone) {
  const Model model = tiny_model();
  CpuBatchEngine engine(model, selective(), 1 << 24, 64);
  engine.add_sequence(1, 40);
  engine.add_sequence(2, 40);
  CpuSession one(model, selective(), 40), two(model, selective(), 40);
  const std::vector<std::int32_t> a = tokens(9, 1), b = tokens(13, 2);
  formats::sampling::RowParams p;
  p.temperature = 0.8f, p.top_k = 10, p.seed = 5;
  const std::vector<TokenCount> penalties{{3, 2}, {7, 1}};
  std::vector<StepRow> rows(2);
  rows[0].seq = 1, rows[0].tokens = a, rows[0].sample = true, rows[0].sampling.params = p;
  rows[0].sampling.logprobs = 2;
  rows[1].seq = 2, rows[1].tokens = b, rows[1].sample = true, rows[1].sampling.params = p;
  rows[1].sampling.penalties = penalties;
  std::vector<StepOutput> out(2);
  engine.step(rows, out);
  EXPECT_EQ(out[0].token, sample_token(one.forward(a, false), p, {}));
  EXPECT_EQ(out[1].token, sample_token(two.forward(b, false), p, penalties));
  EXPECT_EQ(out[0].logprobs.top.size(), 2u);
  EXPECT_EQ(engine.sequence_length(1), 9);
  EXPECT_EQ(engine.kv_memory().used, one.kv_bytes() + two.kv_bytes());
  EXPECT_EQ(engine.kv_bytes_for(9), one.kv_bytes());
  // A decode row for one and a row that only appends (no sample) for the other.
  const std::int32_t next = out[0].token;
  rows[0].tokens = std::span<const std::int32_t>(&next, 1);
  rows[1].tokens = std::span<const std::int32_t>(b.data(), 3), rows[1].sample = false;
  engine.step(rows, out);
  EXPECT_EQ(out[0].token, sample_token(one.forward(rows[0].tokens, false), p, {}));
  EXPECT_EQ(out[1].token, -1);
  EXPECT_EQ(engine.sequence_length(2), 16);
  engine.free_sequence(1);
  engine.free_sequence(2);
  EXPECT_EQ(engine.kv_memory().used, 0u);
}

TEST(CpuBatchEngine, BadRowsAreRefusedBeforeAnythingChanges) {
  const Model model = tiny_model();
  CpuBatchEngine engine(model, {}, 5000, 64);
  engine.add_sequence(1, 10);
  EXPECT_LOWBIT_ERROR(engine.add_sequence(1, 10), "sequence 1: already live");
  EXPECT_LOWBIT_ERROR(engine.add_sequence(2, 65), "max_tokens 65, expected 1..64");
  EXPECT_LOWBIT_ERROR(engine.free_sequence(7), "sequence 7: unknown");
  const std::vector<std::int32_t> ok = tokens(4, 0), bad{1, 50}, many = tokens(11, 0), big = tokens(10, 3);
  std::vector<StepOutput> out(2);
  auto rows_of = [](std::vector<StepRow> r) { return r; };
  EXPECT_LOWBIT_ERROR(engine.step(rows_of({{9, ok, false, {}}}), std::span<StepOutput>(out.data(), 1)),
                      "sequence 9: unknown");
  EXPECT_LOWBIT_ERROR(engine.step(rows_of({{1, ok, false, {}}, {1, ok, false, {}}}), out), "appears twice");
  EXPECT_LOWBIT_ERROR(engine.step(rows_of({{1, bad, false, {}}}), std::span<StepOutput>(out.data(), 1)),
                      "token id 50 outside the vocabulary");
  EXPECT_LOWBIT_ERROR(engine.step(rows_of({{1, many, false, {}}}), std::span<StepOutput>(out.data(), 1)),
                      "exceed its max_tokens 10");
  const std::vector<TokenCount> unsorted{{4, 1}, {2, 1}};
  StepRow penalized{1, ok, true, {}};
  penalized.sampling.penalties = unsorted;
  EXPECT_LOWBIT_ERROR(engine.step(rows_of({penalized}), std::span<StepOutput>(out.data(), 1)), "sorted and unique");
  // Budget: 5000 bytes; the tiny model's full cache holds 2 layers x 2 x 32 x 2 bytes
  // = 256 bytes a token, so 10 tokens (2560) fit and two sequences of 10 do not.
  engine.add_sequence(2, 10);
  EXPECT_LOWBIT_ERROR(engine.step(rows_of({{1, big, false, {}}, {2, big, false, {}}}), out), "over the budget");
  EXPECT_EQ(engine.sequence_length(1), 0);
  EXPECT_EQ(engine.sequence_length(2), 0);
}

// Requests through the scheduler, concurrently, equal generate() alone: greedy
// (the argmax path) and sampled (draw i for token i), on a selective cache.
TEST(CpuBatchEngine, ScheduledRequestsEqualGenerateAlone) {
  const Model model = tiny_model();
  CpuBatchEngine engine(model, selective(), 1 << 24, 64);
  SchedulerOptions o;
  o.max_running = 3, o.step_tokens = 40, o.prefill_chunk = 32;  // every prompt in one chunk
  Scheduler scheduler(engine, o);
  std::vector<GenerationRequest> reqs;
  std::vector<std::shared_ptr<Collect>> sinks;
  for (int i = 0; i < 6; ++i) {
    GenerationRequest r;
    r.prompt = tokens(3 + 4 * i, i);
    r.max_new_tokens = 5 + i;
    r.stop_at_end_of_generation = false;
    if (i % 2 == 1) {
      r.sampling.temperature = 30.0f, r.sampling.seed = 100 + static_cast<std::uint64_t>(i);
      r.sampling.top_k = 0, r.sampling.top_p = 1.0f, r.sampling.min_p = 0.0f;  // the tiny model is peaked: flatten it
      r.sampling.repeat_penalty = 1.3f, r.sampling.presence_penalty = 0.2f;
    }
    reqs.push_back(r);
    sinks.push_back(std::make_shared<Collect>());
    ASSERT_TRUE(scheduler.submit(r, sinks.back()));
  }
  for (int i = 0; i < 1000 && !scheduler.idle(); ++i) scheduler.step();
  ASSERT_TRUE(scheduler.idle());
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    SCOPED_TRACE(i);
    CpuSession alone(model, selective(), 64);
    const GenerationResult want = generate(alone, reqs[i].prompt, reqs[i].max_new_tokens, reqs[i].sampling, {}, {});
    EXPECT_EQ(sinks[i]->tokens, want.tokens);
  }
  EXPECT_EQ(engine.live_sequences(), 0u);
  EXPECT_EQ(engine.kv_memory().used, 0u);
}

TEST(CpuBatchEngine, PreemptionUnderATightBudgetFinishesEveryRequest) {
  const Model model = tiny_model();
  // Full cache, 256 bytes a token: 40 tokens of budget for four requests of up to 30.
  CpuBatchEngine engine(model, {}, 40 * 256, 64);
  SchedulerOptions o;
  o.max_running = 4, o.step_tokens = 16, o.prefill_chunk = 8;
  Scheduler scheduler(engine, o);
  std::vector<std::shared_ptr<Collect>> sinks;
  for (int i = 0; i < 4; ++i) {
    GenerationRequest r;
    r.prompt = tokens(10, i);
    r.max_new_tokens = 20;
    r.stop_at_end_of_generation = false;
    sinks.push_back(std::make_shared<Collect>());
    ASSERT_TRUE(scheduler.submit(r, sinks.back()));
  }
  for (int i = 0; i < 2000 && !scheduler.idle(); ++i) {
    scheduler.step();
    ASSERT_LE(engine.kv_memory().used, engine.kv_memory().budget);
  }
  ASSERT_TRUE(scheduler.idle());
  EXPECT_GT(scheduler.stats().preemptions, 0);
  for (const auto& s : sinks) {
    ASSERT_TRUE(s->summary);
    EXPECT_EQ(s->summary->reason, FinishReason::length);
    EXPECT_EQ(s->tokens.size(), 20u);
  }
  EXPECT_EQ(engine.live_sequences(), 0u);
}

// Step profiling is the GPU engine's (tests/gpu/gpu_batch_engine_gpu_test.cpp); the CPU
// engine says it cannot, and switching it off is always fine.
TEST(CpuBatchEngine, CannotProfileSteps) {
  const Model model = tiny_model();
  CpuBatchEngine engine(model, selective(), 1 << 24, 64);
  EXPECT_FALSE(engine.set_profiling(true));
  EXPECT_TRUE(engine.set_profiling(false));
  EXPECT_EQ(engine.step_profile().steps, 0);
}

// The table of a profile: means a step, device parts as shares of the device time, host
// parts of the wall time, and the host-alone gap.
TEST(StepProfile, TableOfMeansAndShares) {
  EXPECT_EQ(format_step_profile(StepProfile{}), "no decode step was profiled\n");
  StepProfile p;
  p.steps = 4;
  p[StepPart::qkv] = 6.0;     // 1.5 ms a step
  p[StepPart::down] = 2.0;    // 0.5
  p.device_ms = 8.0;          // 2 ms a step
  p[StepPart::inputs] = 1.0;  // 0.25
  p[StepPart::sync] = 9.0;    // 2.25
  p.wall_ms = 10.0;           // 2.5 ms a step
  StepProfile twice = p;
  twice += p;
  EXPECT_EQ(twice.steps, 8);
  EXPECT_DOUBLE_EQ(twice[StepPart::qkv], 12.0);
  EXPECT_DOUBLE_EQ(twice.wall_ms, 20.0);
  const std::string table = format_step_profile(twice);
  for (const char* line :
       {"| QKV GEMM | 1.5000 | 75.0% of device |", "| down GEMM | 0.5000 | 25.0% of device |",
        "| SwiGLU | 0.0000 | 0.0% of device |", "| **device, first to last event** | 2.0000 | 80.0% of wall |",
        "| host: plan, inputs upload | 0.2500 | 10.0% of wall |",
        "| host: wait for the device | 2.2500 | 90.0% of wall |",
        "| **wall - device: the host alone** | 0.5000 | 20.0% of wall |", "(8 decode steps)"}) {
    EXPECT_NE(table.find(line), std::string::npos) << line << " in\n" << table;
  }
  EXPECT_STREQ(step_part_key(StepPart::gate_up), "gate_up");
  EXPECT_STREQ(step_part_key(StepPart::other), "host_other");
}

}  // namespace
}  // namespace lowbit::test

// The GPU batch engine (engine/gpu_batch_engine.h) against GpuSession run alone, on a
// synthesized "tiny" llama (engine/synth: d_model 256, 2 layers, 4 / 2 heads of 64,
// Q4_1 matrices, a 500-token vocabulary):
// - one sequence in an engine whose max_sequence_tokens equals the session's max_tokens
//   (256) gives the session's prefill log-probabilities exactly (the same GEMMs at the
//   same M; the paged rows form is the contiguous one bit for bit) and its decode_greedy
//   tokens (the batch's decode split plan, of max_length 256 at batch 1, is the
//   session's);
// - sequences of mixed prompt lengths (1 to 600: one crosses the 512-token piece and the
//   passes split) stepped together, with joins and leaves between steps, give each
//   sequence's greedy tokens alone, and log-probabilities within kLogprobTolerance of the
//   session's forward logits: a weight-only GEMM's row depends on M (the kernels pick
//   their kernel and split-K by M: the streaming GEMV up to 16 rows, the tiled one above),
//   and the decode attention's split plan is the batch's (size, longest row), so rows batched
//   with others differ from rows alone by f32 rounding. A greedy token may differ only at
//   a near-tie (the session's two best logits within the tolerance); the sequence is not
//   compared past it.
// - KV memory is the live sequences' whole pages (kv_bytes_for of each length) and
//   returns to zero after the frees; a step needing more pages than are free is refused;
//   bad rows throw lowbit::Error with no sequence changed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include "common/expect_error.h"
#include "common/gpu.h"
#include "common/tokenizer_source.h"
#include "engine/generate.h"
#include "engine/gpu_batch_engine.h"
#include "engine/gpu_session.h"
#include "engine/sampling.h"
#include "engine/synth/synth_model.h"

namespace lowbit::test {
namespace {

using engine::GpuBatchEngine;
using engine::StepOutput;
using engine::StepRow;

constexpr std::int64_t kVocab = 500;
constexpr double kLogprobTolerance = 2e-2;  // f32 rounding of f16 activations through 2 layers

struct SynthGpu {
  engine::GgufFile file;
  engine::GpuModel gpu;
  SynthGpu()
      : file(engine::GgufFile::from_bytes(engine::SynthModel(engine::find_synth_preset("tiny"), engine::GgmlType::q4_1,
                                                             11, tokenizer_source(kVocab))
                                              .to_bytes())),
        gpu(engine::GpuModel::from_gguf(file)) {}
};

const SynthGpu& model() {
  static const SynthGpu m;
  return m;
}

engine::KvCacheOptions policy(KvPolicy p, int bits = 8) {
  engine::KvCacheOptions o;
  o.policy = p;
  o.sink = 4;
  o.window = 16;
  o.kv_bits = bits;
  return o;
}

std::vector<std::int32_t> prompt_of(std::int64_t length, std::int64_t seed) {
  std::vector<std::int32_t> p;
  for (std::int64_t i = 0; i < length; ++i) p.push_back(static_cast<std::int32_t>((i * 37 + seed * 101 + 11) % kVocab));
  return p;
}

StepRow greedy_row(engine::SequenceId seq, std::span<const std::int32_t> tokens, int logprobs = 20) {
  StepRow row;
  row.seq = seq;
  row.tokens = tokens;
  row.sample = true;
  row.sampling.logprobs = logprobs;
  return row;
}

// The largest difference between the engine's log-probabilities and those of `logits`.
double logprob_error(const engine::Logprobs& got, std::span<const float> logits) {
  const engine::Logprobs want = engine::token_logprobs(logits, got.chosen.id, static_cast<int>(got.top.size()));
  double worst = std::fabs(got.chosen.logprob - want.chosen.logprob);
  for (const engine::TokenLogprob& t : got.top) {
    worst = std::max(worst, std::fabs(t.logprob - engine::token_logprobs(logits, t.id, 0).chosen.logprob));
  }
  return worst;
}

// The gap between the best and the second-best logit.
double top_gap(std::span<const float> logits) {
  std::vector<float> v(logits.begin(), logits.end());
  std::partial_sort(v.begin(), v.begin() + 2, v.end(), std::greater<>());
  return static_cast<double>(v[0]) - v[1];
}

class GpuBatchEngineGpu : public GpuTest {};

TEST_F(GpuBatchEngineGpu, OneSequenceIsGpuSessionBitForBit) {
  for (const engine::KvCacheOptions& cache : {policy(KvPolicy::full), policy(KvPolicy::selective, 4)}) {
    SCOPED_TRACE(kv_policy_name(cache.policy));
    GpuBatchEngine engine(model().gpu, cache, std::size_t{1} << 30, 256);
    engine::GpuSession session(model().gpu, cache, 256);
    engine::GpuSession forward_session(model().gpu, cache, 256);
    engine.add_sequence(7, 256);
    const std::vector<std::int32_t> prompt = prompt_of(40, 1);
    std::vector<StepOutput> out(1);
    const StepRow first = greedy_row(7, prompt);
    engine.step(std::span(&first, 1), out);
    const std::vector<float> logits = session.forward(prompt, false);
    forward_session.forward(prompt, false);
    ASSERT_EQ(out[0].token, engine::argmax(logits));
    EXPECT_EQ(logprob_error(out[0].logprobs, logits), 0.0) << "prefill: the same logits bit for bit";
    std::int32_t token = out[0].token;
    for (int s = 0; s < 24; ++s) {
      const StepRow row = greedy_row(7, std::span(&token, 1));
      engine.step(std::span(&row, 1), out);
      const std::int32_t want = session.decode_greedy(token);
      const std::vector<float> forward_logits = forward_session.forward(std::span(&token, 1), false);
      ASSERT_EQ(out[0].token, want) << "decode step " << s;
      EXPECT_LT(logprob_error(out[0].logprobs, forward_logits), kLogprobTolerance) << "decode step " << s;
      token = want;
    }
    EXPECT_EQ(engine.sequence_length(7), 40 + 24);
  }
}

// A sequence of the mixed batch and its reference run alone.
struct Alone {
  std::vector<std::int32_t> prompt, tokens;  // tokens: the engine's so far
  std::unique_ptr<engine::GpuSession> greedy, forward;
  std::int32_t next = -1;   // the reference's next token
  bool compared = true;     // false past a near-tie
  std::int64_t max_tokens = 0;
};

TEST_F(GpuBatchEngineGpu, MixedBatchEqualsEachSequenceAlone) {
  for (const engine::KvCacheOptions& cache :
       {policy(KvPolicy::full), policy(KvPolicy::selective, 4), policy(KvPolicy::int8), policy(KvPolicy::window)}) {
    SCOPED_TRACE(kv_policy_name(cache.policy));
    GpuBatchEngine engine(model().gpu, cache, std::size_t{1} << 30, 1024);
    std::map<engine::SequenceId, Alone> live;
    auto join = [&](engine::SequenceId id, std::int64_t prompt_length) {
      Alone a;
      a.prompt = prompt_of(prompt_length, id);
      a.max_tokens = prompt_length + 40;
      a.greedy = std::make_unique<engine::GpuSession>(model().gpu, cache, a.max_tokens);
      a.forward = std::make_unique<engine::GpuSession>(model().gpu, cache, a.max_tokens);
      engine.add_sequence(id, a.max_tokens);
      live.emplace(id, std::move(a));
    };
    for (const auto& [id, length] : std::vector<std::pair<int, int>>{{1, 1}, {2, 7}, {3, 40}, {4, 130}, {5, 600},
                                                                      {6, 33}}) {
      join(id, length);
    }
    int decode_steps = 0, near_ties = 0;
    for (int step = 0; step < 14; ++step) {
      if (step == 5) {  // one leaves, one joins and prefills beside the decode rows
        engine.free_sequence(2);
        live.erase(2);
        join(9, 70);
      }
      std::vector<StepRow> rows;
      std::vector<engine::SequenceId> ids;
      std::vector<std::int32_t> last(live.size());
      for (auto& [id, a] : live) {
        if (a.tokens.empty()) {
          rows.push_back(greedy_row(id, a.prompt, 5));
        } else {
          last[rows.size()] = a.tokens.back();
          rows.push_back(greedy_row(id, std::span(&last[rows.size()], 1), 5));
        }
        ids.push_back(id);
      }
      std::vector<StepOutput> out(rows.size());
      engine.step(rows, out);
      for (std::size_t i = 0; i < rows.size(); ++i) {
        Alone& a = live.at(ids[i]);
        SCOPED_TRACE(testing::Message() << "step " << step << ", sequence " << ids[i]);
        std::vector<float> logits;
        if (a.tokens.empty()) {
          logits = a.greedy->forward(a.prompt, false);
          a.forward->forward(a.prompt, false);
          a.next = engine::argmax(logits);
        } else if (a.compared) {
          const std::int32_t fed = a.tokens.back();
          a.next = a.greedy->decode_greedy(fed);
          logits = a.forward->forward(std::span(&fed, 1), false);
          ++decode_steps;
        }
        if (a.compared) {
          EXPECT_LT(logprob_error(out[i].logprobs, logits), kLogprobTolerance);
          if (out[i].token != a.next) {
            EXPECT_LT(top_gap(logits), kLogprobTolerance) << "greedy tokens differ away from a near-tie";
            a.compared = false;
            ++near_ties;
          }
        }
        a.tokens.push_back(out[i].token);
        EXPECT_EQ(engine.sequence_length(ids[i]),
                  static_cast<std::int64_t>(a.prompt.size() + a.tokens.size()) - 1);
      }
    }
    EXPECT_GT(decode_steps, 40);
    EXPECT_LE(near_ties, 1) << "near-ties are rare";
    // Memory: the live caches' allocations, each what kv_bytes_for says of its length.
    std::size_t expected = 0;
    for (const auto& [id, a] : live) expected += engine.kv_bytes_for(engine.sequence_length(id));
    EXPECT_EQ(engine.kv_memory().used, expected);
    for (const auto& [id, a] : live) engine.free_sequence(id);
    EXPECT_EQ(engine.kv_memory().used, 0u);
    EXPECT_EQ(engine.live_sequences(), 0u);
  }
}

TEST_F(GpuBatchEngineGpu, BadRowsChangeNothing) {
  GpuBatchEngine engine(model().gpu, policy(KvPolicy::selective, 4), std::size_t{1} << 30, 256);
  engine.add_sequence(1, 64);
  engine.add_sequence(2, 64);
  const std::vector<std::int32_t> prompt = prompt_of(20, 3);
  std::vector<StepOutput> out(2);
  std::vector<StepRow> rows{greedy_row(1, prompt), greedy_row(2, std::span(prompt).first(5))};
  engine.step(rows, out);
  const engine::KvMemory before = engine.kv_memory();
  const std::int32_t ok = 3, outside = static_cast<std::int32_t>(kVocab), negative = -1;
  const std::vector<std::int32_t> too_long(60, 4);
  const std::vector<engine::TokenCount> unsorted{{5, 1}, {3, 1}};
  auto expect_refused = [&](std::vector<StepRow> bad, const char* message, std::size_t outputs = 0) {
    std::vector<StepOutput> o(outputs ? outputs : bad.size());
    EXPECT_LOWBIT_ERROR(engine.step(bad, o), message);
    EXPECT_EQ(engine.sequence_length(1), 20);
    EXPECT_EQ(engine.sequence_length(2), 5);
    EXPECT_EQ(engine.kv_memory().used, before.used);
  };
  expect_refused({greedy_row(3, std::span(&ok, 1))}, "sequence 3: unknown");
  expect_refused({greedy_row(1, std::span(&ok, 1)), greedy_row(1, std::span(&ok, 1))}, "appears twice");
  expect_refused({greedy_row(1, std::span<const std::int32_t>())}, "has no tokens");
  expect_refused({greedy_row(1, std::span(&ok, 1)), greedy_row(2, std::span(&outside, 1))}, "outside the vocabulary");
  expect_refused({greedy_row(2, std::span(&negative, 1))}, "token id -1");
  expect_refused({greedy_row(1, too_long)}, "exceed its max_tokens 64");
  StepRow penalized = greedy_row(1, std::span(&ok, 1));
  penalized.sampling.penalties = unsorted;
  expect_refused({penalized}, "ids must be sorted and unique");
  expect_refused({greedy_row(1, std::span(&ok, 1), 21)}, "logprobs 21");
  expect_refused({greedy_row(1, std::span(&ok, 1))}, "2 outputs for 1 rows", 2);
  EXPECT_LOWBIT_ERROR(engine.add_sequence(1, 10), "already live");
  EXPECT_LOWBIT_ERROR(engine.add_sequence(5, 257), "max_tokens 257");
  EXPECT_LOWBIT_ERROR(engine.free_sequence(5), "unknown");

  // Pages: whole pages of 16 tokens (+ the fixed sink + window area of a selective slot).
  GpuBatchEngine full(model().gpu, policy(KvPolicy::full), std::size_t{1} << 30, 1024);
  const std::size_t page = full.kv_bytes_for(1);
  EXPECT_GT(page, 0u);
  EXPECT_EQ(full.kv_bytes_for(16), page);
  EXPECT_EQ(full.kv_bytes_for(17), 2 * page);
  EXPECT_EQ(full.kv_bytes_for(280), 18 * page);
  const std::size_t fixed = engine.kv_bytes_for(1);  // selective: the fixed area, no page until the body
  EXPECT_GT(fixed, 0u);
  EXPECT_EQ(engine.kv_bytes_for(4 + 16), fixed);
  EXPECT_GT(engine.kv_bytes_for(4 + 16 + 1), fixed);

  // The budget: 20 pages. A step needing more pages than are free is refused, nothing
  // changed; within them, runs.
  GpuBatchEngine small(model().gpu, policy(KvPolicy::full), 20 * page, 1024);
  EXPECT_EQ(small.kv_memory().budget, 20 * page);
  small.add_sequence(1, 1024);
  small.add_sequence(2, 1024);
  const std::vector<std::int32_t> long_prompt = prompt_of(280, 5);
  std::vector<StepOutput> one(1);
  const StepRow a = greedy_row(1, long_prompt);
  small.step(std::span(&a, 1), one);
  EXPECT_EQ(small.kv_memory().used, 18 * page);
  const StepRow b = greedy_row(2, std::span(long_prompt).first(40));  // 3 pages, 2 free
  EXPECT_LOWBIT_ERROR(small.step(std::span(&b, 1), one), "over the budget");
  EXPECT_EQ(small.sequence_length(2), 0);
  EXPECT_EQ(small.kv_memory().used, small.kv_bytes_for(280));
  small.free_sequence(1);
  EXPECT_EQ(small.kv_memory().used, 0u);
  small.step(std::span(&b, 1), one);
  EXPECT_EQ(small.kv_memory().used, small.kv_bytes_for(40));
  // Decode steps take a page every 16 tokens: 40 + 8 tokens still hold 3 pages, 49 four.
  std::int32_t token = one[0].token;
  for (int s = 0; s < 9; ++s) {
    const StepRow d = greedy_row(2, std::span(&token, 1));
    small.step(std::span(&d, 1), one);
    token = one[0].token;
    EXPECT_EQ(small.kv_memory().used, small.kv_bytes_for(41 + s)) << "decode step " << s;
  }
  EXPECT_EQ(small.kv_memory().used, 4 * page);
  EXPECT_EQ(engine.kv_bytes_for(0), 0u);
}

}  // namespace
}  // namespace lowbit::test

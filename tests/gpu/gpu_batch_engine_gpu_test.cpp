// The GPU batch engine (engine/gpu_batch_engine.h) against GpuSession run alone, on a
// synthesized "tiny" llama (engine/synth: d_model 256, 2 layers, 4 / 2 heads of 64,
// Q4_1 matrices, a 500-token vocabulary):
// - one sequence in an engine whose max_sequence_tokens equals the session's max_tokens
//   (256) gives the session's prefill log-probabilities exactly (the same GEMMs at the
//   same M; the paged rows form is the contiguous one bit for bit; but on Hopper, where
//   the session's prefill runs flash's wgmma kernels (full and selective here) and the
//   paged form the mma rows kernel: within logprob_tolerance) and its decode_greedy
//   tokens (the batch's decode split plan, of max_length 256 at batch 1, is the
//   session's);
// - sequences of mixed prompt lengths (1 to 600: one crosses the 512-token piece and the
//   passes split) stepped together, with joins and leaves between steps, give each
//   sequence's greedy tokens alone, and log-probabilities within logprob_tolerance of the
//   session's forward logits: a weight-only GEMM's row depends on M (the kernels pick
//   their kernel and split-K by M: the streaming GEMV up to 16 rows, the tiled one above),
//   and the decode attention's split plan is the batch's (size, longest row), so rows batched
//   with others differ from rows alone by f32 rounding. A greedy token may differ only at
//   a near-tie (the session's two best logits within the tolerance); the sequence is not
//   compared past it.
// - KV memory is the live sequences' whole pages (kv_bytes_for of each length) and
//   returns to zero after the frees; a step needing more pages than are free is refused;
//   bad rows throw lowbit::Error with no sequence changed.
// - decode-only steps as CUDA graphs give the bits of the same steps launched kernel by
//   kernel (tokens, sampled draws with penalties, log-probabilities), as sequences join
//   and leave, cross a max_length granule and change bucket; graphs past the cache are
//   dropped least recently used and captured again; profiling changes no bit, counts
//   the decode-only steps only, and its parts add up.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <utility>
#include <vector>

#include "common/expect_error.h"
#include "common/gpu.h"
#include "common/tokenizer_source.h"
#include "cuda/flash/flash_cuda.h"
#include "engine/generate.h"
#include "engine/gpu_batch_engine.h"
#include "engine/gpu_session.h"
#include "engine/sampling.h"
#include "engine/step_profile.h"
#include "engine/synth/synth_model.h"

namespace lowbit::test {
namespace {

using engine::GpuBatchEngine;
using engine::StepOutput;
using engine::StepRow;

constexpr std::int64_t kVocab = 500;
constexpr double kLogprobTolerance = 2e-2;  // f32 rounding of f16 activations through 2 layers

// Whether the session's prefill runs flash over a quantizing cache (Hopper: selective, int8,
// int4) while the paged engine runs the mma rows kernel: their attention outputs agree within
// the kernel tests' tolerances (~1e-3), but layer 1's difference can move a value of layer 2's
// K / V across an INT4 / INT8 rounding boundary, so one code of the cache differs by a step of
// its grid; measured on the H200 (session 22) up to 0.031 in a log-probability.
bool flash_over_quantized(const engine::KvCacheOptions& cache) {
  return cuda::flash::flash_wgmma_available() && cache.policy != KvPolicy::full && cache.policy != KvPolicy::window;
}
double logprob_tolerance(const engine::KvCacheOptions& cache) {
  return flash_over_quantized(cache) ? 5e-2 : kLogprobTolerance;
}

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

// The same cache with K in key blocks of `b` tokens.
engine::KvCacheOptions with_key_blocks(engine::KvCacheOptions o, std::int64_t b) {
  o.kv_key_block = b;
  return o;
}

TEST_F(GpuBatchEngineGpu, OneSequenceIsGpuSessionBitForBit) {
  // Key blocks: selective's body [4, length - 16) completes blocks of 16, int4's of 32.
  for (const engine::KvCacheOptions& cache :
       {policy(KvPolicy::full), policy(KvPolicy::selective, 4), with_key_blocks(policy(KvPolicy::selective, 4), 16),
        with_key_blocks(policy(KvPolicy::int4, 4), 32)}) {
    SCOPED_TRACE(std::string(kv_policy_name(cache.policy)) + " key block " + std::to_string(cache.kv_key_block));
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
    // The session's prefill on Hopper is flash's (kv_attention_rows' automatic kernel:
    // full and, over the mixed cache, selective): the paged form's within rounding, the
    // greedy token the same but at a near-tie.
    const bool flash = cuda::flash::flash_wgmma_available();
    const double tolerance = logprob_tolerance(cache);
    if (!flash || top_gap(logits) > tolerance) {
      ASSERT_EQ(out[0].token, engine::argmax(logits));
    }
    if (flash) {
      EXPECT_LT(logprob_error(out[0].logprobs, logits), tolerance) << "prefill: flash against mma";
    } else {
      EXPECT_EQ(logprob_error(out[0].logprobs, logits), 0.0) << "prefill: the same logits bit for bit";
    }
    std::int32_t token = out[0].token;
    for (int s = 0; s < 24; ++s) {
      const StepRow row = greedy_row(7, std::span(&token, 1));
      engine.step(std::span(&row, 1), out);
      const std::int32_t want = session.decode_greedy(token);
      const std::vector<float> forward_logits = forward_session.forward(std::span(&token, 1), false);
      ASSERT_EQ(out[0].token, want) << "decode step " << s;
      EXPECT_LT(logprob_error(out[0].logprobs, forward_logits), tolerance) << "decode step " << s;
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
          EXPECT_LT(logprob_error(out[i].logprobs, logits), logprob_tolerance(cache));
          if (out[i].token != a.next) {
            EXPECT_LT(top_gap(logits), logprob_tolerance(cache)) << "greedy tokens differ away from a near-tie";
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
    EXPECT_LE(near_ties, flash_over_quantized(cache) ? 2 : 1) << "near-ties are rare";
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

// ---- CUDA graphs of decode-only steps, and step profiling ----

// The buckets: powers of two up to 64, then multiples of 32 (no device needed).
TEST(GpuBatchEngineBuckets, PowersOfTwoThenMultiplesOf32) {
  const std::vector<std::pair<std::int64_t, std::int64_t>> cases{
      {1, 1}, {2, 2}, {3, 4}, {5, 8}, {16, 16}, {17, 32}, {33, 64}, {64, 64}, {65, 96}, {96, 96}, {97, 128},
      {200, 224}, {256, 256}};
  for (const auto& [rows, bucket] : cases) EXPECT_EQ(GpuBatchEngine::decode_bucket(rows), bucket) << rows << " rows";
  EXPECT_LOWBIT_ERROR(GpuBatchEngine::decode_bucket(0), "0 rows, expected 1..256");
  EXPECT_LOWBIT_ERROR(GpuBatchEngine::decode_bucket(257), "257 rows");
}

// Two steps' outputs are the same bits: tokens, and the log-probabilities (computed on
// the host from the whole f16 logits row: the chosen token's and the top ones', so
// equal logits give equal values, and a logit that differs shows in the log-sum-exp).
void expect_same_outputs(std::span<const StepOutput> a, std::span<const StepOutput> b) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    SCOPED_TRACE(testing::Message() << "row " << i);
    EXPECT_EQ(a[i].token, b[i].token);
    EXPECT_EQ(a[i].logprobs.chosen.id, b[i].logprobs.chosen.id);
    EXPECT_EQ(a[i].logprobs.chosen.logprob, b[i].logprobs.chosen.logprob);
    ASSERT_EQ(a[i].logprobs.top.size(), b[i].logprobs.top.size());
    for (std::size_t t = 0; t < a[i].logprobs.top.size(); ++t) {
      EXPECT_EQ(a[i].logprobs.top[t].id, b[i].logprobs.top[t].id);
      EXPECT_EQ(a[i].logprobs.top[t].logprob, b[i].logprobs.top[t].logprob);
    }
  }
}

bool decode_only(std::span<const StepRow> rows) {
  return std::all_of(rows.begin(), rows.end(), [](const StepRow& r) { return r.tokens.size() == 1; });
}

// Engines stepped in lockstep over the same rows: an engine with CUDA graphs and one
// without (or a profiled one and a plain one) must give the same bits.
struct Lockstep {
  std::vector<std::unique_ptr<GpuBatchEngine>> engines;
  int decode_steps = 0;
  void add(engine::SequenceId id, std::int64_t max_tokens) {
    for (auto& e : engines) e->add_sequence(id, max_tokens);
  }
  void free(engine::SequenceId id) {
    for (auto& e : engines) e->free_sequence(id);
  }
  std::vector<StepOutput> step(std::span<const StepRow> rows) {
    decode_steps += decode_only(rows);
    std::vector<StepOutput> first(rows.size());
    engines[0]->step(rows, first);
    for (std::size_t k = 1; k < engines.size(); ++k) {
      std::vector<StepOutput> out(rows.size());
      engines[k]->step(rows, out);
      expect_same_outputs(first, out);
    }
    return first;
  }
};

// A sequence of the schedule: its prompt, then one token a step (what it drew, or a
// fixed one after a step it did not sample), with its own way of sampling by id.
struct Scripted {
  std::vector<std::int32_t> prompt;
  std::int32_t next = -1;  // -1: the prompt is next
  std::map<std::int32_t, std::int32_t> counts;  // its drawn tokens (the penalty window)
  std::vector<engine::TokenCount> penalties;
  std::int64_t draws = 0;
};

// id % 3: 0 draws (temperature, top-k, top-p, penalties over all it drew: a list that
// grows, moving the graphs' penalty section), 1 greedy, 2 greedy on even steps only.
StepRow scripted_row(engine::SequenceId id, Scripted& s, int step) {
  StepRow row = greedy_row(id, s.next < 0 ? std::span<const std::int32_t>(s.prompt)
                                          : std::span<const std::int32_t>(&s.next, 1));
  if (id % 3 == 0) {
    row.sampling.params.temperature = 0.9f;
    row.sampling.params.top_k = 50;
    row.sampling.params.top_p = 0.95f;
    row.sampling.params.repeat_penalty = 1.3f;
    row.sampling.params.frequency_penalty = 0.1f;
    row.sampling.params.seed = 1000 + static_cast<std::uint64_t>(id);
    row.sampling.params.draw = static_cast<std::uint64_t>(s.draws);
    s.penalties.clear();
    for (const auto& [token, count] : s.counts) s.penalties.push_back({token, count});
    row.sampling.penalties = s.penalties;
  }
  if (id % 3 == 2 && step % 2 == 1) {
    row.sample = false;
    row.sampling.logprobs = -1;
  }
  return row;
}

// After the step: what each sequence feeds next.
void advance(std::map<engine::SequenceId, Scripted>& live, std::span<const StepRow> rows,
             std::span<const StepOutput> out) {
  for (std::size_t i = 0; i < rows.size(); ++i) {
    Scripted& s = live.at(rows[i].seq);
    s.next = rows[i].sample ? out[i].token : 7;
    if (rows[i].sample) {
      ++s.counts[out[i].token];
      ++s.draws;
    }
  }
}

// The graph key of a decode-only step (the engine's rule): its bucket, and its longest
// row's position + 1 rounded up to 256, capped at max_sequence_tokens.
std::pair<std::int64_t, std::int64_t> graph_key(const GpuBatchEngine& e, std::span<const StepRow> rows) {
  std::int64_t max_length = 0;
  for (const StepRow& r : rows) {
    max_length = std::max(max_length, std::min((e.sequence_length(r.seq) + 256) / 256 * 256, e.max_sequence_tokens()));
  }
  return {GpuBatchEngine::decode_bucket(static_cast<std::int64_t>(rows.size())), max_length};
}

TEST_F(GpuBatchEngineGpu, GraphsEqualLaunchesBitForBit) {
  for (const engine::KvCacheOptions& cache :
       {policy(KvPolicy::full), policy(KvPolicy::selective, 4), policy(KvPolicy::int8)}) {
    SCOPED_TRACE(kv_policy_name(cache.policy));
    Lockstep run;
    for (const bool graphs : {true, false}) {
      run.engines.push_back(std::make_unique<GpuBatchEngine>(model().gpu, cache, std::size_t{1} << 30, 1024, graphs));
    }
    const GpuBatchEngine& graphed = *run.engines[0];
    std::map<engine::SequenceId, Scripted> live;
    auto join = [&](engine::SequenceId id, std::int64_t prompt_length) {
      live[id].prompt = prompt_of(prompt_length, id);
      run.add(id, prompt_length + 40);
    };
    auto leave = [&](engine::SequenceId id) {
      run.free(id);
      live.erase(id);
    };
    // Lengths 5, 252 (position 256 at step 5: a new max_length), 40; then 600 (a
    // longer split plan) joins, then two short ones (bucket 4 -> 8), then they leave
    // down to two rows and one (buckets 2, 1).
    join(1, 5);
    join(2, 252);
    join(3, 40);
    std::set<std::pair<std::int64_t, std::int64_t>> keys;
    for (int step = 0; step < 24; ++step) {
      if (step == 6) join(4, 600);
      if (step == 10) {
        join(5, 3);
        join(6, 17);
      }
      if (step == 15) {
        leave(2);
        leave(4);
        leave(5);
        leave(6);
      }
      if (step == 20) leave(3);
      std::vector<StepRow> rows;
      for (auto& [id, s] : live) rows.push_back(scripted_row(id, s, step));
      SCOPED_TRACE(testing::Message() << "step " << step << ", " << rows.size() << " rows");
      if (decode_only(rows)) keys.insert(graph_key(graphed, rows));
      const std::vector<StepOutput> out = run.step(rows);
      advance(live, rows, out);
    }
    for (const auto& [id, s] : live) {
      EXPECT_EQ(run.engines[0]->sequence_length(id), run.engines[1]->sequence_length(id));
    }
    EXPECT_EQ(run.engines[0]->kv_memory().used, run.engines[1]->kv_memory().used);
    EXPECT_GE(keys.size(), 6u) << "the schedule covers buckets 1, 2, 4, 8 and several lengths";
    // Every decode-only step was one graph launch; a graph was captured per key (more
    // where a buffer or the penalty section grew) and replayed.
    EXPECT_EQ(graphed.graph_launches(), run.decode_steps);
    EXPECT_GE(graphed.graph_captures(), static_cast<std::int64_t>(keys.size()));
    EXPECT_LT(graphed.graph_captures(), graphed.graph_launches());
    EXPECT_EQ(run.engines[1]->graph_launches(), 0);
    EXPECT_EQ(run.engines[1]->graph_captures(), 0);
  }
}

// More keys than the engine keeps graphs: the least recently used goes and is captured
// again when it returns; the outputs stay the launches' bits.
TEST_F(GpuBatchEngineGpu, GraphsBeyondTheCacheAreRecaptured) {
  Lockstep run;
  for (const bool graphs : {true, false}) {
    run.engines.push_back(
        std::make_unique<GpuBatchEngine>(model().gpu, policy(KvPolicy::full), std::size_t{1} << 30, 2048, graphs));
  }
  const GpuBatchEngine& graphed = *run.engines[0];
  // One long sequence in each of the 8 length granules, 63 short ones.
  std::vector<engine::SequenceId> longs, shorts;
  std::vector<std::vector<std::int32_t>> prompts;
  std::vector<StepRow> prefill;
  for (std::int64_t g = 0; g < 8; ++g) longs.push_back(100 + g);
  for (std::int64_t k = 0; k < 63; ++k) shorts.push_back(200 + k);
  std::map<engine::SequenceId, std::int32_t> next;
  for (const engine::SequenceId id : longs) {
    prompts.push_back(prompt_of(256 * (id - 100) + 100, id));
    run.add(id, static_cast<std::int64_t>(prompts.back().size()) + 40);
  }
  for (const engine::SequenceId id : shorts) {
    prompts.push_back(prompt_of(5, id));
    run.add(id, 200);
  }
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    prefill.push_back(greedy_row(i < longs.size() ? longs[i] : shorts[i - longs.size()], prompts[i], 0));
  }
  const std::vector<StepOutput> first = run.step(prefill);
  for (std::size_t i = 0; i < prefill.size(); ++i) next[prefill[i].seq] = first[i].token;

  const std::vector<std::int64_t> buckets{1, 2, 4, 8, 16, 32, 64};
  auto sweep = [&] {
    for (const std::int64_t b : buckets) {
      for (const engine::SequenceId id : longs) {
        std::vector<StepRow> rows;
        std::vector<std::int32_t> fed;
        fed.reserve(static_cast<std::size_t>(b));
        fed.push_back(next[id]);
        for (std::int64_t k = 0; k + 1 < b; ++k) fed.push_back(next[shorts[static_cast<std::size_t>(k)]]);
        for (std::int64_t k = 0; k < b; ++k) {
          const engine::SequenceId seq = k == 0 ? id : shorts[static_cast<std::size_t>(k - 1)];
          rows.push_back(greedy_row(seq, std::span(&fed[static_cast<std::size_t>(k)], 1), 0));
        }
        SCOPED_TRACE(testing::Message() << "bucket " << b << ", sequence " << id);
        ASSERT_EQ(graph_key(graphed, rows), std::make_pair(b, std::min<std::int64_t>(256 * (id - 99), 2048)));
        const std::vector<StepOutput> out = run.step(rows);
        for (std::size_t i = 0; i < rows.size(); ++i) next[rows[i].seq] = out[i].token;
      }
    }
  };
  const std::int64_t keys = static_cast<std::int64_t>(buckets.size() * longs.size());
  static_assert(GpuBatchEngine::kMaxGraphs < 56);
  sweep();
  EXPECT_EQ(graphed.graph_captures(), keys);
  sweep();  // cyclic over more keys than are kept: every one was dropped before it returned
  EXPECT_EQ(graphed.graph_captures(), 2 * keys);
  EXPECT_EQ(graphed.graph_launches(), 2 * keys);
  // The last key again: kept.
  std::int32_t fed = next[longs.back()];
  const std::vector<StepRow> again{greedy_row(longs.back(), std::span(&fed, 1), 0)};
  run.step(again);
  EXPECT_EQ(graphed.graph_captures(), 2 * keys + 1) << "bucket 1 of the last sequence was dropped";
  run.step(again);
  EXPECT_EQ(graphed.graph_captures(), 2 * keys + 1) << "and now kept";
}

// Profiling changes no bit; it counts the decode-only steps only, every device part
// takes time, the parts add up to the device span, the host's phases to the wall time.
TEST_F(GpuBatchEngineGpu, ProfiledDecodeStepsKeepTheirBits) {
  for (const bool graphs : {true, false}) {
    SCOPED_TRACE(graphs ? "graphs" : "launches");
    Lockstep run;
    for (int k = 0; k < 2; ++k) {
      run.engines.push_back(std::make_unique<GpuBatchEngine>(model().gpu, policy(KvPolicy::selective, 4),
                                                             std::size_t{1} << 30, 512, graphs));
    }
    GpuBatchEngine& profiled = *run.engines[1];
    ASSERT_TRUE(profiled.set_profiling(true));
    std::map<engine::SequenceId, Scripted> live;
    for (const engine::SequenceId id : {1, 2, 3}) {
      live[id].prompt = prompt_of(20 + 30 * id, id);
      run.add(id, 200);
    }
    for (int step = 0; step < 7; ++step) {  // a prefill, then 6 decode-only steps
      std::vector<StepRow> rows;
      for (auto& [id, s] : live) rows.push_back(scripted_row(id, s, step));
      const std::vector<StepOutput> out = run.step(rows);
      advance(live, rows, out);
    }
    const engine::StepProfile p = profiled.step_profile();
    EXPECT_EQ(p.steps, 6);
    double device = 0, host = 0;
    for (std::size_t i = 0; i < engine::kStepParts; ++i) {
      const auto part = static_cast<engine::StepPart>(i);
      SCOPED_TRACE(engine::step_part_name(part));
      EXPECT_GE(p.ms[i], 0.0);
      if (engine::is_device_part(part)) {
        EXPECT_GT(p.ms[i], 0.0);
        device += p.ms[i];
      } else {
        host += p.ms[i];
      }
    }
    EXPECT_NEAR(device, p.device_ms, 1e-3 + 0.01 * p.device_ms);
    EXPECT_NEAR(host, p.wall_ms, 0.01 + 0.02 * p.wall_ms);
    EXPECT_LT(p.device_ms, p.wall_ms);
    EXPECT_EQ(p[engine::StepPart::capture] > 0, graphs) << "the first decode step captured its graph";
    // Off: nothing more is counted; on again: from zero.
    ASSERT_TRUE(profiled.set_profiling(false));
    EXPECT_EQ(profiled.step_profile().steps, 0);
    std::vector<StepRow> rows;
    for (auto& [id, s] : live) rows.push_back(scripted_row(id, s, 7));
    advance(live, rows, run.step(rows));
    EXPECT_EQ(profiled.step_profile().steps, 0);
    ASSERT_TRUE(profiled.set_profiling(true));
    rows.clear();
    for (auto& [id, s] : live) rows.push_back(scripted_row(id, s, 8));
    advance(live, rows, run.step(rows));
    EXPECT_EQ(profiled.step_profile().steps, 1);
  }
}

}  // namespace
}  // namespace lowbit::test

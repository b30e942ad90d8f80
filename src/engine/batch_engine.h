// A forward pass over many sequences at once: what the continuous-batching scheduler
// (scheduler.h) drives. Each sequence has its own KV cache in one memory budget; a step
// appends tokens to several sequences (prompt chunks and single decode tokens, mixed)
// and samples the next token of the rows that ask, on the engine's device, with the
// arithmetic of formats/sampling.h. CpuBatchEngine (cpu_batch_engine.h) runs one
// CpuSession per sequence; a GPU engine runs the rows in one forward pass over a paged
// cache and reports whole pages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "engine/sampling.h"
#include "engine/step_profile.h"
#include "formats/sampling.h"

namespace lowbit::engine {

using SequenceId = std::int64_t;

// How a row's next token is drawn (sampling.h): the row's parameters for this draw, the
// counts of its penalty window, and the log-probabilities wanted.
struct SampleSpec {
  formats::sampling::RowParams params;
  std::span<const TokenCount> penalties;  // sorted by id, each once, counts > 0
  int logprobs = -1;                      // -1: none; n >= 0: the chosen token's and the n most likely
};

// One row of a step: `tokens` are appended to sequence `seq` at its length (a prompt
// chunk, or the one token sampled last); with `sample`, a token is drawn from the
// logits after the last of them.
struct StepRow {
  SequenceId seq = 0;
  std::span<const std::int32_t> tokens;
  bool sample = false;
  SampleSpec sampling;
};

// The most top log-probabilities a row may ask for.
constexpr int kMaxLogprobs = 20;

struct StepOutput {
  std::int32_t token = -1;  // the drawn token; -1 where the row did not sample
  Logprobs logprobs;        // filled when the row asked (SampleSpec::logprobs >= 0)
};

// KV-cache bytes (a paged engine counts whole pages).
struct KvMemory {
  std::size_t used = 0;    // held by the live sequences now
  std::size_t budget = 0;  // what they may hold together
};

// vocab, max_sequence_tokens and kv_bytes_for depend on the configuration only and may
// be called from any thread; the rest from one thread at a time (the scheduler's).
class BatchEngine {
 public:
  virtual ~BatchEngine() = default;

  virtual std::int64_t vocab() const = 0;
  // The most tokens one sequence may hold (the model's context length, or less).
  virtual std::int64_t max_sequence_tokens() const = 0;

  // Starts an empty sequence that will hold at most `max_tokens` tokens. Throws
  // lowbit::Error for an id in use or max_tokens outside 1..max_sequence_tokens().
  virtual void add_sequence(SequenceId seq, std::int64_t max_tokens) = 0;
  // Frees the sequence and its cache. Throws lowbit::Error for an unknown id.
  virtual void free_sequence(SequenceId seq) = 0;
  virtual std::int64_t sequence_length(SequenceId seq) const = 0;  // tokens in its cache
  virtual std::size_t live_sequences() const = 0;

  // One forward pass over all rows (a sequence at most once); out[i] is row i's. Throws
  // lowbit::Error, with no sequence changed, for an unknown sequence, a repeated one, an
  // empty row, a token outside the vocabulary, a row past its sequence's max_tokens, a
  // bad sampling spec, or rows whose caches would exceed the KV budget.
  virtual void step(std::span<const StepRow> rows, std::span<StepOutput> out) = 0;

  // What one sequence of `tokens` tokens holds; what the live ones hold now, and the budget.
  virtual std::size_t kv_bytes_for(std::int64_t tokens) const = 0;
  virtual KvMemory kv_memory() const = 0;

  virtual std::string describe() const = 0;  // one line: device, model, cache policy, budget

  // Per-part timing of the decode-only steps (every row one token; step_profile.h) from
  // now on, for an engine that measures it (the GPU engine); off: free. Switching on
  // clears what was measured. Returns false when asked to switch on and the engine
  // cannot.
  virtual bool set_profiling(bool on) { return !on; }
  // The profiled steps' times, summed, since profiling was switched on.
  virtual StepProfile step_profile() const { return {}; }
};

// The checks every engine makes of a step's rows before anything changes (step's
// contract above, all but the budget): `state` gives a live sequence's length and
// max_tokens and throws lowbit::Error for an unknown one.
struct SequenceState {
  std::int64_t length = 0, max_tokens = 0;
};
void check_step_rows(std::span<const StepRow> rows, std::size_t outputs, std::int64_t vocab,
                     const std::function<SequenceState(SequenceId)>& state);

}  // namespace lowbit::engine

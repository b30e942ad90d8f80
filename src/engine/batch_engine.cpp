#include "engine/batch_engine.h"

#include <set>

#include "lowbit/error.h"

namespace lowbit::engine {

void check_step_rows(std::span<const StepRow> rows, std::size_t outputs, std::int64_t vocab,
                     const std::function<SequenceState(SequenceId)>& state) {
  LOWBIT_CHECK(outputs == rows.size(), "step: ", outputs, " outputs for ", rows.size(), " rows");
  std::set<SequenceId> seen;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const StepRow& row = rows[i];
    const SequenceState s = state(row.seq);
    LOWBIT_CHECK(seen.insert(row.seq).second, "step: row ", i, ": sequence ", row.seq, " appears twice");
    LOWBIT_CHECK(!row.tokens.empty(), "step: row ", i, " (sequence ", row.seq, ") has no tokens");
    const auto n = static_cast<std::int64_t>(row.tokens.size());
    LOWBIT_CHECK(s.length + n <= s.max_tokens, "step: row ", i, ": sequence ", row.seq, " holds ", s.length,
                 " tokens; ", n, " more exceed its max_tokens ", s.max_tokens);
    for (const std::int32_t t : row.tokens) {
      LOWBIT_CHECK(t >= 0 && t < vocab, "step: row ", i, ": token id ", t, " outside the vocabulary (0..", vocab - 1,
                   ")");
    }
    if (row.sample) {
      check_penalties(row.sampling.penalties, vocab);
      LOWBIT_CHECK(row.sampling.logprobs >= -1 && row.sampling.logprobs <= kMaxLogprobs, "step: row ", i,
                   ": logprobs ", row.sampling.logprobs, ", expected -1..", kMaxLogprobs);
    }
  }
}

}  // namespace lowbit::engine

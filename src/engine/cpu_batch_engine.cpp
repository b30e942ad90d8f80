#include "engine/cpu_batch_engine.h"

#include <sstream>

#include "lowbit/error.h"

namespace lowbit::engine {

CpuBatchEngine::CpuBatchEngine(const Model& model, KvCacheOptions cache, std::size_t kv_budget_bytes,
                               std::int64_t max_sequence_tokens)
    : model_(&model),
      cache_(cache),
      shape_{model.config().n_layers, model.config().n_kv_heads, model.config().head_dim},
      budget_(kv_budget_bytes),
      max_sequence_tokens_(max_sequence_tokens > 0 ? max_sequence_tokens : model.config().context_length) {
  LOWBIT_CHECK(kv_budget_bytes > 0, "kv budget: expected > 0 bytes");
  LOWBIT_CHECK(max_sequence_tokens >= 0, "max_sequence_tokens: expected >= 0 (0: the model's context), got ",
               max_sequence_tokens);
  LOWBIT_CHECK(max_sequence_tokens_ > 0, "max_sequence_tokens: the model states no context length; pass one");
  KvCache probe(shape_, cache_, 1);  // validates the options, naming the one at fault
}

CpuSession& CpuBatchEngine::session(SequenceId seq) const {
  const auto it = sequences_.find(seq);
  LOWBIT_CHECK(it != sequences_.end(), "sequence ", seq, ": unknown (not added, or freed)");
  return *it->second;
}

void CpuBatchEngine::add_sequence(SequenceId seq, std::int64_t max_tokens) {
  LOWBIT_CHECK(!sequences_.contains(seq), "sequence ", seq, ": already live");
  LOWBIT_CHECK(max_tokens >= 1 && max_tokens <= max_sequence_tokens_, "sequence ", seq, ": max_tokens ", max_tokens,
               ", expected 1..", max_sequence_tokens_);
  sequences_.emplace(seq, std::make_unique<CpuSession>(*model_, cache_, max_tokens));
}

void CpuBatchEngine::free_sequence(SequenceId seq) {
  LOWBIT_CHECK(sequences_.erase(seq) == 1, "sequence ", seq, ": unknown (not added, or freed)");
}

std::int64_t CpuBatchEngine::sequence_length(SequenceId seq) const { return session(seq).position(); }

std::size_t CpuBatchEngine::kv_bytes_for(std::int64_t tokens) const {
  return KvCache::bytes_at(shape_, cache_, tokens);
}

KvMemory CpuBatchEngine::kv_memory() const {
  KvMemory m;
  m.budget = budget_;
  for (const auto& [id, s] : sequences_) m.used += s->kv_bytes();
  return m;
}

void CpuBatchEngine::step(std::span<const StepRow> rows, std::span<StepOutput> out) {
  // Everything is checked before any sequence changes.
  check_step_rows(rows, out.size(), vocab(), [this](SequenceId id) {
    const CpuSession& s = session(id);
    return SequenceState{s.position(), s.max_tokens()};
  });
  std::size_t planned = kv_memory().used;
  for (const StepRow& row : rows) {
    const std::int64_t length = session(row.seq).position();
    planned += kv_bytes_for(length + static_cast<std::int64_t>(row.tokens.size())) - kv_bytes_for(length);
  }
  LOWBIT_CHECK(planned <= budget_, "step: the rows' KV caches would hold ", planned, " bytes, over the budget of ",
               budget_);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const StepRow& row = rows[i];
    const std::vector<float> logits = session(row.seq).forward(row.tokens, /*all_logits=*/false);
    out[i] = StepOutput{};
    if (!row.sample) continue;
    out[i].token = sample_token(logits, row.sampling.params, row.sampling.penalties);
    if (row.sampling.logprobs >= 0) out[i].logprobs = token_logprobs(logits, out[i].token, row.sampling.logprobs);
  }
}

std::string CpuBatchEngine::describe() const {
  std::ostringstream s;
  s << "CPU reference, kv-cache " << kv_policy_name(cache_.policy) << ", KV budget " << budget_ << " bytes, "
    << max_sequence_tokens_ << " tokens a sequence at most";
  return s.str();
}

}  // namespace lowbit::engine

// The BatchEngine of the CPU reference: one CpuSession per sequence, rows run one after
// the other (each forward pass is parallel inside), tokens drawn by the CPU sampler.
// KV memory is what KvCache::bytes() counts (FP16 parts, codes, scales, mins); the
// sessions' decoded f32 mirrors are scratch and not counted.
#pragma once

#include <cstdint>
#include <map>
#include <memory>

#include "engine/batch_engine.h"
#include "engine/cpu_session.h"
#include "engine/kv_cache.h"
#include "engine/model.h"

namespace lowbit::engine {

class CpuBatchEngine final : public BatchEngine {
 public:
  // model: borrowed, outlives the engine. kv_budget_bytes: what all sequences' caches
  // may hold together (> 0). max_sequence_tokens: the model's context length when 0.
  CpuBatchEngine(const Model& model, KvCacheOptions cache, std::size_t kv_budget_bytes,
                 std::int64_t max_sequence_tokens = 0);

  std::int64_t vocab() const override { return model_->config().vocab; }
  std::int64_t max_sequence_tokens() const override { return max_sequence_tokens_; }
  void add_sequence(SequenceId seq, std::int64_t max_tokens) override;
  void free_sequence(SequenceId seq) override;
  std::int64_t sequence_length(SequenceId seq) const override;
  std::size_t live_sequences() const override { return sequences_.size(); }
  void step(std::span<const StepRow> rows, std::span<StepOutput> out) override;
  std::size_t kv_bytes_for(std::int64_t tokens) const override;
  KvMemory kv_memory() const override;
  std::string describe() const override;

 private:
  CpuSession& session(SequenceId seq) const;

  const Model* model_;
  KvCacheOptions cache_;
  KvShape shape_;
  std::size_t budget_;
  std::int64_t max_sequence_tokens_;
  std::map<SequenceId, std::unique_ptr<CpuSession>> sequences_;
};

}  // namespace lowbit::engine

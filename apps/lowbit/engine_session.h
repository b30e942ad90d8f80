// --device for the engine commands: sessions on the CPU reference or on the GPU
// (lowbit's kernels), made from one loaded model. The GPU copy of the weights is
// made once, when the first GPU session is asked for.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engine/batch_engine.h"
#include "engine/kv_cache.h"
#include "engine/session.h"
#include "engine_setup.h"
#include "options.h"

namespace lowbit::engine {
class GpuModel;
}

namespace lowbit::cli {

// Programmatic dependent launch for the GPU kernels that take it (on by default); off,
// they launch in plain stream order (--no-pdl, to measure what it buys). Set before the
// engine runs; no effect without CUDA.
void set_programmatic_launch(bool on);

class SessionMaker {
 public:
  // device: "cpu", "gpu" or "auto" (the GPU when this build has CUDA, a device is
  // present and the GPU session runs the model; else the CPU reference). Throws
  // lowbit::Error for "gpu" without any of them, naming what is missing.
  SessionMaker(const LoadedModel& model, const std::string& device, bool cuda_graphs = true);
  ~SessionMaker();
  SessionMaker(const SessionMaker&) = delete;
  SessionMaker& operator=(const SessionMaker&) = delete;

  std::unique_ptr<engine::Session> make(const engine::KvCacheOptions& cache, std::int64_t max_tokens);
  // The batch engine of the same device (CpuBatchEngine or GpuBatchEngine, its
  // decode-only steps as CUDA graphs unless cuda_graphs is off) over kv_budget_bytes of
  // KV cache, sequences of max_sequence_tokens at most (0: the model's).
  std::unique_ptr<engine::BatchEngine> make_batch(const engine::KvCacheOptions& cache, std::size_t kv_budget_bytes,
                                                  std::int64_t max_sequence_tokens);
  // The memory a KV cache could take on this maker's device now: the GPU's free memory
  // once the model's weights are on it, or the host's available memory (Linux's
  // MemAvailable: what can be allocated without swapping).
  std::size_t free_memory_bytes();
  bool gpu() const { return gpu_; }
  bool cuda_graphs() const { return graphs_; }  // GPU decode as CUDA graphs (--no-cuda-graphs: off)
  // "GPU (NVIDIA H100 ...)", or the CPU with its weight form, instruction set and threads.
  std::string describe() const;

  // Declares --device (and --no-cuda-graphs, --cpu-weights where given a target) on
  // a command's options.
  static void declare(Options& cli, std::string* device, bool* no_graphs = nullptr,
                      std::string* cpu_weights = nullptr);

 private:
  struct GpuState;
  const engine::GpuModel& gpu_model();
  const LoadedModel* model_;
  bool gpu_ = false, graphs_ = true;
  std::unique_ptr<GpuState> gpu_state_;
};

}  // namespace lowbit::cli

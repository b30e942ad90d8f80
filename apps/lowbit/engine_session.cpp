#include "engine_session.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "cpu/block_dot.h"
#include "cpu/thread_pool.h"
#include "engine/cpu_batch_engine.h"
#include "engine/cpu_session.h"
#include "lowbit/error.h"

#if LOWBIT_WITH_CUDA
#include <cuda_runtime.h>

#include "core/device.h"
#include "engine/gguf/repack.h"
#include "engine/gpu_batch_engine.h"
#include "engine/gpu_model.h"
#include "engine/gpu_session.h"
#include "lowbit/cuda_check.h"
#endif

namespace lowbit::cli {

#if LOWBIT_WITH_CUDA
struct SessionMaker::GpuState {
  std::unique_ptr<engine::GpuModel> model;
  std::string name;
};

namespace {
bool cuda_device_present() {
  int count = 0;
  const bool ok = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
  (void)cudaGetLastError();
  return ok;
}

// What the GPU session cannot run yet ("" when it can run the model): matrices without a
// weight-only form (F16, BF16, F32, the IQ types, ...). llama, mistral and qwen2 (Q/K/V
// biases, NEOX RoPE) run on it.
std::string gpu_gap(const LoadedModel& loaded) {
  for (const engine::GgufTensor& t : loaded.file.tensors()) {
    const bool matrix = t.n_dims == 2 && (t.name != "token_embd.weight" || loaded.model.tied_output());
    if (matrix && !engine::has_weight_only_form(t.type)) {
      return "tensor '" + std::string(t.name) + "' in " + std::string(engine::ggml_type_name(t.type));
    }
  }
  return "";
}
}  // namespace
#else
struct SessionMaker::GpuState {};
#endif

SessionMaker::SessionMaker(const LoadedModel& model, const std::string& device, bool cuda_graphs)
    : model_(&model), graphs_(cuda_graphs) {
  LOWBIT_CHECK(device == "cpu" || device == "gpu" || device == "auto", "--device: '", device,
               "', expected cpu, gpu or auto");
#if LOWBIT_WITH_CUDA
  const bool present = device != "cpu" && cuda_device_present();
  LOWBIT_CHECK(device != "gpu" || present, "--device gpu: no CUDA device is visible");
  // auto runs what the GPU session cannot on the CPU reference.
  const std::string gap = present ? gpu_gap(model) : "";
  LOWBIT_CHECK(device != "gpu" || gap.empty(), "--device gpu: the GPU session does not run ", gap,
               " yet (use --device cpu)");
  gpu_ = present && gap.empty();
#else
  LOWBIT_CHECK(device != "gpu", "--device gpu: this lowbit was built without CUDA (LOWBIT_CUDA=OFF)");
#endif
}

SessionMaker::~SessionMaker() = default;

std::unique_ptr<engine::Session> SessionMaker::make(const engine::KvCacheOptions& cache, std::int64_t max_tokens) {
  const std::int64_t window = model_->model.config().sliding_window;
  LOWBIT_CHECK(window == 0 || max_tokens <= window, "the model attends over a sliding window of ", window,
               " tokens, which lowbit's full attention equals only up to that length: ", max_tokens,
               " tokens exceed it");
#if LOWBIT_WITH_CUDA
  if (gpu_) return std::make_unique<engine::GpuSession>(gpu_model(), cache, max_tokens, graphs_);
#endif
  return std::make_unique<engine::CpuSession>(model_->model, cache, max_tokens);
}

namespace {

// Linux's MemAvailable (/proc/meminfo, kB), else the free pages sysconf reports.
std::size_t host_available_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  for (std::string line; std::getline(meminfo, line);) {
    unsigned long long kb = 0;
    if (std::sscanf(line.c_str(), "MemAvailable: %llu kB", &kb) == 1) return static_cast<std::size_t>(kb) * 1024;
  }
  const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  LOWBIT_CHECK(pages > 0 && page > 0, "the host's available memory: neither /proc/meminfo nor sysconf reports it");
  return static_cast<std::size_t>(pages) * static_cast<std::size_t>(page);
}

}  // namespace

std::size_t SessionMaker::free_memory_bytes() {
#if LOWBIT_WITH_CUDA
  if (gpu_) {
    gpu_model();  // the weights first: what is free after them is what a cache can take
    std::size_t free = 0, total = 0;
    LOWBIT_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    return free;
  }
#endif
  return host_available_bytes();
}

std::unique_ptr<engine::BatchEngine> SessionMaker::make_batch(const engine::KvCacheOptions& cache,
                                                              std::size_t kv_budget_bytes,
                                                              std::int64_t max_sequence_tokens) {
#if LOWBIT_WITH_CUDA
  if (gpu_) {
    return std::make_unique<engine::GpuBatchEngine>(gpu_model(), cache, kv_budget_bytes, max_sequence_tokens, graphs_);
  }
#endif
  return std::make_unique<engine::CpuBatchEngine>(model_->model, cache, kv_budget_bytes, max_sequence_tokens);
}

#if LOWBIT_WITH_CUDA
const engine::GpuModel& SessionMaker::gpu_model() {
  if (!gpu_state_) {
    gpu_state_ = std::make_unique<GpuState>();
    gpu_state_->model = std::make_unique<engine::GpuModel>(engine::GpuModel::from_gguf(model_->file));
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) gpu_state_->name = prop.name;
  }
  return *gpu_state_->model;
}
#endif

void set_programmatic_launch(bool on) {
#if LOWBIT_WITH_CUDA
  core::set_programmatic_launch(on);
#else
  (void)on;
#endif
}

std::string SessionMaker::describe() const {
#if LOWBIT_WITH_CUDA
  if (gpu_) return "GPU" + (gpu_state_ && !gpu_state_->name.empty() ? " (" + gpu_state_->name + ")" : std::string());
#endif
  const std::string threads = std::to_string(cpu::engine_pool().threads()) + " threads";
  if (model_->model.weight_form() == engine::WeightForm::f32) return "CPU, FP32 reference, " + threads;
  return std::string("CPU, the file's quantized blocks (") + cpu::block_matmul_isa() + "), " + threads;
}

void SessionMaker::declare(Options& cli, std::string* device, bool* no_graphs, std::string* cpu_weights) {
  cli.choice("--device", device, {"auto", "cpu", "gpu"},
             "where the forward pass runs: the CPU, the GPU, or auto (the GPU when present; default)");
  if (no_graphs) cli.flag("--no-cuda-graphs", no_graphs, "GPU decode launches kernel by kernel (for comparison)");
  if (cpu_weights) {
    cli.choice("--cpu-weights", cpu_weights, {"blocks", "f32"},
               "CPU weights: the file's quantized blocks (K-quants and Q5 repacked exactly) with 8-bit "
               "activations (default), or every matrix decoded to f32 (the FP32 reference)");
  }
}

}  // namespace lowbit::cli

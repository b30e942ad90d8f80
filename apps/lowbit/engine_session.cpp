#include "engine_session.h"

#include "engine/cpu_session.h"
#include "lowbit/error.h"

#if LOWBIT_WITH_CUDA
#include <cuda_runtime.h>

#include "engine/gpu_model.h"
#include "engine/gpu_session.h"
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
  gpu_ = present;
#else
  LOWBIT_CHECK(device != "gpu", "--device gpu: this lowbit was built without CUDA (LOWBIT_CUDA=OFF)");
#endif
}

SessionMaker::~SessionMaker() = default;

std::unique_ptr<engine::Session> SessionMaker::make(const engine::KvCacheOptions& cache, std::int64_t max_tokens) {
#if LOWBIT_WITH_CUDA
  if (gpu_) {
    if (!gpu_state_) {
      gpu_state_ = std::make_unique<GpuState>();
      gpu_state_->model = std::make_unique<engine::GpuModel>(engine::GpuModel::from_gguf(model_->file));
      cudaDeviceProp prop{};
      if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) gpu_state_->name = prop.name;
    }
    return std::make_unique<engine::GpuSession>(*gpu_state_->model, cache, max_tokens, graphs_);
  }
#endif
  return std::make_unique<engine::CpuSession>(model_->model, cache, max_tokens);
}

std::string SessionMaker::describe() const {
#if LOWBIT_WITH_CUDA
  if (gpu_) return "GPU" + (gpu_state_ && !gpu_state_->name.empty() ? " (" + gpu_state_->name + ")" : std::string());
#endif
  return "CPU reference";
}

void SessionMaker::declare(Options& cli, std::string* device, bool* no_graphs) {
  cli.choice("--device", device, {"auto", "cpu", "gpu"},
             "where the forward pass runs: the CPU reference, the GPU, or auto (the GPU when present; default)");
  if (no_graphs) cli.flag("--no-cuda-graphs", no_graphs, "GPU decode launches kernel by kernel (for comparison)");
}

}  // namespace lowbit::cli

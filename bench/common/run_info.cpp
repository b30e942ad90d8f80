#include "run_info.h"

#include "build_info.h"
#include "json.h"

#include <omp.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>

#if LOWBIT_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace lowbit::bench {
namespace {

std::string command_output(const char* command) {
  std::string out;
  if (FILE* pipe = popen(command, "r")) {
    std::array<char, 256> buffer{};
    while (fgets(buffer.data(), buffer.size(), pipe)) out += buffer.data();
    pclose(pipe);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

std::string cpu_model() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      return colon == std::string::npos ? line : line.substr(colon + 2);
    }
  }
  return "unknown";
}

}  // namespace

bool gpu_available() {
#if LOWBIT_WITH_CUDA
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
#else
  return false;
#endif
}

RunInfo collect_run_info() {
  RunInfo info;
  // The commit this binary was built from (the working directory's checkout may be
  // another, or a copy whose HEAD is stale), unless $LOWBIT_COMMIT names one.
  if (const char* commit = std::getenv("LOWBIT_COMMIT"); commit && *commit) {
    info.commit = commit;
  } else {
    info.commit = LOWBIT_GIT_COMMIT;
  }
  std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  info.date = date;
  info.host_cpu = cpu_model();
  info.host_threads = omp_get_max_threads();
  info.gpu = "none";
#if LOWBIT_WITH_CUDA
  if (gpu_available()) {
    int device = 0;
    cudaDeviceProp prop{};
    if (cudaGetDevice(&device) == cudaSuccess && cudaGetDeviceProperties(&prop, device) == cudaSuccess) {
      info.gpu = prop.name;
      info.gpu_sms = prop.multiProcessorCount;
      info.gpu_l2_mb = prop.l2CacheSize / 1e6;
    }
    int runtime = 0;
    cudaRuntimeGetVersion(&runtime);
    info.cuda_runtime = std::to_string(runtime / 1000) + "." + std::to_string((runtime % 1000) / 10);
    info.driver = command_output("nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1");
    if (info.driver.empty()) {
      int version = 0;
      cudaDriverGetVersion(&version);
      info.driver = "cuda " + std::to_string(version / 1000) + "." + std::to_string((version % 1000) / 10);
    }
  }
#endif
  return info;
}

Json run_info_json(const char* benchmark, const RunInfo& info) {
  Json root = Json::object();
  root.set("benchmark", benchmark);
  root.set("commit", info.commit);
  root.set("date", info.date);
  root.set("gpu", info.gpu);
  root.set("driver", info.driver);
  root.set("cuda_runtime", info.cuda_runtime);
  root.set("host_cpu", info.host_cpu);
  root.set("host_threads", info.host_threads);
  return root;
}

}  // namespace lowbit::bench

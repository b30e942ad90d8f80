// Where a benchmark ran: commit, date, host and GPU, for the top of every result file.
#pragma once

#include <string>

namespace lowbit::bench {

struct RunInfo {
  std::string commit;  // $LOWBIT_COMMIT, else the binary's build commit (cmake/build_info.cmake)
  std::string date;    // UTC, ISO 8601
  std::string host_cpu;
  int host_threads = 0;
  std::string gpu;     // "none" without a device
  std::string driver;  // e.g. "580.159.04"
  std::string cuda_runtime;
  int gpu_sms = 0;
  double gpu_l2_mb = 0;
};

RunInfo collect_run_info();  // no GPU parts when built without CUDA or none is present

// The top of every result file: {"benchmark": name, "commit", "date", "gpu", "driver",
// "cuda_runtime", "host_cpu", "host_threads"}; callers add their own fields.
class Json;
Json run_info_json(const char* benchmark, const RunInfo& info);
bool gpu_available();

}  // namespace lowbit::bench

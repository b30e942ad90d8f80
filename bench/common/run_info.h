// Where a benchmark ran: commit, date, host and GPU, for the top of every result file.
#pragma once

#include <string>

namespace lowbit::bench {

struct RunInfo {
  std::string commit;  // $LOWBIT_COMMIT, else `git rev-parse HEAD`, else "unknown"
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
bool gpu_available();

}  // namespace lowbit::bench

// Timing: medians of repeated runs. GPU work is timed with CUDA events around
// back-to-back launches (enough of them that one sample lasts >= ~1 ms, so event
// resolution, the host's first launch and launch gaps do not dominate small cases); host work with a
// steady clock.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

#include "lowbit/tensor.h"

namespace lowbit::bench {

inline double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const std::size_t mid = values.size() / 2;
  return values.size() % 2 ? values[mid] : 0.5 * (values[mid - 1] + values[mid]);
}

// Median milliseconds of fn() on the host, after `warmup` untimed runs.
inline double host_median_ms(const std::function<void()>& fn, int samples, int warmup = 1) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> times;
  for (int i = 0; i < samples; ++i) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  return median(times);
}

#if LOWBIT_WITH_CUDA
// Median per-launch milliseconds of launch(i) on `stream`, i counting up across all
// launches (use it to rotate among input copies). Warm-up first.
double gpu_median_ms(const std::function<void(int)>& launch, cuda_stream_t stream, int samples = 15,
                     double min_sample_ms = 1.0);
// The per-launch milliseconds of each sample (for min / median / max), as gpu_median_ms;
// idle_ms > 0: the host sleeps that long before each sample (the GPU idle in between).
std::vector<double> gpu_sample_ms(const std::function<void(int)>& launch, cuda_stream_t stream, int samples = 15,
                                  double min_sample_ms = 1.0, double idle_ms = 0.0);

// Device-to-device copy bandwidth (bytes read + written per second / 1e9) of a
// `bytes`-sized cudaMemcpyAsync: the memory-bound ceiling of this run.
double measure_copy_gbps(std::size_t bytes, cuda_stream_t stream);

// Median milliseconds of one launch that only reads `bytes` from DRAM (16-byte loads, 8 in
// flight a thread, 4 blocks of 256 threads an SM; copies rotated past the L2): the best a
// kernel that streams those bytes once in one launch can do, its ramp and tail included.
// The copy ceiling above is a 1 GiB transfer's; a launch of 10-40 MB reads at 40-75% of
// it (bench/notes/weight_only.md, "What a pure read ... takes").
double measure_read_ms(std::size_t bytes, cuda_stream_t stream);
#endif

}  // namespace lowbit::bench

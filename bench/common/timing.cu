#include <cmath>

#include "core/device_buffer.h"
#include "lowbit/cuda_check.h"
#include "timing.h"

namespace lowbit::bench {
namespace {

class EventPair {
 public:
  EventPair() {
    LOWBIT_CUDA_CHECK(cudaEventCreate(&start_));
    LOWBIT_CUDA_CHECK(cudaEventCreate(&stop_));
  }
  ~EventPair() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;
  cudaEvent_t start_{}, stop_{};
};

}  // namespace

double gpu_median_ms(const std::function<void(int)>& launch, cuda_stream_t stream, int samples,
                     double min_sample_ms) {
  return median(gpu_sample_ms(launch, stream, samples, min_sample_ms));
}

std::vector<double> gpu_sample_ms(const std::function<void(int)>& launch, cuda_stream_t stream, int samples,
                                  double min_sample_ms) {
  EventPair events;
  int counter = 0;
  auto timed = [&](int reps) {
    LOWBIT_CUDA_CHECK(cudaEventRecord(events.start_, stream));
    for (int i = 0; i < reps; ++i) launch(counter++);
    LOWBIT_CUDA_CHECK(cudaEventRecord(events.stop_, stream));
    LOWBIT_CUDA_CHECK(cudaEventSynchronize(events.stop_));
    float ms = 0;
    LOWBIT_CUDA_CHECK(cudaEventElapsedTime(&ms, events.start_, events.stop_));
    return static_cast<double>(ms) / reps;
  };
  timed(1);  // warm-up: module load, first-touch
  const double estimate = timed(3);
  const int reps = static_cast<int>(std::clamp(std::ceil(min_sample_ms / std::max(estimate, 1e-4)), 1.0, 2000.0));
  std::vector<double> times;
  for (int s = 0; s < samples; ++s) times.push_back(timed(reps));
  return times;
}

double measure_copy_gbps(std::size_t bytes, cuda_stream_t stream) {
  core::DeviceBuffer src(bytes), dst(bytes);
  LOWBIT_CUDA_CHECK(cudaMemsetAsync(src.data(), 0x3c, bytes, stream));
  const double ms = gpu_median_ms(
      [&](int) { LOWBIT_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), bytes, cudaMemcpyDeviceToDevice, stream)); },
      stream, 15, 0.0);
  return 2.0 * static_cast<double>(bytes) / (ms * 1e6);
}

}  // namespace lowbit::bench

#include <chrono>
#include <cmath>
#include <cstdint>
#include <thread>

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

// Reads n 16-byte vectors, 8 loads in flight a thread; the XOR only keeps the loads alive.
__global__ void read_kernel(const uint4* __restrict__ src, std::int64_t n, unsigned* sink) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  unsigned acc = 0;
  for (; i + 7 * stride < n; i += 8 * stride) {
    uint4 v[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) v[u] = __ldg(src + i + u * stride);
#pragma unroll
    for (int u = 0; u < 8; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n; i += stride) {
    const uint4 v = __ldg(src + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;  // never in practice; the compiler cannot know
}

}  // namespace

double gpu_median_ms(const std::function<void(int)>& launch, cuda_stream_t stream, int samples,
                     double min_sample_ms) {
  return median(gpu_sample_ms(launch, stream, samples, min_sample_ms));
}

std::vector<double> gpu_sample_ms(const std::function<void(int)>& launch, cuda_stream_t stream, int samples,
                                  double min_sample_ms, double idle_ms) {
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
  for (int s = 0; s < samples; ++s) {
    if (idle_ms > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(idle_ms));
    times.push_back(timed(reps));
  }
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

double measure_read_ms(std::size_t bytes, cuda_stream_t stream) {
  int device = 0, l2 = 0, sms = 0;
  LOWBIT_CUDA_CHECK(cudaGetDevice(&device));
  LOWBIT_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
  LOWBIT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const std::size_t vecs = std::max<std::size_t>((bytes + 15) / 16, 1);
  // Enough copies that a buffer is out of L2 when its turn comes again.
  const auto copies = static_cast<std::size_t>(std::max<std::size_t>(4, 2 * static_cast<std::size_t>(l2) / (16 * vecs) + 2));
  core::DeviceBuffer buffer(copies * vecs * 16), sink(sizeof(unsigned));
  LOWBIT_CUDA_CHECK(cudaMemsetAsync(buffer.data(), 0x5a, buffer.bytes(), stream));
  const auto* base = static_cast<const uint4*>(buffer.data());
  return gpu_median_ms(
      [&](int i) {
        read_kernel<<<4 * sms, 256, 0, stream>>>(base + static_cast<std::size_t>(i) % copies * vecs,
                                                 static_cast<std::int64_t>(vecs), static_cast<unsigned*>(sink.data()));
        LOWBIT_CUDA_CHECK(cudaGetLastError());
      },
      stream, 15);
}

}  // namespace lowbit::bench

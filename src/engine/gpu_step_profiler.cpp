#include "engine/gpu_step_profiler.h"

#include "lowbit/cuda_check.h"
#include "lowbit/error.h"

namespace lowbit::engine {

GpuStepProfiler::GpuStepProfiler(cudaStream_t stream, std::size_t max_marks) : stream_(stream) {
  events_.reserve(max_marks + 1);
  try {
    for (std::size_t i = 0; i <= max_marks; ++i) {
      cudaEvent_t e = nullptr;
      LOWBIT_CUDA_CHECK(cudaEventCreate(&e));
      events_.push_back(e);
    }
  } catch (...) {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
    throw;
  }
}

GpuStepProfiler::~GpuStepProfiler() {
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
}

void GpuStepProfiler::begin(bool capturing) {
  marks_.clear();
  flags_ = capturing ? cudaEventRecordExternal : cudaEventRecordDefault;
}

void GpuStepProfiler::mark(StepPart part) {
  LOWBIT_CHECK(marks_.size() + 1 < events_.size(), "step profiler: more than ", events_.size() - 1,
               " parts in one step");
  LOWBIT_CUDA_CHECK(cudaEventRecordWithFlags(events_[marks_.size()], stream_, flags_));
  marks_.push_back(part);
}

const std::vector<StepPart>& GpuStepProfiler::close() {
  LOWBIT_CUDA_CHECK(cudaEventRecordWithFlags(events_[marks_.size()], stream_, flags_));
  return marks_;
}

void GpuStepProfiler::replayed(const std::vector<StepPart>& marks) { marks_ = marks; }

void GpuStepProfiler::collect(StepProfile& into) const {
  if (marks_.empty()) return;
  for (std::size_t i = 0; i < marks_.size(); ++i) {
    float ms = 0;
    LOWBIT_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[i], events_[i + 1]));
    into[marks_[i]] += ms;
  }
  float span = 0;
  LOWBIT_CUDA_CHECK(cudaEventElapsedTime(&span, events_.front(), events_[marks_.size()]));
  into.device_ms += span;
}

}  // namespace lowbit::engine

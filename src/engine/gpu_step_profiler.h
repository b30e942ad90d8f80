// The device side of a step's profile (step_profile.h): a CUDA event recorded as each
// part's work is queued, one more after the last; a part lasts from its event to the
// next. Inside a stream capture the events become event-record nodes of the graph
// (cudaEventRecordExternal), which every replay records again, and the graph keeps
// the marks it was captured with.
//
// What profiling changes: an event between two kernels ends the programmatic-launch
// overlap at that boundary (the next kernel no longer starts while its predecessor
// drains), and each event costs the host a call when launched kernel by kernel. A
// profiled step is slower than an unprofiled one; compare its wall time with an
// unprofiled run's, and read the parts as shares.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

#include "engine/step_profile.h"

namespace lowbit::engine {

class GpuStepProfiler {
 public:
  // Events for up to max_marks marks a step (created here, not during a capture).
  GpuStepProfiler(cudaStream_t stream, std::size_t max_marks);
  ~GpuStepProfiler();
  GpuStepProfiler(const GpuStepProfiler&) = delete;
  GpuStepProfiler& operator=(const GpuStepProfiler&) = delete;

  // Starts a step's marks; capturing: the stream is being captured into a graph.
  void begin(bool capturing);
  // The part whose work is queued next. Throws lowbit::Error past max_marks.
  void mark(StepPart part);
  // Records the closing event; returns the step's marks (for a graph to keep).
  const std::vector<StepPart>& close();
  // A launch of a graph captured with these marks recorded the step's events.
  void replayed(const std::vector<StepPart>& marks);
  // Once the step's work is done: each part's time between its event and the next
  // added to `into`, and the span, first event to last, to into.device_ms.
  void collect(StepProfile& into) const;

 private:
  cudaStream_t stream_;
  std::vector<cudaEvent_t> events_;
  std::vector<StepPart> marks_;
  unsigned flags_ = cudaEventRecordDefault;
};

}  // namespace lowbit::engine

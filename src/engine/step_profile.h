// Where a batch engine's decode steps spend their time (`lowbit bench batch --profile`):
// the device's parts of the forward pass, timed by events at the boundaries between
// them, and the host's phases of step(), timed by the host's clock. The engine sums
// them over the steps it profiles; this header only names the parts and prints them.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace lowbit::engine {

// Device parts in the order a pass runs them (norm .. down once a layer, norm twice),
// then the host's phases of one step.
enum class StepPart : int {
  embed,      // embedding lookup
  norm,       // add + RMSNorm, before the attention and before the FFN
  qkv,        // QKV GEMM
  attention,  // RoPE + KV append + attention (and zeroing the attention's counters)
  o_proj,     // O GEMM
  gate_up,    // gate | up GEMM
  swiglu,     // silu(gate) * up
  down,       // down GEMM
  head,       // final norm + output head
  sample,     // the device sampler
  pages,      // host: page growth and the page-table upload
  inputs,     // host: the step's plan and its inputs' upload
  capture,    // host: capturing and instantiating a CUDA graph (a new bucket or length)
  launch,     // host: queuing the work (kernel launches, or one graph launch)
  sync,       // host: waiting for the device (outputs copied back)
  status,     // host: reading the paged kernels' fault word
  other,      // host: the rest (row checks, outputs, log-probabilities)
};
constexpr std::size_t kStepParts = static_cast<std::size_t>(StepPart::other) + 1;
constexpr bool is_device_part(StepPart p) { return p <= StepPart::sample; }
const char* step_part_name(StepPart p);  // for people: "QKV GEMM"
const char* step_part_key(StepPart p);   // for JSON: "qkv"

struct StepProfile {
  std::int64_t steps = 0;
  std::array<double, kStepParts> ms{};  // each part's time, summed over the steps
  // First to last event of each step (= the device parts' sum), and step()'s own
  // time, summed over the steps. The host parts sum to the wall time.
  double device_ms = 0, wall_ms = 0;

  double& operator[](StepPart p) { return ms[static_cast<std::size_t>(p)]; }
  double operator[](StepPart p) const { return ms[static_cast<std::size_t>(p)]; }
  StepProfile& operator+=(const StepProfile& o);
};

// A Markdown table: each part's mean ms a step and its share (device parts of the
// device time, host parts of the wall time), then the device time, the wall time and
// their difference (the host's time with the device idle). Empty profile: one line
// saying so.
std::string format_step_profile(const StepProfile& p);

}  // namespace lowbit::engine

#include "engine/step_profile.h"

#include <cstdio>

namespace lowbit::engine {

namespace {

struct PartNames {
  const char* key;    // JSON
  const char* label;  // the table
};

PartNames names(StepPart p) {
  switch (p) {
    case StepPart::embed: return {"embed", "embedding"};
    case StepPart::norm: return {"norm", "add + RMSNorm (2 a layer)"};
    case StepPart::qkv: return {"qkv", "QKV GEMM"};
    case StepPart::attention: return {"attention", "RoPE + KV append + attention"};
    case StepPart::o_proj: return {"o_proj", "O GEMM"};
    case StepPart::gate_up: return {"gate_up", "gate|up GEMM"};
    case StepPart::swiglu: return {"swiglu", "SwiGLU"};
    case StepPart::down: return {"down", "down GEMM"};
    case StepPart::head: return {"head", "final norm + output head"};
    case StepPart::sample: return {"sample", "sampling"};
    case StepPart::pages: return {"host_pages", "host: page growth, table upload"};
    case StepPart::inputs: return {"host_inputs", "host: plan, inputs upload"};
    case StepPart::capture: return {"host_capture", "host: graph capture"};
    case StepPart::launch: return {"host_launch", "host: launches"};
    case StepPart::sync: return {"host_sync", "host: wait for the device"};
    case StepPart::status: return {"host_status", "host: status check"};
    case StepPart::other: return {"host_other", "host: the rest"};
  }
  return {"?", "?"};
}

}  // namespace

const char* step_part_name(StepPart p) { return names(p).label; }
const char* step_part_key(StepPart p) { return names(p).key; }

StepProfile& StepProfile::operator+=(const StepProfile& o) {
  steps += o.steps;
  for (std::size_t i = 0; i < kStepParts; ++i) ms[i] += o.ms[i];
  device_ms += o.device_ms;
  wall_ms += o.wall_ms;
  return *this;
}

std::string format_step_profile(const StepProfile& p) {
  if (p.steps == 0) return "no decode step was profiled\n";
  const double n = static_cast<double>(p.steps);
  std::string out = "| part | ms / step | share |\n|---|---:|---:|\n";
  auto line = [&](const char* name, double ms, double of, const char* whole) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "| %s | %.4f | %.1f%% of %s |\n", name, ms / n, of > 0 ? 100.0 * ms / of : 0.0,
                  whole);
    out += buf;
  };
  for (std::size_t i = 0; i < kStepParts; ++i) {
    const auto part = static_cast<StepPart>(i);
    if (is_device_part(part)) line(step_part_name(part), p.ms[i], p.device_ms, "device");
  }
  line("**device, first to last event**", p.device_ms, p.wall_ms, "wall");
  for (std::size_t i = 0; i < kStepParts; ++i) {
    const auto part = static_cast<StepPart>(i);
    if (!is_device_part(part)) line(step_part_name(part), p.ms[i], p.wall_ms, "wall");
  }
  line("**wall, step()**", p.wall_ms, p.wall_ms, "wall");
  line("**wall - device: the host alone**", p.wall_ms - p.device_ms, p.wall_ms, "wall");
  char steps[64];
  std::snprintf(steps, sizeof steps, "(%lld decode steps)\n", static_cast<long long>(p.steps));
  return out + steps;
}

}  // namespace lowbit::engine

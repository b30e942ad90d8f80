// GET /metrics: the scheduler's gauges, counters and engine step times in Prometheus'
// text exposition format (version 0.0.4), as llama-server and vLLM expose theirs.
#pragma once

#include <cstdint>
#include <string>

#include "engine/scheduler.h"

namespace lowbit::serve {

std::string prometheus_metrics(const engine::SchedulerStats& stats, std::int64_t streams);

// The step-time totals of such a text (`bench serve` takes them before and after a level).
struct StepTotals {
  bool present = false;  // the text has lowbit_step_seconds (another server's may not)
  double decode_steps = 0, decode_seconds = 0, prompt_steps = 0, prompt_seconds = 0;
};
StepTotals parse_step_totals(const std::string& metrics_text);

}  // namespace lowbit::serve

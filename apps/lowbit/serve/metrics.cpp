#include "serve/metrics.h"

#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace lowbit::serve {
namespace {

std::string number(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", v);
  return text;
}

void metric(std::string& out, const char* name, const char* type, const char* help, double value) {
  out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " " +
         number(value) + "\n";
}

void step_histogram(std::string& out, const char* kind, const engine::StepTimes& t) {
  const std::string labels = std::string("{kind=\"") + kind + "\"";
  for (std::size_t i = 0; i < t.kBoundsSeconds.size(); ++i) {
    out += "lowbit_step_seconds_bucket" + labels + ",le=\"" + number(t.kBoundsSeconds[i]) + "\"} " +
           std::to_string(t.at_most[i]) + "\n";
  }
  out += "lowbit_step_seconds_bucket" + labels + ",le=\"+Inf\"} " + std::to_string(t.count) + "\n";
  out += "lowbit_step_seconds_sum" + labels + "} " + number(t.sum_seconds) + "\n";
  out += "lowbit_step_seconds_count" + labels + "} " + std::to_string(t.count) + "\n";
}

}  // namespace

std::string prometheus_metrics(const engine::SchedulerStats& s, std::int64_t streams) {
  std::string out;
  const auto d = [](auto v) { return static_cast<double>(v); };
  metric(out, "lowbit_requests_running", "gauge", "Requests whose sequences are in the engine.", d(s.running));
  metric(out, "lowbit_requests_queued", "gauge", "Requests waiting for a slot (preempted ones included).",
         d(s.queued));
  metric(out, "lowbit_sequences", "gauge", "Sequences the engine holds.", d(s.live_sequences));
  metric(out, "lowbit_streams", "gauge", "Streaming responses open.", d(streams));
  metric(out, "lowbit_kv_used_bytes", "gauge", "KV-cache bytes in use.", d(s.kv.used));
  metric(out, "lowbit_kv_budget_bytes", "gauge", "KV-cache bytes the pool may use.", d(s.kv.budget));
  metric(out, "lowbit_steps_total", "counter", "Engine steps run.", d(s.steps));
  metric(out, "lowbit_preemptions_total", "counter", "Sequences preempted to free KV memory.", d(s.preemptions));
  metric(out, "lowbit_requests_finished_total", "counter", "Requests finished (cancelled and failed included).",
         d(s.finished));
  metric(out, "lowbit_requests_cancelled_total", "counter", "Requests cancelled.", d(s.cancelled));
  metric(out, "lowbit_requests_failed_total", "counter", "Requests failed.", d(s.failed));
  metric(out, "lowbit_prompt_tokens_total", "counter", "Prompt tokens appended.", d(s.prompt_tokens));
  metric(out, "lowbit_generated_tokens_total", "counter", "Tokens generated.", d(s.generated_tokens));
  out += "# HELP lowbit_step_seconds Engine step time; kind: decode rows only, or with prompt tokens.\n"
         "# TYPE lowbit_step_seconds histogram\n";
  step_histogram(out, "decode", s.decode_steps);
  step_histogram(out, "prompt", s.prompt_steps);
  return out;
}

StepTotals parse_step_totals(const std::string& text) {
  StepTotals t;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const std::size_t space = line.rfind(' ');
    if (line.empty() || line[0] == '#' || space == std::string::npos) continue;
    const std::string key = line.substr(0, space);
    const double value = std::strtod(line.c_str() + space + 1, nullptr);
    double* slot = key == "lowbit_step_seconds_count{kind=\"decode\"}"  ? &t.decode_steps
                   : key == "lowbit_step_seconds_sum{kind=\"decode\"}"  ? &t.decode_seconds
                   : key == "lowbit_step_seconds_count{kind=\"prompt\"}" ? &t.prompt_steps
                   : key == "lowbit_step_seconds_sum{kind=\"prompt\"}"   ? &t.prompt_seconds
                                                                          : nullptr;
    if (slot != nullptr) *slot = value, t.present = true;
  }
  return t;
}

}  // namespace lowbit::serve

// GET /metrics' text: Prometheus' exposition format (a HELP and TYPE line before each
// metric, cumulative buckets ending in +Inf equal to the count) with the scheduler's
// figures as given.
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "serve/metrics.h"

namespace lowbit::test {
namespace {

bool has_line(const std::string& text, const std::string& line) {
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) {
    if (l == line) return true;
  }
  return false;
}

TEST(ServeMetrics, GaugesCountersAndStepHistograms) {
  engine::SchedulerStats s;
  s.running = 3;
  s.queued = 2;
  s.kv.used = 1536;
  s.kv.budget = 1 << 20;
  s.steps = 7;
  s.generated_tokens = 42;
  s.decode_steps.add(0.004);
  s.decode_steps.add(0.03);
  s.prompt_steps.add(0.25);
  const std::string text = serve::prometheus_metrics(s, 5);
  EXPECT_TRUE(has_line(text, "# TYPE lowbit_requests_running gauge"));
  EXPECT_TRUE(has_line(text, "lowbit_requests_running 3"));
  EXPECT_TRUE(has_line(text, "lowbit_requests_queued 2"));
  EXPECT_TRUE(has_line(text, "lowbit_streams 5"));
  EXPECT_TRUE(has_line(text, "lowbit_kv_used_bytes 1536"));
  EXPECT_TRUE(has_line(text, "lowbit_kv_budget_bytes 1048576"));
  EXPECT_TRUE(has_line(text, "# TYPE lowbit_steps_total counter"));
  EXPECT_TRUE(has_line(text, "lowbit_steps_total 7"));
  EXPECT_TRUE(has_line(text, "lowbit_generated_tokens_total 42"));
  EXPECT_TRUE(has_line(text, "# TYPE lowbit_step_seconds histogram"));
  EXPECT_TRUE(has_line(text, "lowbit_step_seconds_bucket{kind=\"decode\",le=\"0.002\"} 0"));
  EXPECT_TRUE(has_line(text, "lowbit_step_seconds_bucket{kind=\"decode\",le=\"0.005\"} 1"));
  EXPECT_TRUE(has_line(text, "lowbit_step_seconds_bucket{kind=\"decode\",le=\"0.05\"} 2"));
  EXPECT_TRUE(has_line(text, "lowbit_step_seconds_bucket{kind=\"decode\",le=\"+Inf\"} 2"));
  EXPECT_TRUE(has_line(text, "lowbit_step_seconds_sum{kind=\"decode\"} 0.034"));
  EXPECT_TRUE(has_line(text, "lowbit_step_seconds_count{kind=\"decode\"} 2"));
  EXPECT_TRUE(has_line(text, "lowbit_step_seconds_bucket{kind=\"prompt\",le=\"0.2\"} 0"));
  EXPECT_TRUE(has_line(text, "lowbit_step_seconds_bucket{kind=\"prompt\",le=\"0.5\"} 1"));
  EXPECT_TRUE(has_line(text, "lowbit_step_seconds_count{kind=\"prompt\"} 1"));
  EXPECT_EQ(text.back(), '\n');
}

TEST(ServeMetrics, StepTotalsReadBackFromTheText) {
  engine::SchedulerStats s;
  s.decode_steps.add(0.004);
  s.decode_steps.add(0.03);
  s.prompt_steps.add(0.25);
  const serve::StepTotals t = serve::parse_step_totals(serve::prometheus_metrics(s, 0));
  EXPECT_TRUE(t.present);
  EXPECT_EQ(t.decode_steps, 2.0);
  EXPECT_DOUBLE_EQ(t.decode_seconds, 0.034);
  EXPECT_EQ(t.prompt_steps, 1.0);
  EXPECT_DOUBLE_EQ(t.prompt_seconds, 0.25);
  EXPECT_FALSE(serve::parse_step_totals("# another server\nrequests_total 3\n").present);
  EXPECT_FALSE(serve::parse_step_totals("").present);
}

}  // namespace
}  // namespace lowbit::test

// Markdown tables and the JSON file of the KV benchmark.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "bench/common/json.h"
#include "bench/common/run_info.h"
#include "bench/kvquant/kvquant_bench.h"

namespace lowbit::bench {

void print_legend(std::ostream& out);  // what each column measures
void print_case_table(std::ostream& out, const KvCase& kv_case, const std::vector<KvRow>& rows);
void print_summary(std::ostream& out, const std::vector<KvRow>& rows, bool gpu);
Json results_json(const RunInfo& info, const std::vector<KvRow>& rows, double copy_gbps, double host_copy_gbps,
                  std::int64_t max_elements, const std::vector<std::string>& skipped);

}  // namespace lowbit::bench

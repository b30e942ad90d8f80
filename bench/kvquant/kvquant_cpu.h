// CPU side of the KV benchmark: the seed's baseline and lowbit's fast CPU path, on
// per-channel INT8 of FP32 (the seed's configuration). Their outputs are the
// reference that every GPU variant is compared with.
#pragma once

#include <cstdint>
#include <vector>

#include "bench/kvquant/kvquant_bench.h"

namespace lowbit::bench {

struct CpuReference {
  std::vector<float> scales;
  std::vector<std::int8_t> codes;
  std::vector<float> dequantized;
  double baseline_total_ms = 0;  // baseline quant + dequant: the denominator of every speed-up
};

// Appends the cpu_baseline and cpu_fast rows for x (rows x cols fp32) and returns the
// reference outputs.
CpuReference run_cpu_rows(const KvCase& kv_case, const float* x, const float* query, double host_copy_gbps,
                          std::vector<KvRow>& rows_out);

double measure_host_copy_gbps(std::size_t bytes);

}  // namespace lowbit::bench

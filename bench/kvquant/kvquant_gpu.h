// GPU side of the KV benchmark.
#pragma once

#include <vector>

#include "bench/kvquant/kvquant_cpu.h"

namespace lowbit::bench {

struct GpuCaseInput {
  const KvCase* kv_case;
  const float* x;      // rows x cols fp32 master input
  const float* query;  // cols
  const CpuReference* reference;
  double copy_gbps;
};

// The seed's four kernels and the production path, per-channel INT8 of FP32, each
// timed and checked against the CPU reference.
void run_gpu_seed_rows(const GpuCaseInput& input, std::vector<KvRow>& rows_out);

// The production path over dtypes x granularities x schemes.
void run_gpu_matrix_rows(const GpuCaseInput& input, std::vector<KvRow>& rows_out);

double measure_gpu_copy_gbps();

}  // namespace lowbit::bench

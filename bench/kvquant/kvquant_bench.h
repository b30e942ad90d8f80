// `lowbit bench kvquant`: the KV-cache quantization benchmark (a CPU baseline and four
// GPU kernels of increasing sophistication over ten T x D cases), extended
// with lowbit's production path, other granularities, INT4 and FP16/BF16 inputs.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bench/kvquant/cases.h"
#include "lowbit/quant.h"

namespace lowbit::bench {

struct KvBenchOptions {
  std::string json_path;                // --json FILE
  std::int64_t max_elements = -1;       // --max-elements: skip larger cases (-1: 2^25 without a GPU)
  bool cpu_only = false;                // --cpu-only
  bool matrix = true;                   // production over dtypes x granularities x schemes (GPU)
  std::int64_t matrix_min_elements = 1LL << 24;  // ... on cases at least this large
  std::vector<std::string> only_cases;  // --case NAME (repeatable)
  std::uint64_t seed = 20261122;
};

constexpr double kNotMeasured = NAN;

// One (case, configuration, variant) measurement. Times are medians in ms.
struct KvRow {
  std::string case_name;
  std::int64_t rows = 0, cols = 0;
  std::string device;  // "cpu" | "gpu"
  DType dtype = DType::f32;
  QuantSpec spec;
  std::string variant;
  double scale_ms = kNotMeasured;        // scale pass alone
  double quant_ms = kNotMeasured;        // codes from given scales
  double quant_fused_ms = kNotMeasured;  // scales + codes, the whole quantize()
  double dequant_ms = kNotMeasured;
  double quant_bytes = 0, dequant_bytes = 0;  // each input read once, each output written once
  double copy_gbps = kNotMeasured;            // the ceiling, measured in the same run
  double speedup_vs_cpu = kNotMeasured;       // cpu_baseline (quant + dequant) / this (quant + dequant)
  double rel_l2 = kNotMeasured, max_abs = kNotMeasured, attn_surrogate = kNotMeasured;
  std::optional<bool> codes_exact;    // codes (and scales) equal the CPU reference bit for bit
  std::optional<bool> dequant_exact;  // dequantized values equal the CPU reference bit for bit

  double total_ms() const { return quant_ms + dequant_ms; }
  double quant_gbps() const { return quant_bytes / (quant_ms * 1e6); }
  double dequant_gbps() const { return dequant_bytes / (dequant_ms * 1e6); }
};

// Bytes of the quantize and dequantize of one rows x cols tensor.
double quant_bytes(const QuantSpec& spec, DType dtype, std::int64_t rows, std::int64_t cols);
double dequant_bytes(const QuantSpec& spec, DType dtype, std::int64_t rows, std::int64_t cols);
std::string config_label(DType dtype, const QuantSpec& spec);  // "f32 int8 channel", "bf16 int4 group128"

int run_kvquant_bench(const KvBenchOptions& options);

}  // namespace lowbit::bench

// `lowbit bench gemm`: the quantized GEMMs of seeds 001 and 003 against their peers
// (cuBLASLt INT8, cuBLAS FP16/BF16) measured in the same run.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace lowbit::bench {

struct GemmBenchOptions {
  std::string json_path;        // --json FILE
  bool quick = false;           // --quick: the small cases only
  bool cpu_only = false;        // --cpu-only
  std::vector<std::string> only_sections;  // --section NAME (repeatable)
  std::int64_t max_m = 0;       // --max-m M: weight-only sections, M <= this only (0: all)
  std::int64_t min_m = 0;       // --min-m M: weight-only sections, M >= this only
  std::string shape;            // --shape NxK: weight-only sections, this weight shape only
};

// One measured configuration. Times are medians in ms; NaN = not measured.
struct GemmRow {
  std::string section;  // int8, epilogue, int4, weight_only
  std::string op;       // e.g. "int8 i32", "w4a16 g32 zp"
  std::string variant;  // naive ... production, cublaslt, cublas_f16, ...
  std::int64_t m = 0, n = 0, k = 0;
  std::string layout;   // b layout, or "-"
  std::string out_dtype;
  double ms = NAN;
  double ms_min = NAN, ms_max = NAN;  // where the section keeps its samples' spread
  double ops = 0;       // 2*M*N*K
  double bytes = 0;     // each input read once, each output written once
  std::string peer;     // what ratio_vs_peer compares with
  double peer_ms = NAN;
  std::string check;    // "exact", "rel 1.2e-3", "MISMATCH", ...
  bool ok = true;       // false: a check failed

  static GemmRow make(std::string section, std::string op, std::string variant, std::int64_t m, std::int64_t n,
                      std::int64_t k, std::string layout, std::string out_dtype) {
    GemmRow row;
    row.section = std::move(section);
    row.op = std::move(op);
    row.variant = std::move(variant);
    row.m = m, row.n = n, row.k = k;
    row.layout = std::move(layout);
    row.out_dtype = std::move(out_dtype);
    return row;
  }

  double tops() const { return ops / (ms * 1e9); }
  double gbps() const { return bytes / (ms * 1e6); }
  double speedup_vs_peer() const { return peer_ms / ms; }
};

int run_gemm_bench(const GemmBenchOptions& options);

// GPU part (gemm_gpu.cu): appends rows and prints each section's table.
void run_gemm_gpu(const GemmBenchOptions& options, double copy_gbps, std::vector<GemmRow>& rows);
// CPU reference part (no GPU): small cases only.
void run_gemm_cpu(std::vector<GemmRow>& rows);

void print_gemm_table(const std::string& title, const std::vector<GemmRow>& rows, double copy_gbps);

}  // namespace lowbit::bench

// `lowbit bench kvquant|gemm`: option parsing in front of the benchmark drivers.
#include <iostream>
#include <limits>
#include <string>

#include "bench/gemm/gemm_bench.h"
#include "bench/kvquant/kvquant_bench.h"
#include "commands.h"
#include "options.h"

namespace lowbit::cli {
namespace {

constexpr std::int64_t kMaxInt = std::numeric_limits<std::int64_t>::max();

int bench_kvquant(const Args& args) {
  bench::KvBenchOptions options;
  std::vector<std::string> case_names;
  for (const auto& kv_case : bench::kv_cases()) case_names.push_back(kv_case.name);
  bool no_matrix = false;
  std::int64_t seed = static_cast<std::int64_t>(options.seed);
  Options cli("lowbit bench kvquant",
              "Per-channel symmetric INT8 of a T x D fp32 KV matrix over the seed's ten cases (1024x64 ..\n"
              "131072x8192, 262144x128): the seed's CPU baseline, lowbit's CPU path, the seed's naive / tiled /\n"
              "coarsened / vectorized kernels and lowbit's production kernels, each checked bit for bit\n"
              "against the CPU reference; then the production path over f32/f16/bf16 x int8/int4 x\n"
              "channel/token/group on the cases of at least 16M elements.");
  cli.text("--json", &options.json_path, "FILE", "also write the results as JSON");
  cli.integer("--max-elements", &options.max_elements, 1, kMaxInt,
              "skip cases larger than N elements (default: none with a GPU, 2^25 without)");
  cli.choices("--case", &options.only_cases, case_names, "run only this case");
  cli.flag("--cpu-only", &options.cpu_only, "do not use the GPU even if there is one");
  cli.flag("--no-matrix", &no_matrix, "skip the dtype x granularity x scheme matrix");
  cli.integer("--seed", &seed, 1, kMaxInt, "input seed (default 20261122)");
  if (const auto status = cli.parse(args)) return *status;
  options.matrix = !no_matrix;
  options.seed = static_cast<std::uint64_t>(seed);
  return bench::run_kvquant_bench(options);
}

int bench_gemm(const Args& args) {
  bench::GemmBenchOptions options;
  Options cli("lowbit bench gemm",
              "Quantized GEMMs against cuBLASLt INT8 and cuBLAS FP16 in the same run: the INT8 progression of seed\n"
              "003 (naive, tiled, vectorized, WMMA, mma.sync, wgmma) at 128^3 .. 8192^3 and decode shapes M in\n"
              "{1, 16, 64, 128} x (N, K) in {(4096, 4096), (28672, 8192), (8192, 28672)}; the fused scale + bias +\n"
              "ReLU epilogue; packed INT4; weight-only W4A16 / W8A16. Every configuration is checked first\n"
              "(integers exactly against cuBLASLt). Without a GPU: the CPU reference on small shapes.");
  cli.text("--json", &options.json_path, "FILE", "also write the results as JSON");
  cli.flag("--quick", &options.quick, "small cases only");
  cli.choices("--section", &options.only_sections, {"int8", "epilogue", "int4", "weight_only", "weight_only_variants"},
              "run only this section (weight_only_variants, a tuning sweep, only when named)");
  cli.flag("--cpu-only", &options.cpu_only, "do not use the GPU even if there is one");
  cli.integer("--max-m", &options.max_m, 0, 1 << 20,
              "weight-only section: only the cases with M <= this (0: all; 16 = the decode kernel)");
  if (const auto status = cli.parse(args)) return *status;
  return bench::run_gemm_bench(options);
}

}  // namespace

int cmd_bench(const Args& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    (args.empty() ? std::cerr : std::cout) << "usage: lowbit bench <kvquant|gemm> [options]\n";
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "kvquant") return bench_kvquant(Args(args.begin() + 1, args.end()));
  if (args[0] == "gemm") return bench_gemm(Args(args.begin() + 1, args.end()));
  std::cerr << "lowbit bench: unknown benchmark '" << args[0] << "' (available: kvquant, gemm)\n";
  return 2;
}

}  // namespace lowbit::cli

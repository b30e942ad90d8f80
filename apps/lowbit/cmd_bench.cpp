#include <iostream>
#include <string>

#include "bench/gemm/gemm_bench.h"
#include "bench/kvquant/kvquant_bench.h"
#include "commands.h"
#include "lowbit/error.h"

namespace lowbit::cli {
namespace {

void usage_kvquant(std::ostream& out) {
  out << "usage: lowbit bench kvquant [options]\n\n"
         "Per-channel symmetric INT8 of a T x D fp32 KV matrix over the seed's ten cases (1024x64 ..\n"
         "131072x8192, 262144x128): the seed's CPU baseline, lowbit's CPU path, the seed's naive / tiled /\n"
         "coarsened / vectorized kernels and lowbit's production kernels, each checked bit for bit\n"
         "against the CPU reference; then the production path over f32/f16/bf16 x int8/int4 x\n"
         "channel/token/group on the cases of at least 16M elements.\n\n"
         "options:\n"
         "  --json FILE          also write the results as JSON\n"
         "  --max-elements N     skip cases larger than N elements (default: none with a GPU, 2^25 without)\n"
         "  --case NAME          run only this case (repeatable): trivial small medium large very_large\n"
         "                       llm_small llm_medium llm_large llm_very_large massive_attention\n"
         "  --cpu-only           do not use the GPU even if there is one\n"
         "  --no-matrix          skip the dtype x granularity x scheme matrix\n"
         "  --seed N             input seed (default 20261122)\n";
}

std::int64_t parse_count(const std::string& flag, const std::string& value) {
  try {
    std::size_t used = 0;
    const long long parsed = std::stoll(value, &used);
    if (used == value.size() && parsed > 0) return parsed;
  } catch (const std::exception&) {
  }
  LOWBIT_FAIL(flag, ": expected a positive integer, got '", value, "'");
}

int bench_kvquant(const Args& args) {
  bench::KvBenchOptions options;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& flag = args[i];
    auto value = [&]() -> const std::string& {
      LOWBIT_CHECK(i + 1 < args.size(), flag, ": expected a value after it");
      return args[++i];
    };
    if (flag == "--help" || flag == "-h") {
      usage_kvquant(std::cout);
      return 0;
    } else if (flag == "--json") {
      options.json_path = value();
    } else if (flag == "--max-elements") {
      options.max_elements = parse_count(flag, value());
    } else if (flag == "--case") {
      const std::string& name = value();
      bool known = false;
      for (const auto& kv_case : bench::kv_cases()) known = known || name == kv_case.name;
      LOWBIT_CHECK(known, "--case: unknown case '", name, "' (see --help)");
      options.only_cases.push_back(name);
    } else if (flag == "--cpu-only") {
      options.cpu_only = true;
    } else if (flag == "--no-matrix") {
      options.matrix = false;
    } else if (flag == "--seed") {
      options.seed = static_cast<std::uint64_t>(parse_count(flag, value()));
    } else {
      std::cerr << "lowbit bench kvquant: unknown option '" << flag << "'\n\n";
      usage_kvquant(std::cerr);
      return 2;
    }
  }
  return bench::run_kvquant_bench(options);
}

void usage_gemm(std::ostream& out) {
  out << "usage: lowbit bench gemm [options]\n\n"
         "Quantized GEMMs against cuBLASLt INT8 and cuBLAS FP16 in the same run: the INT8 progression of seed\n"
         "003 (naive, tiled, vectorized, WMMA, production) at 128^3 .. 8192^3 and decode shapes M in\n"
         "{1, 16, 64, 128} x (N, K) in {(4096, 4096), (28672, 8192), (8192, 28672)}; the fused scale + bias +\n"
         "ReLU epilogue; packed INT4; weight-only W4A16 / W8A16. Every configuration is checked first\n"
         "(integers exactly against cuBLASLt). Without a GPU: the CPU reference on small shapes.\n\n"
         "options:\n"
         "  --json FILE       also write the results as JSON\n"
         "  --quick           small cases only\n"
         "  --section NAME    run only this section (repeatable): int8 epilogue int4 weight_only\n"
         "  --cpu-only        do not use the GPU even if there is one\n";
}

int bench_gemm(const Args& args) {
  bench::GemmBenchOptions options;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& flag = args[i];
    auto value = [&]() -> const std::string& {
      LOWBIT_CHECK(i + 1 < args.size(), flag, ": expected a value after it");
      return args[++i];
    };
    if (flag == "--help" || flag == "-h") {
      usage_gemm(std::cout);
      return 0;
    } else if (flag == "--json") {
      options.json_path = value();
    } else if (flag == "--quick") {
      options.quick = true;
    } else if (flag == "--section") {
      const std::string& name = value();
      LOWBIT_CHECK(name == "int8" || name == "epilogue" || name == "int4" || name == "weight_only",
                   "--section: unknown section '", name, "' (int8, epilogue, int4 or weight_only)");
      options.only_sections.push_back(name);
    } else if (flag == "--cpu-only") {
      options.cpu_only = true;
    } else {
      std::cerr << "lowbit bench gemm: unknown option '" << flag << "'\n\n";
      usage_gemm(std::cerr);
      return 2;
    }
  }
  return bench::run_gemm_bench(options);
}

}  // namespace

int cmd_bench(const Args& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::cout << "usage: lowbit bench <kvquant|gemm> [options]\n";
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "kvquant") return bench_kvquant(Args(args.begin() + 1, args.end()));
  if (args[0] == "gemm") return bench_gemm(Args(args.begin() + 1, args.end()));
  std::cerr << "lowbit bench: unknown benchmark '" << args[0] << "' (available: kvquant, gemm)\n";
  return 2;
}

}  // namespace lowbit::cli

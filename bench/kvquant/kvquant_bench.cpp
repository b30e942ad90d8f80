#include "bench/kvquant/kvquant_bench.h"

#include <algorithm>
#include <cstdio>
#include <iostream>

#include "bench/common/json.h"
#include "bench/common/run_info.h"
#include "bench/common/timing.h"
#include "bench/kvquant/data.h"
#include "bench/kvquant/kvquant_cpu.h"
#include "bench/kvquant/report.h"
#include "lowbit/error.h"

#if LOWBIT_WITH_CUDA
#include "bench/kvquant/kvquant_gpu.h"
#endif

namespace lowbit::bench {

double quant_bytes(const QuantSpec& spec, DType dtype, std::int64_t rows, std::int64_t cols) {
  const QuantLayout layout = quant_layout(spec, rows, cols);
  const double params = static_cast<double>(layout.scale_count()) * 4 *
                        (scheme_has_mins(spec.scheme) ? 2 : 1);
  return static_cast<double>(rows) * cols * static_cast<double>(dtype_size(dtype)) +
         static_cast<double>(rows) * layout.code_cols + params;
}

double dequant_bytes(const QuantSpec& spec, DType dtype, std::int64_t rows, std::int64_t cols) {
  return quant_bytes(spec, dtype, rows, cols);  // the same three tensors, read and written the other way
}

std::string config_label(DType dtype, const QuantSpec& spec) {
  std::string label = std::string(dtype_name(dtype)) + " " + scheme_name(spec.scheme) + " " +
                      granularity_name(spec.granularity);
  if (spec.granularity == Granularity::per_group) label += std::to_string(spec.group_size);
  return label;
}

namespace {

bool selected(const KvBenchOptions& options, const KvCase& kv_case) {
  if (options.only_cases.empty()) return true;
  return std::find(options.only_cases.begin(), options.only_cases.end(), kv_case.name) != options.only_cases.end();
}

}  // namespace

int run_kvquant_bench(const KvBenchOptions& options) {
  const RunInfo info = collect_run_info();
  const bool use_gpu = !options.cpu_only && gpu_available();
  const std::int64_t max_elements = options.max_elements > 0 ? options.max_elements
                                    : use_gpu                 ? (1LL << 40)
                                                              : (1LL << 25);
  std::cout << "# lowbit bench kvquant: INT8 / INT4 quantization of KV-cache matrices (T tokens x D channels)\n\n"
            << "commit " << info.commit << ", " << info.date << "\n"
            << "host: " << info.host_cpu << " (" << info.host_threads << " threads)\n"
            << "gpu: " << info.gpu << (use_gpu ? ", driver " + info.driver + ", CUDA runtime " + info.cuda_runtime : "")
            << "\n";
  if (!use_gpu) {
    std::cout << "\nNo GPU " << (options.cpu_only ? "requested (--cpu-only)" : "found")
              << ": running the CPU paths only, on cases of at most " << max_elements
              << " elements (--max-elements).\n";
  }

  double copy_gbps = 0;
#if LOWBIT_WITH_CUDA
  if (use_gpu) copy_gbps = measure_gpu_copy_gbps();
#endif
  const double host_copy_gbps = measure_host_copy_gbps(std::size_t{256} << 20);
  std::cout << "ceilings: host memcpy " << host_copy_gbps << " GB/s";
  if (use_gpu) std::cout << ", device-to-device copy " << copy_gbps << " GB/s (bytes read + written)";
  std::cout << "\n\n";
  print_legend(std::cout);

  std::vector<KvRow> rows;
  std::vector<std::string> skipped;
  const auto& cases = kv_cases();
  int index = 0;
  for (const KvCase& kv_case : cases) {
    ++index;
    if (!selected(options, kv_case)) continue;
    if (kv_case.elements() > max_elements) {
      skipped.push_back(kv_case.name);
      continue;
    }
    std::fprintf(stderr, "[%d/%zu] %s %lldx%lld: generating input\n", index, cases.size(), kv_case.name,
                 static_cast<long long>(kv_case.rows), static_cast<long long>(kv_case.cols));
    std::vector<float> x(static_cast<std::size_t>(kv_case.elements()));
    fill_kv_like(x.data(), kv_case.rows, kv_case.cols, options.seed + static_cast<std::uint64_t>(index));
    std::vector<float> query(static_cast<std::size_t>(kv_case.cols));
    fill_normal(query.data(), kv_case.cols, options.seed ^ 0xabcdefULL);

    const std::size_t first = rows.size();
    std::fprintf(stderr, "[%d/%zu] %s: the original CPU code and lowbit's CPU path\n", index, cases.size(),
                 kv_case.name);
    const CpuReference reference = run_cpu_rows(kv_case, x.data(), query.data(), host_copy_gbps, rows);
#if LOWBIT_WITH_CUDA
    if (use_gpu) {
      const GpuCaseInput input{&kv_case, x.data(), query.data(), &reference, copy_gbps};
      std::fprintf(stderr, "[%d/%zu] %s: the original GPU kernels and lowbit's\n", index, cases.size(), kv_case.name);
      run_gpu_seed_rows(input, rows);
      if (options.matrix && kv_case.elements() >= options.matrix_min_elements) {
        std::fprintf(stderr, "[%d/%zu] %s: GPU production over dtypes and granularities\n", index, cases.size(),
                     kv_case.name);
        run_gpu_matrix_rows(input, rows);
      }
    }
#endif
    print_case_table(std::cout, kv_case, std::vector<KvRow>(rows.begin() + static_cast<std::ptrdiff_t>(first), rows.end()));
  }
  if (!skipped.empty()) {
    std::cout << "Skipped (more than " << max_elements << " elements):";
    for (const auto& name : skipped) std::cout << ' ' << name;
    std::cout << "\n\n";
  }
  print_summary(std::cout, rows, use_gpu);

  if (!options.json_path.empty()) {
    results_json(info, rows, copy_gbps, host_copy_gbps, max_elements, skipped).write_file(options.json_path);
    std::cout << "wrote " << options.json_path << "\n";
  }
  bool all_exact = true;
  for (const KvRow& row : rows) {
    if ((row.codes_exact && !*row.codes_exact) || (row.dequant_exact && !*row.dequant_exact)) all_exact = false;
  }
  if (!all_exact) std::cerr << "error: some variant's output differs from the CPU reference (see the 'exact' column)\n";
  return all_exact ? 0 : 1;
}

}  // namespace lowbit::bench

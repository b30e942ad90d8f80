// `lowbit bench gemm`: entry point, the CPU-only path, the tables and the JSON.
#include "bench/gemm/gemm_bench.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <random>
#include <vector>

#include "bench/common/json.h"
#include "bench/common/run_info.h"
#include "bench/common/timing.h"
#include "lowbit/error.h"
#include "lowbit/gemm.h"

namespace lowbit::bench {

void run_gemm_cpu(std::vector<GemmRow>& rows) {
  struct Shape {
    std::int64_t m, n, k;
  };
  const Shape shapes[] = {{128, 128, 128}, {512, 512, 512}, {1, 4096, 4096}, {16, 4096, 4096}};
  std::mt19937 rng(20261122);
  const std::size_t first = rows.size();
  for (const Shape& s : shapes) {
    std::vector<std::int8_t> a(static_cast<std::size_t>(s.m * s.k)), b(static_cast<std::size_t>(s.n * s.k));
    for (auto& v : a) v = static_cast<std::int8_t>(rng());
    for (auto& v : b) v = static_cast<std::int8_t>(rng());
    std::vector<std::int32_t> out(static_cast<std::size_t>(s.m * s.n));
    const TensorView av = TensorView::matrix(a.data(), DType::i8, Device::cpu, s.m, s.k);
    const TensorView bv = TensorView::matrix(b.data(), DType::i8, Device::cpu, s.n, s.k);
    const TensorView ov = TensorView::matrix(out.data(), DType::i32, Device::cpu, s.m, s.n);
    const double ms = host_median_ms([&] { int8_gemm(av, bv, BLayout::n_by_k, ov, GemmEpilogue{}, nullptr); }, 5);
    GemmRow row = GemmRow::make("int8", "int8 i32", "cpu reference", s.m, s.n, s.k, "n_by_k", "i32");
    row.ms = ms;
    row.ops = 2.0 * s.m * s.n * s.k;
    row.bytes = static_cast<double>(s.m * s.k + s.n * s.k) + 4.0 * s.m * s.n;
    row.check = "-";
    rows.push_back(row);
  }
  print_gemm_table("INT8 GEMM on the CPU (the reference; no GPU)",
                   std::vector<GemmRow>(rows.begin() + static_cast<std::ptrdiff_t>(first), rows.end()), 0);
}

namespace {

// Three significant digits, so that small CPU figures do not read 0.0 or 0.
std::string significant(double v) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, v >= 100 ? "%.0f" : v >= 10 ? "%.1f" : v >= 1 ? "%.2f" : "%.3g", v);
  return buffer;
}

}  // namespace

void print_gemm_table(const std::string& title, const std::vector<GemmRow>& rows, double copy_gbps) {
  std::cout << "## " << title << "\n\n"
            << "ms: median time of one call; TOPS: 10^12 multiply-adds x 2 per second; GB/s: operand and result bytes "
               "over the time"
            << (copy_gbps > 0 ? " (% copy: its share of a device copy measured in the same run)" : "")
            << "; speed-up: the peer's time over this row's.\n\n"
            << "| op | variant | M x N x K | B | out | ms | TOPS | GB/s |" << (copy_gbps > 0 ? " % copy |" : "")
            << " speed-up vs peer | check |\n"
            << "|---|---|---|---|---|---:|---:|---:|" << (copy_gbps > 0 ? "---:|" : "") << "---:|---|\n";
  double lo = INFINITY, hi = 0;
  bool all_ok = true;
  for (const GemmRow& r : rows) {
    all_ok = all_ok && r.ok;
    // The peer's own row (speed-up 1 by definition) is not one of lowbit's.
    if (!r.peer.empty() && r.variant != r.peer && std::isfinite(r.speedup_vs_peer())) {
      lo = std::min(lo, r.speedup_vs_peer()), hi = std::max(hi, r.speedup_vs_peer());
    }
    char line[512];
    char ms[96];  // the median, and the samples' spread where the section kept it
    if (std::isfinite(r.ms_min)) {
      std::snprintf(ms, sizeof ms, "%.4f (%.4f - %.4f)", r.ms, r.ms_min, r.ms_max);
    } else {
      std::snprintf(ms, sizeof ms, "%.4f", r.ms);
    }
    std::snprintf(line, sizeof line, "| %s | %s | %lldx%lldx%lld | %s | %s | %s | %s | %s |", r.op.c_str(),
                  r.variant.c_str(), static_cast<long long>(r.m), static_cast<long long>(r.n),
                  static_cast<long long>(r.k), r.layout.c_str(), r.out_dtype.c_str(), ms,
                  significant(r.tops()).c_str(), significant(r.gbps()).c_str());
    std::cout << line;
    if (copy_gbps > 0) {
      std::snprintf(line, sizeof line, " %.0f%% |", 100.0 * r.gbps() / copy_gbps);
      std::cout << line;
    }
    if (r.peer.empty()) {
      std::cout << " - |";
    } else {
      std::snprintf(line, sizeof line, " %.2fx (%s) |", r.speedup_vs_peer(), r.peer.c_str());
      std::cout << line;
    }
    std::cout << " " << r.check << " |\n";
  }
  if (hi > 0) {
    const std::string range = significant(lo) == significant(hi) ? significant(hi) + "x"
                                                                   : significant(lo) + " to " + significant(hi) + "x";
    std::printf("\nVerdict: %s the speed of the peer measured in the same run; %s.\n", range.c_str(),
                all_ok ? "every result checked" : "SOME CHECKS FAILED");
  } else if (copy_gbps <= 0) {
    std::printf("\nVerdict: the CPU reference (the tests' oracle) only: a GPU is needed for the kernels and their "
                "peers.\n");
  }
  std::cout << std::endl;
}

namespace {

Json rows_json(const RunInfo& info, const std::vector<GemmRow>& rows, double copy_gbps) {
  Json root = run_info_json("gemm", info);
  root.set("gpu_copy_gbps", copy_gbps);
  Json list = Json::array();
  for (const GemmRow& r : rows) {
    Json row = Json::object();
    row.set("section", r.section);
    row.set("op", r.op);
    row.set("variant", r.variant);
    row.set("M", r.m);
    row.set("N", r.n);
    row.set("K", r.k);
    row.set("b_layout", r.layout);
    row.set("out_dtype", r.out_dtype);
    row.set("ms", r.ms);
    if (std::isfinite(r.ms_min)) row.set("ms_min", r.ms_min), row.set("ms_max", r.ms_max);
    row.set("tops", r.tops());
    row.set("gbps", r.gbps());
    row.set("pct_copy", copy_gbps > 0 ? 100.0 * r.gbps() / copy_gbps : NAN);
    row.set("peer", r.peer);
    row.set("peer_ms", r.peer_ms);
    row.set("speedup_vs_peer", r.speedup_vs_peer());
    row.set("check", r.check);
    row.set("ok", r.ok);
    list.push(row);
  }
  root.set("rows", list);
  return root;
}

}  // namespace

int run_gemm_bench(const GemmBenchOptions& options) {
  const RunInfo info = collect_run_info();
  const bool use_gpu = !options.cpu_only && gpu_available();
  std::cout << "# lowbit bench gemm\n\ncommit " << info.commit << ", " << info.date << "\ngpu: " << info.gpu
            << (use_gpu ? ", driver " + info.driver : "") << "\n\n";
  std::vector<GemmRow> rows;
  double copy_gbps = 0;
#if LOWBIT_WITH_CUDA
  if (use_gpu) {
    copy_gbps = measure_copy_gbps(std::size_t{1} << 30, nullptr);
    std::cout << "ceiling: device-to-device copy " << copy_gbps << " GB/s (bytes read + written)\n\n";
    run_gemm_gpu(options, copy_gbps, rows);
  }
#endif
  if (!use_gpu) {
    std::cout << "No GPU " << (options.cpu_only ? "requested (--cpu-only)" : "found")
              << ": timing the CPU reference of the INT8 GEMM on small shapes only.\n\n";
    run_gemm_cpu(rows);
  }
  if (!options.json_path.empty()) {
    rows_json(info, rows, copy_gbps).write_file(options.json_path);
    std::cout << "wrote " << options.json_path << "\n";
  }
  bool ok = true;
  for (const GemmRow& r : rows) ok = ok && r.ok;
  if (!ok) std::cerr << "error: some configuration failed its check (see the 'check' column)\n";
  return ok ? 0 : 1;
}

}  // namespace lowbit::bench

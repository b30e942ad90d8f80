#include "bench/kvquant/report.h"

#include <cmath>
#include <cstdio>
#include <map>

namespace lowbit::bench {
namespace {

std::string fmt(double value, const char* format = "%.3f") {
  if (!std::isfinite(value)) return "-";
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, format, value);
  return buffer;
}

std::string exact(const KvRow& row) {
  if (!row.codes_exact && !row.dequant_exact) return "-";
  const bool ok = row.codes_exact.value_or(true) && row.dequant_exact.value_or(true);
  return ok ? "yes" : "NO";
}

double pct(double gbps, double ceiling) { return 100.0 * gbps / ceiling; }

}  // namespace

void print_case_table(std::ostream& out, const KvCase& kv_case, const std::vector<KvRow>& rows) {
  out << "## " << kv_case.name << ": T x D = " << kv_case.rows << " x " << kv_case.cols << "\n\n"
      << "| variant | config | scale ms | quant ms | quant+scale ms | dequant ms | total ms | speedup | quant GB/s (% copy) "
         "| dequant GB/s (% copy) | rel L2 | max abs | attn err | exact |\n"
      << "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:-:|\n";
  for (const KvRow& r : rows) {
    out << "| " << r.device << ":" << r.variant << " | " << config_label(r.dtype, r.spec) << " | " << fmt(r.scale_ms)
        << " | " << fmt(r.quant_ms) << " | " << fmt(r.quant_fused_ms) << " | " << fmt(r.dequant_ms) << " | "
        << fmt(r.total_ms()) << " | " << fmt(r.speedup_vs_cpu, "%.1fx") << " | " << fmt(r.quant_gbps(), "%.0f") << " ("
        << fmt(pct(r.quant_gbps(), r.copy_gbps), "%.0f%%") << ") | " << fmt(r.dequant_gbps(), "%.0f") << " ("
        << fmt(pct(r.dequant_gbps(), r.copy_gbps), "%.0f%%") << ") | " << fmt(r.rel_l2, "%.2e") << " | "
        << fmt(r.max_abs, "%.2e") << " | " << fmt(r.attn_surrogate, "%.2e") << " | " << exact(r) << " |\n";
  }
  out << "\n";
}

void print_summary(std::ostream& out, const std::vector<KvRow>& rows, bool gpu) {
  out << "## Summary (f32, int8 per-channel)\n\n";
  if (!gpu) {
    out << "| case | T x D | baseline total ms | cpu_fast total ms | speedup | exact |\n|---|---|---:|---:|---:|:-:|\n";
    for (const KvRow& r : rows) {
      if (r.variant != "cpu_fast") continue;
      out << "| " << r.case_name << " | " << r.rows << "x" << r.cols << " | " << fmt(r.speedup_vs_cpu * r.total_ms())
          << " | " << fmt(r.total_ms()) << " | " << fmt(r.speedup_vs_cpu, "%.1fx") << " | " << exact(r) << " |\n";
    }
    out << "\n";
    return;
  }
  out << "| case | T x D | best seed variant | its speedup | production quant % copy | dequant % copy "
         "| quant+scale ms | production speedup | all exact |\n|---|---|---|---:|---:|---:|---:|---:|:-:|\n";
  std::map<std::string, std::vector<const KvRow*>> by_case;
  std::vector<std::string> order;
  for (const KvRow& r : rows) {
    if (!by_case.count(r.case_name)) order.push_back(r.case_name);
    by_case[r.case_name].push_back(&r);
  }
  for (const std::string& name : order) {
    const KvRow* best = nullptr;
    const KvRow* production = nullptr;
    bool all_exact = true;
    for (const KvRow* r : by_case[name]) {
      if (r->codes_exact && !*r->codes_exact) all_exact = false;
      if (r->dequant_exact && !*r->dequant_exact) all_exact = false;
      if (r->device != "gpu" || r->dtype != DType::f32 || r->spec.granularity != Granularity::per_channel ||
          r->spec.scheme != QuantScheme::int8_symmetric) {
        continue;
      }
      if (r->variant == "production") {
        production = r;
      } else if (!best || r->total_ms() < best->total_ms()) {
        best = r;
      }
    }
    if (!best || !production) continue;
    out << "| " << name << " | " << best->rows << "x" << best->cols << " | " << best->variant << " | "
        << fmt(best->speedup_vs_cpu, "%.0fx") << " | " << fmt(pct(production->quant_gbps(), production->copy_gbps), "%.0f%%")
        << " | " << fmt(pct(production->dequant_gbps(), production->copy_gbps), "%.0f%%") << " | "
        << fmt(production->quant_fused_ms) << " | " << fmt(production->speedup_vs_cpu, "%.0fx") << " | "
        << (all_exact ? "yes" : "NO") << " |\n";
  }
  out << "\n";
}

Json results_json(const RunInfo& info, const std::vector<KvRow>& rows, double copy_gbps, double host_copy_gbps,
                  std::int64_t max_elements, const std::vector<std::string>& skipped) {
  Json root = run_info_json("kvquant", info);
  root.set("gpu_copy_gbps", copy_gbps);
  root.set("host_copy_gbps", host_copy_gbps);
  root.set("max_elements", max_elements);
  Json skipped_json = Json::array();
  for (const auto& name : skipped) skipped_json.push(name);
  root.set("skipped_cases", skipped_json);
  Json list = Json::array();
  for (const KvRow& r : rows) {
    Json row = Json::object();
    row.set("case", r.case_name);
    row.set("T", r.rows);
    row.set("D", r.cols);
    row.set("device", r.device);
    row.set("dtype", dtype_name(r.dtype));
    row.set("scheme", scheme_name(r.spec.scheme));
    row.set("granularity", granularity_name(r.spec.granularity));
    row.set("group_size", r.spec.group_size);
    row.set("variant", r.variant);
    row.set("scale_ms", r.scale_ms);
    row.set("quant_ms", r.quant_ms);
    row.set("quant_with_scales_ms", r.quant_fused_ms);
    row.set("dequant_ms", r.dequant_ms);
    row.set("total_ms", r.total_ms());
    row.set("quant_bytes", r.quant_bytes);
    row.set("dequant_bytes", r.dequant_bytes);
    row.set("copy_gbps", r.copy_gbps);
    row.set("quant_gbps", r.quant_gbps());
    row.set("dequant_gbps", r.dequant_gbps());
    row.set("quant_pct_copy", pct(r.quant_gbps(), r.copy_gbps));
    row.set("dequant_pct_copy", pct(r.dequant_gbps(), r.copy_gbps));
    row.set("quant_with_scales_pct_copy", pct(r.quant_bytes / (r.quant_fused_ms * 1e6), r.copy_gbps));
    row.set("speedup_vs_cpu", r.speedup_vs_cpu);
    row.set("rel_l2", r.rel_l2);
    row.set("max_abs", r.max_abs);
    row.set("attn_surrogate", r.attn_surrogate);
    row.set("codes_exact", r.codes_exact);
    row.set("dequant_exact", r.dequant_exact);
    list.push(row);
  }
  root.set("rows", list);
  return root;
}

}  // namespace lowbit::bench

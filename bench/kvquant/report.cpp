#include "bench/kvquant/report.h"

#include <algorithm>
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

double pct(double gbps, double ceiling) { return 100.0 * gbps / ceiling; }

// A speed-up with two significant digits, so that a slow row reads 0.012x, not 0.0x.
std::string speedup(double value) {
  if (!std::isfinite(value)) return "-";
  return fmt(value, value >= 10 ? "%.0fx" : value >= 1 ? "%.1fx" : value >= 0.1 ? "%.2fx" : "%.3fx");
}

// "GB/s (% of the copy ceiling)", marked when above 100%: such a case is small enough
// to be served from cache between timed runs, while the ceiling copies through memory.
std::string bandwidth(double gbps, double ceiling) {
  if (!std::isfinite(gbps)) return "-";
  const double p = pct(gbps, ceiling);
  return fmt(gbps, "%.0f") + " (" + fmt(p, "%.0f%%") + (p > 100 ? " *" : "") + ")";
}

std::string exact(const KvRow& row) {
  if (!row.codes_exact && !row.dequant_exact) return "-";
  const bool ok = row.codes_exact.value_or(true) && row.dequant_exact.value_or(true);
  return ok ? "yes" : "NO";
}

}  // namespace

void print_legend(std::ostream& out) {
  out << "What the columns measure (milliseconds are medians of repeated runs):\n"
         "- scale ms: the pass that computes the per-channel scales; quant ms: the INT8 codes from given scales\n"
         "  (the four original GPU kernels take their scales from the CPU); quant+scale ms: both, as quantize()\n"
         "  runs them; dequant ms: codes back to values.\n"
         "- quant+dequant ms: quant ms + dequant ms, scales given to every variant alike; the speed-up column\n"
         "  is the original CPU code's quant+dequant ms over this row's.\n"
         "- GB/s: bytes read and written over the time, and its share of a copy measured in the same run (the\n"
         "  ceiling); * marks a share above 100%: the case is small enough to be served from cache between\n"
         "  runs, while the ceiling copies through memory.\n"
         "- rel L2 / max abs: error of the dequantized values; attn err: error of a softmax(q.K) surrogate;\n"
         "  exact: codes and values equal the CPU reference bit for bit.\n\n";
}

void print_case_table(std::ostream& out, const KvCase& kv_case, const std::vector<KvRow>& rows) {
  out << "## " << kv_case.name << ": T x D = " << kv_case.rows << " x " << kv_case.cols << "\n\n"
      << "| variant | config | scale ms | quant ms | quant+scale ms | dequant ms | quant+dequant ms | speed-up vs CPU "
         "original | quant GB/s (% copy) | dequant GB/s (% copy) | rel L2 | max abs | attn err | exact |\n"
      << "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:-:|\n";
  for (const KvRow& r : rows) {
    out << "| " << r.device << ":" << r.variant << " | " << config_label(r.dtype, r.spec) << " | " << fmt(r.scale_ms)
        << " | " << fmt(r.quant_ms) << " | " << fmt(r.quant_fused_ms) << " | " << fmt(r.dequant_ms) << " | "
        << fmt(r.total_ms()) << " | " << speedup(r.speedup_vs_cpu) << " | " << bandwidth(r.quant_gbps(), r.copy_gbps)
        << " | " << bandwidth(r.dequant_gbps(), r.copy_gbps) << " | " << fmt(r.rel_l2, "%.2e") << " | "
        << fmt(r.max_abs, "%.2e") << " | " << fmt(r.attn_surrogate, "%.2e") << " | " << exact(r) << " |\n";
  }
  out << "\n";
}

void print_summary(std::ostream& out, const std::vector<KvRow>& rows, bool gpu) {
  out << "## Summary (f32 keys or values, INT8 per channel)\n\n";
  bool all_exact = true;
  for (const KvRow& r : rows) {
    if ((r.codes_exact && !*r.codes_exact) || (r.dequant_exact && !*r.dequant_exact)) all_exact = false;
  }
  if (!gpu) {
    out << "| case | T x D | original CPU code, quant+dequant ms | lowbit CPU, quant+dequant ms | speed-up | exact |\n"
           "|---|---|---:|---:|---:|:-:|\n";
    double lo = INFINITY, hi = 0;
    for (const KvRow& r : rows) {
      if (r.variant != "cpu_fast") continue;
      lo = std::min(lo, r.speedup_vs_cpu), hi = std::max(hi, r.speedup_vs_cpu);
      out << "| " << r.case_name << " | " << r.rows << "x" << r.cols << " | " << fmt(r.speedup_vs_cpu * r.total_ms())
          << " | " << fmt(r.total_ms()) << " | " << speedup(r.speedup_vs_cpu) << " | " << exact(r) << " |\n";
    }
    if (hi > 0) {
      out << "\nVerdict: lowbit's CPU path runs at "
          << (speedup(lo) == speedup(hi) ? speedup(hi) : speedup(lo) + " to " + speedup(hi))
          << " the original CPU code's speed on these cases (threads share the work only where it is worth a "
             "thread team), "
          << (all_exact ? "every output bit-identical." : "but some outputs DIFFER (see 'exact').") << "\n";
    }
    out << "\n";
    return;
  }
  out << "| case | T x D | fastest original GPU kernel | its speed-up vs CPU original | lowbit quant % copy | "
         "dequant % copy | lowbit quant+scale ms | lowbit speed-up vs CPU original | all exact |\n"
         "|---|---|---|---:|---:|---:|---:|---:|:-:|\n";
  std::map<std::string, std::vector<const KvRow*>> by_case;
  std::vector<std::string> order;
  for (const KvRow& r : rows) {
    if (!by_case.count(r.case_name)) order.push_back(r.case_name);
    by_case[r.case_name].push_back(&r);
  }
  double best_ratio = 0, worst_pct = INFINITY, best_pct = 0;
  for (const std::string& name : order) {
    const KvRow* best = nullptr;
    const KvRow* production = nullptr;
    bool case_exact = true;
    for (const KvRow* r : by_case[name]) {
      if (r->codes_exact && !*r->codes_exact) case_exact = false;
      if (r->dequant_exact && !*r->dequant_exact) case_exact = false;
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
    const double quant_pct = pct(production->quant_gbps(), production->copy_gbps);
    best_ratio = std::max(best_ratio, best->total_ms() / production->total_ms());
    worst_pct = std::min(worst_pct, quant_pct), best_pct = std::max(best_pct, quant_pct);
    out << "| " << name << " | " << best->rows << "x" << best->cols << " | " << best->variant << " | "
        << speedup(best->speedup_vs_cpu) << " | " << fmt(quant_pct, "%.0f%%")
        << " | " << fmt(pct(production->dequant_gbps(), production->copy_gbps), "%.0f%%") << " | "
        << fmt(production->quant_fused_ms) << " | " << speedup(production->speedup_vs_cpu) << " | "
        << (case_exact ? "yes" : "NO") << " |\n";
  }
  if (best_pct > 0) {
    const std::string worst = fmt(worst_pct, "%.0f%%"), best_share = fmt(best_pct, "%.0f%%");
    out << "\nVerdict: lowbit's kernels move data at " << (worst == best_share ? worst : worst + " to " + best_share)
        << " of the copy ceiling, up to " << speedup(best_ratio) << " the fastest original kernel, "
        << (all_exact ? "every output bit-identical to the CPU." : "but some outputs DIFFER (see 'all exact').")
        << "\n";
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

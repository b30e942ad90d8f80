#include "bench/kvquant/kvquant_cpu.h"

#include <omp.h>

#include <algorithm>
#include <cstring>

#include "bench/common/timing.h"
#include "bench/kvquant/data.h"
#include "cpu/quant_baseline.h"
#include "lowbit/quant.h"

namespace lowbit::bench {
namespace {

// Fewer samples where one run takes seconds.
int samples_for(std::int64_t elements) { return elements >= (1LL << 27) ? 1 : elements >= (1LL << 24) ? 3 : 7; }

}  // namespace

double measure_host_copy_gbps(std::size_t bytes) {
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  const double ms = host_median_ms(
      [&] {
#pragma omp parallel
        {
          // Each thread copies its own slice, as the OpenMP CPU paths do.
          const int threads = omp_get_num_threads();
          const int me = omp_get_thread_num();
          const std::size_t slice = (bytes + threads - 1) / threads;
          const std::size_t begin = std::min(bytes, slice * me);
          const std::size_t end = std::min(bytes, begin + slice);
          std::memcpy(dst.data() + begin, src.data() + begin, end - begin);
        }
      },
      5);
  return 2.0 * static_cast<double>(bytes) / (ms * 1e6);
}

CpuReference run_cpu_rows(const KvCase& kv_case, const float* x, const float* query, double host_copy_gbps,
                          std::vector<KvRow>& rows_out) {
  const std::int64_t rows = kv_case.rows, cols = kv_case.cols, n = kv_case.elements();
  const int samples = samples_for(n);
  const QuantSpec spec{QuantScheme::int8_symmetric, Granularity::per_channel, 0};

  KvRow base;
  base.case_name = kv_case.name;
  base.rows = rows;
  base.cols = cols;
  base.device = "cpu";
  base.spec = spec;
  base.quant_bytes = quant_bytes(spec, DType::f32, rows, cols);
  base.dequant_bytes = dequant_bytes(spec, DType::f32, rows, cols);
  base.copy_gbps = host_copy_gbps;

  // The seed's baseline.
  CpuReference ref;
  ref.scales.resize(static_cast<std::size_t>(cols));
  ref.codes.resize(static_cast<std::size_t>(n));
  ref.dequantized.resize(static_cast<std::size_t>(n));
  KvRow baseline = base;
  baseline.variant = "cpu_baseline";
  baseline.scale_ms = host_median_ms([&] { cpu::baseline::compute_scales(x, rows, cols, ref.scales.data()); }, samples, 0);
  baseline.quant_ms = host_median_ms(
      [&] { cpu::baseline::quantize(x, ref.scales.data(), ref.codes.data(), rows, cols); }, samples, 0);
  baseline.quant_fused_ms = baseline.scale_ms + baseline.quant_ms;
  baseline.dequant_ms = host_median_ms(
      [&] { cpu::baseline::dequantize(ref.codes.data(), ref.scales.data(), ref.dequantized.data(), rows, cols); },
      samples, 0);
  ref.baseline_total_ms = baseline.total_ms();
  baseline.speedup_vs_cpu = 1.0;
  const ErrorMetrics m = error_metrics(x, ref.dequantized.data(), DType::f32, rows, cols, query);
  baseline.rel_l2 = m.rel_l2, baseline.max_abs = m.max_abs, baseline.attn_surrogate = m.attn_surrogate;

  // lowbit's CPU path, through the public API; checked against the baseline.
  std::vector<float> scales(static_cast<std::size_t>(cols));
  std::vector<std::int8_t> codes(static_cast<std::size_t>(n));
  std::vector<float> dequantized(static_cast<std::size_t>(n));
  const TensorView xv = TensorView::matrix(const_cast<float*>(x), DType::f32, Device::cpu, rows, cols);
  const QuantizedView qv{TensorView::matrix(codes.data(), DType::i8, Device::cpu, rows, cols),
                         TensorView::vector(scales.data(), DType::f32, Device::cpu, cols), TensorView{}};
  const TensorView out = TensorView::matrix(dequantized.data(), DType::f32, Device::cpu, rows, cols);
  KvRow fast = base;
  fast.variant = "cpu_fast";
  fast.scale_ms = host_median_ms([&] { compute_scales(xv, spec, qv, Workspace{}, nullptr); }, samples);
  fast.quant_ms = host_median_ms([&] { quantize_with_scales(xv, spec, qv, nullptr); }, samples);
  fast.quant_fused_ms = host_median_ms([&] { quantize(xv, spec, qv, Workspace{}, nullptr); }, samples);
  fast.dequant_ms = host_median_ms([&] { dequantize(qv, spec, out, nullptr); }, samples);
  fast.speedup_vs_cpu = ref.baseline_total_ms / fast.total_ms();
  fast.rel_l2 = m.rel_l2, fast.max_abs = m.max_abs, fast.attn_surrogate = m.attn_surrogate;
  fast.codes_exact = scales == ref.scales && codes == ref.codes;
  fast.dequant_exact = std::memcmp(dequantized.data(), ref.dequantized.data(), dequantized.size() * 4) == 0;
  baseline.codes_exact = fast.codes_exact;
  baseline.dequant_exact = fast.dequant_exact;

  rows_out.push_back(baseline);
  rows_out.push_back(fast);
  return ref;
}

}  // namespace lowbit::bench

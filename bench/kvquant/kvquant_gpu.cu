#include <algorithm>
#include <cstring>

#include "bench/common/timing.h"
#include "bench/kvquant/data.h"
#include "bench/kvquant/kvquant_gpu.h"
#include "core/device_buffer.h"
#include "cuda/quant/baselines.h"
#include "lowbit/cuda_check.h"
#include "lowbit/quant.h"

namespace lowbit::bench {
namespace {

using core::DeviceBuffer;

constexpr std::size_t kRotationBytes = 256u << 20;  // > 5x the H100's 50 MB L2

// Several copies of one input (and of the outputs), so that timed launches cycle
// through more memory than L2 holds and every case is measured from HBM.
struct Rotation {
  std::vector<DeviceBuffer> x, codes, out;
  int copies = 1;

  Rotation(const void* host_x, std::size_t x_bytes, std::size_t code_bytes, std::size_t out_bytes,
           cudaStream_t stream) {
    copies = static_cast<int>(std::clamp<std::size_t>(kRotationBytes / std::max<std::size_t>(x_bytes, 1), 1, 512));
    for (int i = 0; i < copies; ++i) {
      x.emplace_back(x_bytes);
      codes.emplace_back(code_bytes);
      out.emplace_back(out_bytes);
    }
    LOWBIT_CUDA_CHECK(cudaMemcpyAsync(x[0].data(), host_x, x_bytes, cudaMemcpyHostToDevice, stream));
    for (int i = 1; i < copies; ++i) {
      LOWBIT_CUDA_CHECK(cudaMemcpyAsync(x[i].data(), x[0].data(), x_bytes, cudaMemcpyDeviceToDevice, stream));
    }
  }
  // Unwritten outputs then read back as 0x5A codes and NaN values.
  void poison_outputs(int i, cudaStream_t stream) const {
    LOWBIT_CUDA_CHECK(cudaMemsetAsync(codes[i].data(), 0x5a, codes[i].bytes(), stream));
    LOWBIT_CUDA_CHECK(cudaMemsetAsync(out[i].data(), 0xff, out[i].bytes(), stream));
  }
};

template <class T>
std::vector<T> download(const DeviceBuffer& buffer, std::size_t count, cudaStream_t stream) {
  std::vector<T> host(count);
  LOWBIT_CUDA_CHECK(cudaMemcpyAsync(host.data(), buffer.data(), count * sizeof(T), cudaMemcpyDeviceToHost, stream));
  LOWBIT_CUDA_CHECK(cudaStreamSynchronize(stream));
  return host;
}

void set_metrics(KvRow& row, const ErrorMetrics& m) {
  row.rel_l2 = m.rel_l2;
  row.max_abs = m.max_abs;
  row.attn_surrogate = m.attn_surrogate;
}

KvRow gpu_row(const GpuCaseInput& input, DType dtype, const QuantSpec& spec, const char* variant) {
  KvRow row;
  row.case_name = input.kv_case->name;
  row.rows = input.kv_case->rows;
  row.cols = input.kv_case->cols;
  row.device = "gpu";
  row.dtype = dtype;
  row.spec = spec;
  row.variant = variant;
  row.quant_bytes = quant_bytes(spec, dtype, row.rows, row.cols);
  row.dequant_bytes = dequant_bytes(spec, dtype, row.rows, row.cols);
  row.copy_gbps = input.copy_gbps;
  return row;
}

}  // namespace

double measure_gpu_copy_gbps() { return measure_copy_gbps(std::size_t{1} << 30, nullptr); }

void run_gpu_seed_rows(const GpuCaseInput& input, std::vector<KvRow>& rows_out) {
  const std::int64_t rows = input.kv_case->rows, cols = input.kv_case->cols, n = input.kv_case->elements();
  const QuantSpec spec{QuantScheme::int8_symmetric, Granularity::per_channel, 0};
  const CpuReference& ref = *input.reference;
  cudaStream_t stream = nullptr;
  const std::size_t elements = static_cast<std::size_t>(n);
  Rotation rot(input.x, elements * 4, elements, elements * 4, stream);
  DeviceBuffer scales(static_cast<std::size_t>(cols) * 4);
  LOWBIT_CUDA_CHECK(cudaMemcpyAsync(scales.data(), ref.scales.data(), scales.bytes(), cudaMemcpyHostToDevice, stream));

  auto check_outputs = [&](KvRow& row) {
    const auto codes = download<std::int8_t>(rot.codes[0], elements, stream);
    const auto out = download<float>(rot.out[0], elements, stream);
    row.codes_exact = codes == ref.codes;
    row.dequant_exact = std::memcmp(out.data(), ref.dequantized.data(), elements * 4) == 0;
    set_metrics(row, error_metrics(input.x, out.data(), DType::f32, rows, cols, input.query));
    row.speedup_vs_cpu = ref.baseline_total_ms / row.total_ms();
  };

  for (const cuda::seed::Variant& v : cuda::seed::variants()) {
    KvRow row = gpu_row(input, DType::f32, spec, v.name);
    row.quant_ms = gpu_median_ms(
        [&](int i) {
          const int c = i % rot.copies;
          v.quantize(rot.x[c].as<float>(), scales.as<float>(), rot.codes[c].as<std::int8_t>(), rows, cols, stream);
        },
        stream);
    row.dequant_ms = gpu_median_ms(
        [&](int i) {
          const int c = i % rot.copies;
          v.dequantize(rot.codes[c].as<std::int8_t>(), scales.as<float>(), rot.out[c].as<float>(), rows, cols, stream);
        },
        stream);
    rot.poison_outputs(0, stream);
    v.quantize(rot.x[0].as<float>(), scales.as<float>(), rot.codes[0].as<std::int8_t>(), rows, cols, stream);
    v.dequantize(rot.codes[0].as<std::int8_t>(), scales.as<float>(), rot.out[0].as<float>(), rows, cols, stream);
    check_outputs(row);
    rows_out.push_back(row);
  }

  // The production path through the public API: given scales, scale pass, both fused.
  KvRow row = gpu_row(input, DType::f32, spec, "production");
  DeviceBuffer workspace(quantize_workspace_bytes(spec, rows, cols));
  const Workspace ws{workspace.data(), workspace.bytes()};
  auto view = [&](int c) {
    return std::pair{TensorView::matrix(rot.x[c].data(), DType::f32, Device::cuda, rows, cols),
                     QuantizedView{TensorView::matrix(rot.codes[c].data(), DType::i8, Device::cuda, rows, cols),
                                   TensorView::vector(scales.data(), DType::f32, Device::cuda, cols), TensorView{}}};
  };
  auto out_view = [&](int c) { return TensorView::matrix(rot.out[c].data(), DType::f32, Device::cuda, rows, cols); };
  row.quant_ms = gpu_median_ms([&](int i) { auto [x, q] = view(i % rot.copies); quantize_with_scales(x, spec, q, stream); }, stream);
  row.scale_ms = gpu_median_ms(
      [&](int i) { auto [x, q] = view(i % rot.copies); compute_scales(x, spec, q, ws, stream, NonFiniteCheck::deferred); }, stream);
  row.quant_fused_ms = gpu_median_ms(
      [&](int i) { auto [x, q] = view(i % rot.copies); quantize(x, spec, q, ws, stream, NonFiniteCheck::deferred); }, stream);
  row.dequant_ms = gpu_median_ms([&](int i) { auto [x, q] = view(i % rot.copies); dequantize(q, spec, out_view(i % rot.copies), stream); }, stream);
  check_quantize_status(ws, stream);
  rot.poison_outputs(0, stream);
  LOWBIT_CUDA_CHECK(cudaMemsetAsync(scales.data(), 0xff, scales.bytes(), stream));
  {
    auto [x, q] = view(0);
    quantize(x, spec, q, ws, stream);  // scales computed on the GPU this time
    dequantize(q, spec, out_view(0), stream);
  }
  check_outputs(row);
  row.codes_exact = *row.codes_exact && download<float>(scales, static_cast<std::size_t>(cols), stream) == ref.scales;
  rows_out.push_back(row);
}

void run_gpu_matrix_rows(const GpuCaseInput& input, std::vector<KvRow>& rows_out) {
  const std::int64_t rows = input.kv_case->rows, cols = input.kv_case->cols, n = input.kv_case->elements();
  cudaStream_t stream = nullptr;
  struct Config {
    QuantScheme scheme;
    Granularity granularity;
    std::int64_t group;
  };
  const Config configs[] = {
      {QuantScheme::int8_symmetric, Granularity::per_channel, 0},
      {QuantScheme::int8_symmetric, Granularity::per_token, 0},
      {QuantScheme::int8_symmetric, Granularity::per_group, 32},
      {QuantScheme::int8_symmetric, Granularity::per_group, 128},
      {QuantScheme::int4_asymmetric, Granularity::per_channel, 0},  // KIVI keys
      {QuantScheme::int4_asymmetric, Granularity::per_token, 0},    // KIVI values
      {QuantScheme::int4_asymmetric, Granularity::per_group, 64},
  };
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    const std::vector<std::uint8_t> host_x = convert_to_dtype(input.x, n, dtype);
    const std::vector<float> x_values = dtype_values_as_float(host_x.data(), n, dtype);
    for (const Config& config : configs) {
      const QuantSpec spec{config.scheme, config.granularity, config.group};
      if (dtype == DType::f32 && spec.scheme == QuantScheme::int8_symmetric && spec.granularity == Granularity::per_channel) {
        continue;  // measured with the seed variants
      }
      KvRow row = gpu_row(input, dtype, spec, "production");
      const QuantLayout layout = quant_layout(spec, rows, cols);
      const std::size_t esize = dtype_size(dtype);
      Rotation rot(host_x.data(), static_cast<std::size_t>(n) * esize, static_cast<std::size_t>(rows * layout.code_cols),
                   static_cast<std::size_t>(n) * esize, stream);
      const bool int4 = spec.scheme == QuantScheme::int4_asymmetric;
      DeviceBuffer scales(static_cast<std::size_t>(layout.scale_count()) * 4);
      DeviceBuffer mins(int4 ? scales.bytes() : 0);
      DeviceBuffer workspace(quantize_workspace_bytes(spec, rows, cols));
      const Workspace ws{workspace.data(), workspace.bytes()};
      const DType code_dtype = int4 ? DType::u8 : DType::i8;
      auto x_view = [&](int c) { return TensorView::matrix(rot.x[c].data(), dtype, Device::cuda, rows, cols); };
      auto q_view = [&](int c) {
        return QuantizedView{TensorView::matrix(rot.codes[c].data(), code_dtype, Device::cuda, rows, layout.code_cols),
                             TensorView::vector(scales.data(), DType::f32, Device::cuda, layout.scale_count()),
                             int4 ? TensorView::vector(mins.data(), DType::f32, Device::cuda, layout.scale_count())
                                  : TensorView{}};
      };
      auto out_view = [&](int c) { return TensorView::matrix(rot.out[c].data(), dtype, Device::cuda, rows, cols); };
      row.quant_fused_ms = gpu_median_ms(
          [&](int i) { quantize(x_view(i % rot.copies), spec, q_view(i % rot.copies), ws, stream, NonFiniteCheck::deferred); },
          stream);
      row.scale_ms = gpu_median_ms(
          [&](int i) { compute_scales(x_view(i % rot.copies), spec, q_view(i % rot.copies), ws, stream, NonFiniteCheck::deferred); },
          stream);
      row.quant_ms = gpu_median_ms(
          [&](int i) { quantize_with_scales(x_view(i % rot.copies), spec, q_view(i % rot.copies), stream); }, stream);
      row.dequant_ms = gpu_median_ms(
          [&](int i) { dequantize(q_view(i % rot.copies), spec, out_view(i % rot.copies), stream); }, stream);
      check_quantize_status(ws, stream);
      rot.poison_outputs(0, stream);
      quantize(x_view(0), spec, q_view(0), ws, stream);
      dequantize(q_view(0), spec, out_view(0), stream);
      const auto out = download<std::uint8_t>(rot.out[0], static_cast<std::size_t>(n) * esize, stream);
      set_metrics(row, error_metrics(x_values.data(), out.data(), dtype, rows, cols, input.query));
      rows_out.push_back(row);
    }
  }
}

}  // namespace lowbit::bench

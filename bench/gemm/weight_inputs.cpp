#include "bench/gemm/weight_inputs.h"

#include <random>

namespace lowbit::bench {

HostWeights make_weights(const WeightOnlySpec& spec, std::int64_t n, std::int64_t k, std::uint64_t seed) {
  const std::int64_t g = spec.group_size;
  const std::int64_t groups = (k + g - 1) / g;
  const std::int64_t code_cols = spec.bits == 8 ? k : (k + 1) / 2;
  std::vector<std::uint8_t> codes(static_cast<std::size_t>(n * code_cols));
  std::vector<float> scales(static_cast<std::size_t>(n * groups)), mins(spec.zero_point ? scales.size() : 0);
  HostWeights w;
  w.dequantized.resize(static_cast<std::size_t>(n * k));
#pragma omp parallel
  {
#pragma omp for schedule(static)
    for (std::int64_t r = 0; r < n; ++r) {
      std::mt19937_64 rng(seed * 1000003u + static_cast<std::uint64_t>(r));
      std::uniform_real_distribution<float> scale(spec.bits == 8 ? 1e-4f : 1e-3f, spec.bits == 8 ? 1e-3f : 1e-2f);
      std::uniform_real_distribution<float> low(-0.08f, 0.0f);
      for (std::int64_t c = 0; c < code_cols; ++c) codes[static_cast<std::size_t>(r * code_cols + c)] = static_cast<std::uint8_t>(rng());
      for (std::int64_t gi = 0; gi < groups; ++gi) {
        scales[static_cast<std::size_t>(r * groups + gi)] = scale(rng);
        if (spec.zero_point) mins[static_cast<std::size_t>(r * groups + gi)] = low(rng);
      }
      for (std::int64_t c = 0; c < k; ++c) {
        const std::size_t gi = static_cast<std::size_t>(r * groups + c / g);
        const float s = formats::to_float(formats::from_float<formats::Half>(scales[gi]));
        double v;
        if (spec.bits == 8) {
          v = static_cast<double>(static_cast<std::int8_t>(codes[static_cast<std::size_t>(r * code_cols + c)])) * s;
        } else {
          const std::uint8_t byte = codes[static_cast<std::size_t>(r * code_cols + c / 2)];
          const int q = c % 2 ? byte >> 4 : byte & 15;
          v = spec.zero_point ? q * static_cast<double>(s) +
                                    formats::to_float(formats::from_float<formats::Half>(mins[gi]))
                              : (q - 8) * static_cast<double>(s);
        }
        w.dequantized[static_cast<std::size_t>(r * k + c)] = formats::from_float<formats::Half>(static_cast<float>(v));
      }
    }
  }
  w.sizes = packed_weight_sizes(spec, n, k);
  w.codes.resize(static_cast<std::size_t>(w.sizes.code_bytes));
  w.scales_packed.resize(static_cast<std::size_t>(w.sizes.scale_count) * 2);
  w.mins_packed.resize(static_cast<std::size_t>(w.sizes.min_count) * 2);
  PackedWeights packed{spec, n, k,
                       TensorView::vector(w.codes.data(), DType::u8, Device::cpu, w.sizes.code_bytes),
                       TensorView::vector(w.scales_packed.data(), spec.act_dtype, Device::cpu, w.sizes.scale_count),
                       spec.zero_point ? TensorView::vector(w.mins_packed.data(), spec.act_dtype, Device::cpu,
                                                            w.sizes.min_count)
                                       : TensorView{}};
  const TensorView codes_view = TensorView::matrix(codes.data(), spec.bits == 8 ? DType::i8 : DType::u8, Device::cpu,
                                                   n, code_cols);
  pack_weights(codes_view, TensorView::matrix(scales.data(), DType::f32, Device::cpu, n, groups),
               spec.zero_point ? TensorView::matrix(mins.data(), DType::f32, Device::cpu, n, groups) : TensorView{},
               packed);
  return w;
}

}  // namespace lowbit::bench

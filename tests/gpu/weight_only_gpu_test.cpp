// The weight-only GEMM kernels (small-M streaming kernel, M <= 16; tiled tensor-core
// kernel above) against the CPU reference, on fresh random inputs: all three weight
// forms, f16 and bf16, group sizes 32 / 64 / 128 / K, with and without bias, shapes
// that are not multiples of any tile, aligned and unaligned activation rows, guarded
// and poisoned buffers.
//
// Tolerance. Both sides use the same dequantized weights (bit for bit, by
// definition) and exact products; they differ only in the order and precision of
// the sum (GPU: FP32 in mma order and split-K order; CPU: FP64). The FP32 sum of K
// terms is within (K + 8) * 2^-24 * sum_k |x_k w_k| of the exact one (recursive
// summation bound, plus the bias), and the final rounding to the act dtype can then
// land one code away, so:
//   |gpu - cpu| <= 2 ulp_act(|cpu|) + (K + 8) * 2^-24 * (sum_k |x_k w_k| + |bias|).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <utility>
#include <vector>

#include "common/expect_error.h"
#include "common/ggml_matrix.h"
#include "common/gpu.h"
#include "common/poison.h"
#include "common/random.h"
#include "cpu/weight_only.h"
#include "core/device_buffer.h"
#include "cuda/weight_only/weight_only_cuda.h"
#include "engine/gguf/repack.h"
#include "formats/float16.h"
#include "formats/weight_pack.h"
#include "lowbit/weight_only.h"

namespace lowbit::test {
namespace {

namespace wo = cuda::weight_only;

// out = x W^T through `variant` where it takes the arguments, else the production choice.
void gemm_with(const TensorView& x, const PackedWeights& w, const TensorView& bias, const TensorView& out,
               const wo::Variant* variant) {
  const wo::Params p = wo::make_params(x, w, bias, out);
  const wo::Form form = wo::form_of(w.spec);
  wo::launch(p, w.spec.act_dtype, form, variant && wo::takes(*variant, p, form) ? *variant : wo::pick(p, form),
             nullptr);
}

// Both small-M kernels (the small-matrix one, where it takes the shape, and the
// streaming one), in turn.
const wo::Variant kSmallKernels[] = {wo::Variant{wo::Kernel::small_gemv}, wo::Variant{wo::Kernel::gemv}};

using formats::BFloat16;
using formats::Half;

double act_value(DType dtype, std::uint16_t bits) {
  return dtype == DType::f16 ? formats::to_float(Half{bits}) : formats::to_float(BFloat16{bits});
}
std::uint16_t to_act_bits(DType dtype, float value) {
  return dtype == DType::f16 ? formats::from_float<Half>(value).bits : formats::from_float<BFloat16>(value).bits;
}
double ulp_at(DType dtype, double value) {
  const int e = std::max(std::ilogb(std::max(std::fabs(value), 1e-30)), dtype == DType::f16 ? -14 : -126);
  return std::ldexp(1.0, e - (dtype == DType::f16 ? 10 : 7));
}

// A packed weight on the host, its device copy, and its dequantized values.
struct DeviceWeights {
  std::vector<std::uint8_t> codes;
  std::vector<std::uint16_t> scales, mins;
  PackedWeights host, device;
  core::DeviceBuffer d_codes, d_scales, d_mins;
  std::vector<double> w;  // [N x K] dequantized
};

void make_weights(Rng& rng, const WeightOnlySpec& spec, std::int64_t n, std::int64_t k, DeviceWeights& out) {
  const std::int64_t groups = (k + spec.group_size - 1) / spec.group_size;
  const std::int64_t code_cols = spec.bits == 4 ? (k + 1) / 2 : k;
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(-0.05f, 0.05f), min(-0.5f, 0.5f);
  std::vector<std::uint8_t> codes(static_cast<std::size_t>(n * code_cols));
  for (auto& b : codes) b = static_cast<std::uint8_t>(byte(rng));
  std::vector<float> scales(static_cast<std::size_t>(n * groups)), mins;
  for (auto& s : scales) s = scale(rng);
  const bool zp = spec.bits == 4 && spec.zero_point;
  if (zp) {
    mins.resize(scales.size());
    for (auto& m : mins) m = min(rng);
  }
  const PackedWeightSizes sizes = packed_weight_sizes(spec, n, k);
  out.codes.assign(static_cast<std::size_t>(sizes.code_bytes), 0);
  out.scales.assign(static_cast<std::size_t>(sizes.scale_count), 0);
  out.mins.assign(static_cast<std::size_t>(sizes.min_count), 0);
  out.host = PackedWeights{spec, n, k, TensorView::vector(out.codes.data(), DType::u8, Device::cpu, sizes.code_bytes),
                           TensorView::vector(out.scales.data(), spec.act_dtype, Device::cpu, sizes.scale_count),
                           zp ? TensorView::vector(out.mins.data(), spec.act_dtype, Device::cpu, sizes.min_count)
                              : TensorView{}};
  cpu::pack_weights(TensorView::matrix(codes.data(), spec.bits == 4 ? DType::u8 : DType::i8, Device::cpu, n, code_cols),
                    TensorView::matrix(scales.data(), DType::f32, Device::cpu, n, groups),
                    zp ? TensorView::matrix(mins.data(), DType::f32, Device::cpu, n, groups) : TensorView{}, out.host);
  out.d_codes = core::DeviceBuffer(out.codes.size());
  out.d_scales = core::DeviceBuffer(out.scales.size() * 2);
  LOWBIT_CUDA_CHECK(cudaMemcpy(out.d_codes.data(), out.codes.data(), out.codes.size(), cudaMemcpyHostToDevice));
  LOWBIT_CUDA_CHECK(cudaMemcpy(out.d_scales.data(), out.scales.data(), out.scales.size() * 2, cudaMemcpyHostToDevice));
  out.device = out.host;
  out.device.codes = TensorView::vector(out.d_codes.data(), DType::u8, Device::cuda, sizes.code_bytes);
  out.device.scales = TensorView::vector(out.d_scales.data(), spec.act_dtype, Device::cuda, sizes.scale_count);
  if (zp) {
    out.d_mins = core::DeviceBuffer(out.mins.size() * 2);
    LOWBIT_CUDA_CHECK(cudaMemcpy(out.d_mins.data(), out.mins.data(), out.mins.size() * 2, cudaMemcpyHostToDevice));
    out.device.mins = TensorView::vector(out.d_mins.data(), spec.act_dtype, Device::cuda, sizes.min_count);
  }
  // Dequantized weights through the layout's accessors (for the error bound).
  const formats::WeightPackLayout layout = formats::make_weight_pack_layout(spec.bits, spec.zero_point,
                                                                            spec.group_size, n, k);
  out.w.resize(static_cast<std::size_t>(n * k));
  for (std::int64_t r = 0; r < n; ++r) {
    for (std::int64_t c = 0; c < k; ++c) {
      const formats::WeightPackLayout::CodePlace place = layout.code_place(r, c);
      const int stored = (out.codes[place.byte] >> place.shift) & (spec.bits == 8 ? 0xff : 0xf);
      const int q = formats::weight_code_value(layout, stored);
      const std::int64_t s = layout.scale_index(r, layout.group_of(c));
      const double sv = act_value(spec.act_dtype, out.scales[s]);
      const double mv = zp ? act_value(spec.act_dtype, out.mins[s]) : 0.0;
      out.w[r * k + c] = act_value(spec.act_dtype, to_act_bits(spec.act_dtype, static_cast<float>(q * sv + mv)));
    }
  }
}

void run_case(Rng& rng, const WeightOnlySpec& spec, const DeviceWeights& w, std::int64_t m, bool with_bias,
              bool aligned_rows, const wo::Variant* variant = nullptr) {
  const std::int64_t n = w.host.n, k = w.host.k;
  const DType dt = spec.act_dtype;
  SCOPED_TRACE(testing::Message() << "bits " << spec.bits << " zero_point " << spec.zero_point << " group "
                                  << spec.group_size << " " << dtype_name(dt) << " M " << m << " N " << n << " K " << k
                                  << " bias " << with_bias << " aligned rows " << aligned_rows);
  const std::int64_t ldx = aligned_rows ? (k + 7) / 8 * 8 : k + 1, ldo = n + 3;
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  std::vector<std::uint16_t> x(static_cast<std::size_t>(m * ldx)), bias(static_cast<std::size_t>(n));
  for (auto& v : x) v = to_act_bits(dt, value(rng));
  for (auto& v : bias) v = to_act_bits(dt, value(rng));

  GuardedBuffer d_x(x.size() * 2, aligned_rows ? 0 : 2), d_bias(bias.size() * 2), d_out(m * ldo * 2);
  d_x.poison(kFloatPoison);
  d_x.upload(x.data(), x.size() * 2);
  d_bias.poison(kFloatPoison);
  d_bias.upload(bias.data(), bias.size() * 2);
  d_out.poison(kFloatPoison);
  gemm_with(TensorView::matrix(d_x.data(), dt, Device::cuda, m, k, ldx), w.device,
            with_bias ? TensorView::vector(d_bias.data(), dt, Device::cuda, n) : TensorView{},
            TensorView::matrix(d_out.data(), dt, Device::cuda, m, n, ldo), variant);
  LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<std::uint16_t> got = download<std::uint16_t>(d_out.data(), static_cast<std::size_t>(m * ldo));
  EXPECT_TRUE(d_out.guards_intact("out"));
  EXPECT_TRUE(d_x.guards_intact("x"));

  std::vector<std::uint16_t> want(static_cast<std::size_t>(m * ldo), 0xffff);
  cpu::weight_only_gemm(TensorView::matrix(x.data(), dt, Device::cpu, m, k, ldx), w.host,
                        with_bias ? TensorView::vector(bias.data(), dt, Device::cpu, n) : TensorView{},
                        TensorView::matrix(want.data(), dt, Device::cpu, m, n, ldo));
  int failures = 0;
  for (std::int64_t r = 0; r < m && failures < 5; ++r) {
    for (std::int64_t c = 0; c < ldo && failures < 5; ++c) {
      const std::uint16_t g = got[r * ldo + c];
      if (c >= n) {  // row padding: never written
        if (g != 0xffff) ++failures, ADD_FAILURE() << "wrote row padding at row " << r << " col " << c;
        continue;
      }
      double magnitude = with_bias ? std::fabs(act_value(dt, bias[c])) : 0.0;
      for (std::int64_t i = 0; i < k; ++i) magnitude += std::fabs(act_value(dt, x[r * ldx + i]) * w.w[c * k + i]);
      const double ref = act_value(dt, want[r * ldo + c]);
      const double tol = 2 * ulp_at(dt, ref) + static_cast<double>(k + 8) * std::ldexp(magnitude, -24);
      const double diff = std::fabs(act_value(dt, g) - ref);
      if (!(diff <= tol)) {
        ++failures;
        ADD_FAILURE() << "row " << r << " col " << c << ": gpu " << act_value(dt, g) << " (0x" << std::hex << g
                      << std::dec << "), cpu " << ref << ", |diff| " << diff << " > tol " << tol;
      }
    }
  }
}

class WeightOnlyGpu : public GpuTest {};

const WeightOnlySpec kForms[] = {
    {4, 32, true, DType::f16},   {4, 64, false, DType::f16},   {8, 128, false, DType::f16},
    {4, 128, true, DType::bf16}, {4, 32, false, DType::bf16},  {8, 64, false, DType::bf16},
};

TEST_F(WeightOnlyGpu, MatchesTheCpuReference) {
  LOWBIT_TEST_RNG(rng);
  struct Shape {
    std::int64_t n, k;
  };
  int round = 0;
  for (const wo::Variant& small : kSmallKernels) {
    const bool streaming = small.kernel == wo::Kernel::gemv;
    SCOPED_TRACE(streaming ? "streaming kernel up to M = 16" : "small-matrix kernel up to M = 16");
    for (const WeightOnlySpec& form : kForms) {
      for (const Shape shape : {Shape{13, 100}, Shape{136, 392}, Shape{300, 1000}}) {
        for (const bool per_channel : {false, true}) {
          WeightOnlySpec spec = form;
          if (per_channel) spec.group_size = shape.k;
          DeviceWeights w;
          make_weights(rng, spec, shape.n, shape.k, w);
          for (const std::int64_t m : {1, 2, 7, 16, 17, 33, 128, 300}) {
            if (shape.n == 300 && m > 33 && per_channel) continue;  // keep the suite to seconds
            if (streaming && m > 16) continue;                       // the tiled kernel: done once
            ++round;
            run_case(rng, spec, w, m, /*with_bias=*/round % 2 == 0, /*aligned_rows=*/round % 3 != 0, &small);
            if (HasFailure()) return;
          }
        }
      }
    }
  }
}

// A decode-sized shape: many tiles and steps, so the split-K and the prefetch run;
// M = 8 / 9 on either side of the second row group. Then a wide one for M > 8.
TEST_F(WeightOnlyGpu, DecodeShape) {
  LOWBIT_TEST_RNG(rng);
  for (const DType dt : {DType::f16, DType::bf16}) {
    WeightOnlySpec spec{4, 32, true, dt};
    DeviceWeights w;
    make_weights(rng, spec, 1000, 2048, w);
    for (const wo::Variant& small : kSmallKernels) {
      SCOPED_TRACE(small.kernel == wo::Kernel::gemv ? "streaming kernel" : "small-matrix kernel");
      for (const std::int64_t m : {1, 8, 9, 16}) run_case(rng, spec, w, m, true, true, &small);
    }
  }
  // Wide enough for the staged-activation kernel's production shapes at M > 8 (H100:
  // two 8-warp blocks a SM at group 128, one balanced block a SM at group 32), with a
  // partial last tile group, a ragged K and an unaligned activation row.
  for (const WeightOnlySpec spec : {WeightOnlySpec{4, 32, true, DType::f16}, WeightOnlySpec{4, 128, true, DType::f16},
                                    WeightOnlySpec{4, 32, false, DType::bf16}}) {
    DeviceWeights w;
    make_weights(rng, spec, 20003, 650, w);
    for (const std::int64_t m : {9, 16}) run_case(rng, spec, w, m, m == 16, m == 16);
    if (HasFailure()) return;
  }
}

// The tiled kernel's K split over a cluster (2 to 8 blocks, by the step count), a
// partial last block of N, a ragged K, and both M tiles (32 and 64 rows).
TEST_F(WeightOnlyGpu, TiledSplitK) {
  LOWBIT_TEST_RNG(rng);
  const WeightOnlySpec specs[] = {{4, 32, true, DType::f16}, {8, 128, false, DType::bf16}, {4, 64, false, DType::f16}};
  for (const WeightOnlySpec& spec : specs) {
    for (const std::int64_t k : {2100, 8292}) {
      DeviceWeights w;
      make_weights(rng, spec, 520, k, w);
      for (const std::int64_t m : {20, 64, 65}) run_case(rng, spec, w, m, m != 64, m != 65);
      if (HasFailure()) return;
    }
  }
}

// Every tunable shape of the small-M kernel (ring depth, chunk of steps per slot,
// tiles per warp) with every K split, staggered or not, with and without programmatic
// dependent launch, on a shape with a partial last tile group, a ragged K (the last
// chunk of a slice partly empty), M on both sides of the second row group, groups 32
// and 128, and an unaligned activation row.
TEST_F(WeightOnlyGpu, GemvVariants) {
  LOWBIT_TEST_RNG(rng);
  for (const std::int64_t group : {32, 128}) {
    const WeightOnlySpec spec{4, group, true, DType::f16};
    DeviceWeights w;
    make_weights(rng, spec, 1000, 1700, w);
    for (int shape = 0; shape < wo::kGemvShapes; ++shape) {
      for (const int k_slices : {0, 1, 2, 4, 8}) {
        const int mode = (shape + k_slices) % 4;  // (rotate, pdl): every pair over the shapes
        const bool rotate = mode % 2 == 1;
        const int pdl = mode / 2 == 0 ? 0 : mode == 2 ? 1 : 2;
        SCOPED_TRACE(testing::Message() << "shape " << shape << " k_slices " << k_slices << " rotate " << rotate
                                        << " pdl " << pdl);
        const wo::Variant variant{wo::Kernel::gemv, shape, k_slices, rotate, pdl};
        for (const std::int64_t m : {1, 5, 9, 16}) run_case(rng, spec, w, m, m % 2 == 1, m != 5 && m != 9, &variant);
        if (HasFailure()) return;
      }
    }
  }
}

// Back-to-back launches on one stream where each consumes the previous output and the
// last overwrites the first one's input: the programmatic dependent launch of the
// small-M kernel (weights prefetched before griddepcontrol.wait) must still read the
// activations and write the output only after its predecessor. Each chained result
// must equal, bit for bit, the same product launched alone after a synchronization.
TEST_F(WeightOnlyGpu, ChainedLaunchesSeeTheirInputs) {
  LOWBIT_TEST_RNG(rng);
  const std::int64_t m = 3, k0 = 1000, n1 = 520, n2 = 1000;
  for (const WeightOnlySpec spec : {WeightOnlySpec{4, 32, true, DType::f16}, WeightOnlySpec{8, 128, false, DType::bf16}}) {
    DeviceWeights w1, w2;
    make_weights(rng, spec, n1, k0, w1);
    make_weights(rng, spec, n2, n1, w2);
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    std::vector<std::uint16_t> x(static_cast<std::size_t>(m * k0));
    for (auto& v : x) v = to_act_bits(spec.act_dtype, value(rng));
    core::DeviceBuffer a(x.size() * 2), b(static_cast<std::size_t>(m * n1) * 2);
    const DType dt = spec.act_dtype;
    const TensorView av = TensorView::matrix(a.data(), dt, Device::cuda, m, k0);
    const TensorView bv = TensorView::matrix(b.data(), dt, Device::cuda, m, n1);
    for (const int pdl : {3, 2, 1, 0}) {  // 3: the small-matrix kernel (always PDL)
      SCOPED_TRACE(testing::Message() << dtype_name(dt) << (pdl == 3 ? " small-matrix kernel" : " pdl ") << pdl);
      const wo::Variant variant =
          pdl == 3 ? wo::Variant{wo::Kernel::small_gemv} : wo::Variant{wo::Kernel::gemv, -1, 0, false, pdl};
      LOWBIT_CUDA_CHECK(cudaMemcpy(a.data(), x.data(), x.size() * 2, cudaMemcpyHostToDevice));
      LOWBIT_CUDA_CHECK(cudaMemset(b.data(), 0xff, static_cast<std::size_t>(m * n1) * 2));  // NaN if read early
      LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
      // a -> b -> a -> b -> a, no synchronization in between.
      constexpr int kRounds = 4;
      for (int i = 0; i < kRounds; ++i) {
        gemm_with(i % 2 == 0 ? av : bv, i % 2 == 0 ? w1.device : w2.device, TensorView{}, i % 2 == 0 ? bv : av,
                  &variant);
      }
      LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
      const std::vector<std::uint16_t> chained = download<std::uint16_t>(a.data(), x.size());
      // The same chain, one synchronized launch at a time.
      LOWBIT_CUDA_CHECK(cudaMemcpy(a.data(), x.data(), x.size() * 2, cudaMemcpyHostToDevice));
      for (int i = 0; i < kRounds; ++i) {
        gemm_with(i % 2 == 0 ? av : bv, i % 2 == 0 ? w1.device : w2.device, TensorView{}, i % 2 == 0 ? bv : av,
                  &variant);
        LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
      }
      const std::vector<std::uint16_t> serial = download<std::uint16_t>(a.data(), x.size());
      int differing = 0;
      for (std::size_t i = 0; i < serial.size(); ++i) differing += chained[i] != serial[i];
      EXPECT_EQ(differing, 0) << "of " << serial.size() << " outputs";
    }
  }
}


// ---- GGML block forms (Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) ---------------------------------
//
// Random ggml blocks (random_blocks.h) repacked by the engine (repack.h), on the GPU
// against the CPU reference on the same packed bytes: the same f16 weights (both read
// formats::block_weight_at's definition; gguf_block_repack_test checks it against ggml's
// decoder), so the tolerance is run_case's FP32-summation bound.

struct BlockCase {
  std::uint32_t type;
  WeightBlocks blocks;
  std::int64_t k;  // awkward: Q5_* not a multiple of 128 (a padded last step)
};
const BlockCase kBlockCases[] = {{test::ggml_id::q5_0, WeightBlocks::q5_0, 416},
                                 {test::ggml_id::q5_1, WeightBlocks::q5_1, 288},
                                 {test::ggml_id::q4_k, WeightBlocks::q4_k, 768},
                                 {test::ggml_id::q5_k, WeightBlocks::q5_k, 512},
                                 {test::ggml_id::q6_k, WeightBlocks::q6_k, 768}};

void make_block_weights(Rng& rng, const BlockCase& c, std::int64_t n, std::int64_t k, DeviceWeights& out) {
  const test::GgmlMatrix m = test::random_ggml_matrix(c.type, n, k, rng());
  engine::HostPackedWeights packed = engine::repack_ggml_weight(m.tensor());
  out.codes = std::move(packed.codes);
  out.scales.clear();
  out.mins.clear();
  const auto bytes = static_cast<std::int64_t>(out.codes.size());
  out.host = PackedWeights{packed.spec, n, k, TensorView::vector(out.codes.data(), DType::u8, Device::cpu, bytes),
                           TensorView{}, TensorView{}};
  out.d_codes = core::DeviceBuffer(out.codes.size());
  LOWBIT_CUDA_CHECK(cudaMemcpy(out.d_codes.data(), out.codes.data(), out.codes.size(), cudaMemcpyHostToDevice));
  out.device = out.host;
  out.device.codes = TensorView::vector(out.d_codes.data(), DType::u8, Device::cuda, bytes);
  const formats::WeightPackLayout layout =
      formats::make_block_pack_layout(static_cast<formats::WeightBlocks>(c.blocks), n, k);
  out.w.resize(static_cast<std::size_t>(n * k));
  for (std::int64_t r = 0; r < n; ++r) {
    for (std::int64_t i = 0; i < k; ++i) {
      out.w[r * k + i] = formats::to_float(formats::block_weight_at(layout, out.codes.data(), r, i));
    }
  }
}

TEST_F(WeightOnlyGpu, GgmlBlockFormsMatchTheCpuReference) {
  LOWBIT_TEST_RNG(rng);
  const wo::Variant gemv{wo::Kernel::gemv}, tiled{wo::Kernel::mma};
  for (const BlockCase& c : kBlockCases) {
    for (const std::int64_t n : {std::int64_t{37}, std::int64_t{200}}) {
      SCOPED_TRACE(testing::Message() << weight_blocks_name(c.blocks) << " N " << n << " K " << c.k);
      DeviceWeights w;
      make_block_weights(rng, c, n, c.k, w);
      const WeightOnlySpec spec = w.host.spec;
      for (const std::int64_t m : {1, 3, 16, 17, 100}) {
        // The production choice, then each kernel that takes M (streaming GEMV up to 16,
        // the tiled kernel at any M), aligned and unaligned activation rows.
        run_case(rng, spec, w, m, m % 2 == 1, true);
        if (m <= wo::kGemvMaxRows) run_case(rng, spec, w, m, false, false, &gemv);
        run_case(rng, spec, w, m, m == 3, m != 16, &tiled);
      }
    }
  }
}

// Decode-sized shapes (the split-K choices of both kernels): one M each.
TEST_F(WeightOnlyGpu, GgmlBlockFormsAtModelShapes) {
  LOWBIT_TEST_RNG(rng);
  for (const BlockCase& c : kBlockCases) {
    for (const auto& [n, k] : {std::pair<std::int64_t, std::int64_t>{2048, 1024}, {264, 4096}}) {
      SCOPED_TRACE(testing::Message() << weight_blocks_name(c.blocks) << " N " << n << " K " << k);
      DeviceWeights w;
      make_block_weights(rng, c, n, k, w);
      run_case(rng, w.host.spec, w, 1, false, true);
      run_case(rng, w.host.spec, w, 16, true, true);
      run_case(rng, w.host.spec, w, 64, false, true);
    }
  }
}

TEST_F(WeightOnlyGpu, GgmlBlockFormsRefuseOtherKernelsAndBf16) {
  LOWBIT_TEST_RNG(rng);
  DeviceWeights w;
  make_block_weights(rng, kBlockCases[2], 16, 256, w);
  core::DeviceBuffer x(256 * 2), out(16 * 2);
  const wo::Params p = wo::make_params(TensorView::matrix(x.data(), DType::f16, Device::cuda, 1, 256), w.device,
                                       TensorView{}, TensorView::matrix(out.data(), DType::f16, Device::cuda, 1, 16));
  EXPECT_FALSE(wo::takes(wo::Variant{wo::Kernel::small_gemv}, p, wo::Form::q4_k));
  EXPECT_EQ(wo::pick(p, wo::Form::q4_k).kernel, wo::Kernel::gemv);
  PackedWeights bf16 = w.device;
  bf16.spec.act_dtype = DType::bf16;
  EXPECT_LOWBIT_ERROR(lowbit::weight_only_gemm(TensorView::matrix(x.data(), DType::bf16, Device::cuda, 1, 256), bf16,
                                       TensorView{}, TensorView::matrix(out.data(), DType::bf16, Device::cuda, 1, 16),
                                       nullptr),
                      "spec.act_dtype: Q4_K weights take f16 activations");
}

}  // namespace
}  // namespace lowbit::test

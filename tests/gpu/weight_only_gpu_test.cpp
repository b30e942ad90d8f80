// The weight-only GEMM kernels (small-M streaming kernel, M <= 16; tiled tensor-core
// kernel above) against the CPU reference, on fresh random inputs: all three weight
// forms, f16 and bf16, group sizes 32 / 64 / 128 / K, with and without bias, shapes
// that are not multiples of any tile, aligned and unaligned activation rows, guarded
// and poisoned buffers. The cases and their tolerance: common/weight_only_cases.h. M > 16
// takes the production choice (on Hopper the wgmma kernel, which
// weight_only_wgmma_gpu_test.cpp covers in depth); TiledSplitK names the mma.sync kernel.
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
#include "common/weight_only_cases.h"
#include "cpu/weight_only.h"
#include "core/device_buffer.h"
#include "cuda/model/model_cuda.h"
#include "cuda/weight_only/weight_only_cuda.h"
#include "engine/gguf/repack.h"
#include "formats/float16.h"
#include "formats/weight_pack.h"
#include "lowbit/weight_only.h"

namespace lowbit::test {
namespace {

// Both small-M kernels (the small-matrix one, where it takes the shape, and the
// streaming one), in turn.
const wo::Variant kSmallKernels[] = {wo::Variant{wo::Kernel::small_gemv}, wo::Variant{wo::Kernel::gemv}};

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

// The production GEMVs of group-32 products at M <= 8 at model widths (on a 132-SM device:
// wide, between and narrow grids, short and long K; between with long K is the 8B QKV's
// class at M <= 4), a ragged K, bias and unaligned rows in turn.
TEST_F(WeightOnlyGpu, GemvUpToEightRowsAtModelWidths) {
  LOWBIT_TEST_RNG(rng);
  struct Shape {
    std::int64_t n, k;
  };
  for (const WeightOnlySpec spec : {WeightOnlySpec{4, 32, true, DType::f16}, WeightOnlySpec{4, 32, false, DType::bf16}}) {
    for (const Shape shape :
         {Shape{20003, 650}, Shape{6000, 2100}, Shape{6000, 4200}, Shape{1000, 4500}, Shape{1000, 2048}}) {
      DeviceWeights w;
      make_weights(rng, spec, shape.n, shape.k, w);
      int round = 0;
      for (const std::int64_t m : {1, 3, 4, 6, 8}) {
        run_case(rng, spec, w, m, round % 2 == 0, round % 3 != 2);
        ++round;
      }
      if (HasFailure()) return;
    }
  }
}

// The tiled kernel's K split over a cluster (2 to 8 blocks, by the step count), a
// partial last block of N, a ragged K, and both M tiles (32 and 64 rows).
TEST_F(WeightOnlyGpu, TiledSplitK) {
  LOWBIT_TEST_RNG(rng);
  const WeightOnlySpec specs[] = {{4, 32, true, DType::f16}, {8, 128, false, DType::bf16}, {4, 64, false, DType::f16}};
  const wo::Variant tiled{wo::Kernel::mma};
  for (const WeightOnlySpec& spec : specs) {
    for (const std::int64_t k : {2100, 8292}) {
      DeviceWeights w;
      make_weights(rng, spec, 520, k, w);
      for (const std::int64_t m : {20, 64, 65}) run_case(rng, spec, w, m, m != 64, m != 65, &tiled);
      if (HasFailure()) return;
    }
  }
}

// Every tunable shape of the small-M kernel (ring depth, chunk of steps per slot,
// tiles per warp) with every K split, staggered or not, with and without programmatic
// dependent launch, on a shape with a partial last tile group, a ragged K (the last
// chunk of a slice partly empty), M on both sides of the second row group and up to the
// table's four (kGemvShapeMaxRows), groups 32 and 128, and an unaligned activation row.
TEST_F(WeightOnlyGpu, GemvVariants) {
  LOWBIT_TEST_RNG(rng);
  for (const std::int64_t group : {32, 128}) {
    const WeightOnlySpec spec{4, group, true, DType::f16};
    DeviceWeights w;
    make_weights(rng, spec, 1000, 1700, w);
    for (int shape = 0; shape < wo::kGemvShapes; ++shape) {
      // Under the sanitizer one k_slices a shape (each value over the shapes) and two M.
      const std::vector<int> all_slices{0, 1, 2, 4, 8};
      for (const int k_slices : sanitizer_subset(all_slices, {static_cast<std::size_t>(shape) % all_slices.size()})) {
        const int mode = (shape + k_slices) % 4;  // (rotate, pdl): every pair over the shapes
        const bool rotate = mode % 2 == 1;
        const int pdl = mode / 2 == 0 ? 0 : mode == 2 ? 1 : 2;
        SCOPED_TRACE(testing::Message() << "shape " << shape << " k_slices " << k_slices << " rotate " << rotate
                                        << " pdl " << pdl);
        const wo::Variant variant{wo::Kernel::gemv, shape, k_slices, rotate, pdl};
        for (const std::int64_t m : sanitizer_subset<std::int64_t>({1, 5, 9, 16, 17, 32}, {1, 5})) {
          run_case(rng, spec, w, m, m % 2 == 1, m != 5 && m != 9, &variant);
        }
        if (HasFailure()) return;
      }
    }
  }
}

// The staged-activation shapes with K split over a cluster (Variant::k_parts 1 to 8, with
// the k-slices of the rule and 2): parts of 1 to 4 steps a warp and, at 8 parts x 2
// slices over 14 steps, warps with none; a partial last tile group, a ragged K, M from 1
// to the table's 32, bias and unaligned activation rows in turn.
TEST_F(WeightOnlyGpu, GemvKPartsOverACluster) {
  LOWBIT_TEST_RNG(rng);
  int round = 0;
  for (const std::int64_t group : {32, 128}) {
    const WeightOnlySpec spec{4, group, true, DType::f16};
    DeviceWeights w;
    make_weights(rng, spec, 1000, 1700, w);
    for (int shape = 0; shape < wo::kGemvShapes; ++shape) {
      if (!wo::gemv_shape_takes_k_parts(shape)) continue;
      for (const int parts : sanitizer_subset<int>({1, 2, 3, 5, 8}, {static_cast<std::size_t>(shape) % 5})) {
        for (const int k_slices : {0, 2}) {
          SCOPED_TRACE(testing::Message() << "group " << group << " shape " << shape << " k_parts " << parts
                                          << " k_slices " << k_slices);
          wo::Variant variant{wo::Kernel::gemv, shape, k_slices};
          variant.k_parts = parts;
          for (const std::int64_t m : sanitizer_subset<std::int64_t>({1, 9, 16, 32}, {2})) {
            ++round;
            run_case(rng, spec, w, m, round % 2 == 0, round % 3 != 0, &variant);
          }
          if (HasFailure()) return;
        }
      }
    }
  }
  // Other kernels and shapes refuse K parts by name; so do counts past a cluster's 8.
  wo::Params p;
  p.m = 16;
  wo::Variant tiled{wo::Kernel::mma};
  tiled.k_parts = 2;
  EXPECT_FALSE(wo::takes(tiled, p, wo::Form::q4_zero_point));
  wo::Variant streaming{wo::Kernel::gemv, 0};
  streaming.k_parts = 2;
  EXPECT_FALSE(wo::takes(streaming, p, wo::Form::q4_zero_point));
  wo::Variant staged{wo::Kernel::gemv, 9};
  staged.k_parts = wo::kGemvMaxParts + 1;
  EXPECT_FALSE(wo::takes(staged, p, wo::Form::q4_zero_point));
  staged.k_parts = wo::kGemvMaxParts;
  EXPECT_TRUE(wo::takes(staged, p, wo::Form::q4_zero_point));
}

// The SwiGLU epilogue (Params::swiglu: the N rows are gate and up in alternating tiles of
// 8): out equals, bit for bit, the same GEMV variant with the plain epilogue followed by
// silu_mul over the tiles, at M = 1..16, for the rules and every shape of the table, with
// and without k-slices; the output's row gap stays poisoned.
TEST_F(WeightOnlyGpu, SwigluEpilogueEqualsTheProductThenSiluMul) {
  LOWBIT_TEST_RNG(rng);
  const std::int64_t f = 520, k = 1000, ldo = f + 5;
  for (const WeightOnlySpec spec : {WeightOnlySpec{4, 32, true, DType::f16}, WeightOnlySpec{4, 128, false, DType::f16},
                                    WeightOnlySpec{8, 32, false, DType::f16}}) {
    DeviceWeights w;
    make_weights(rng, spec, 2 * f, k, w);
    const wo::Form form = wo::form_of(spec);
    std::vector<wo::Variant> variants{wo::Variant{wo::Kernel::gemv}};
    if (form == wo::Form::q4_zero_point) {
      for (int shape = 0; shape < wo::kGemvShapes; ++shape) {
        if (!under_sanitizer() || shape % 4 == 0) variants.push_back({wo::Kernel::gemv, shape, shape % 3 == 0 ? 2 : 0});
      }
    }
    for (const wo::Variant& v : variants) {
      for (const std::int64_t m : {1, 3, 9, 16}) {
        SCOPED_TRACE(testing::Message() << "bits " << spec.bits << " group " << spec.group_size << " shape " << v.shape
                                        << " k_slices " << v.k_slices << " M " << m);
        std::uniform_real_distribution<float> value(-1.0f, 1.0f);
        std::vector<std::uint16_t> x(static_cast<std::size_t>(m * k));
        for (auto& e : x) e = to_act_bits(DType::f16, value(rng));
        GuardedBuffer d_x(x.size() * 2), d_gu(static_cast<std::size_t>(m * 2 * f) * 2),
            d_want(static_cast<std::size_t>(m * f) * 2), d_got(static_cast<std::size_t>(m * ldo) * 2);
        d_x.upload(x.data(), x.size() * 2);
        d_gu.poison(kFloatPoison);
        d_want.poison(kFloatPoison);
        d_got.poison(kFloatPoison);
        const TensorView xv = TensorView::matrix(d_x.data(), DType::f16, Device::cuda, m, k);
        const wo::Params plain = wo::make_params(xv, w.device, TensorView{},
                                                 TensorView::matrix(d_gu.data(), DType::f16, Device::cuda, m, 2 * f));
        ASSERT_TRUE(wo::takes(v, plain, form));
        wo::launch(plain, DType::f16, form, v, nullptr);
        cuda::model::silu_mul(static_cast<const std::uint16_t*>(d_gu.data()), m, f,
                              static_cast<std::uint16_t*>(d_want.data()), nullptr, /*swiglu_tiles=*/true);
        wo::weight_only_gemm_swiglu(xv, w.device, TensorView::matrix(d_got.data(), DType::f16, Device::cuda, m, f, ldo),
                                    nullptr, v.shape < 0 ? nullptr : &v);
        LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
        EXPECT_TRUE(d_got.guards_intact("out"));
        const std::vector<std::uint16_t> want = download<std::uint16_t>(d_want.data(), static_cast<std::size_t>(m * f));
        const std::vector<std::uint16_t> got = download<std::uint16_t>(d_got.data(), static_cast<std::size_t>(m * ldo));
        int bad = 0;
        for (std::int64_t i = 0; i < m; ++i) {
          for (std::int64_t j = 0; j < ldo; ++j) {
            const std::uint16_t g = got[static_cast<std::size_t>(i * ldo + j)];
            if (j >= f) {  // the row gap: never written
              if (g != (kFloatPoison | kFloatPoison << 8) && bad++ < 5) ADD_FAILURE() << "row " << i << " gap " << j;
              continue;
            }
            const std::uint16_t e = want[static_cast<std::size_t>(i * f + j)];
            if (g != e && bad++ < 5) ADD_FAILURE() << "row " << i << " channel " << j << ": fused " << g << ", separate " << e;
          }
        }
        ASSERT_EQ(bad, 0);
      }
    }
  }
  // Its limits, named before any launch.
  DeviceWeights w;
  make_weights(rng, WeightOnlySpec{4, 32, true, DType::f16}, 2 * f, k, w);
  EXPECT_LOWBIT_ERROR(wo::weight_only_gemm_swiglu(TensorView::matrix(nullptr, DType::f16, Device::cuda, 17, k), w.device,
                                                  TensorView::matrix(nullptr, DType::f16, Device::cuda, 17, f), nullptr),
                      "the SwiGLU epilogue is the GEMV's: M = 17");
  EXPECT_LOWBIT_ERROR(wo::weight_only_gemm_swiglu(TensorView::matrix(nullptr, DType::f16, Device::cuda, 4, k), w.device,
                                                  TensorView::matrix(nullptr, DType::f16, Device::cuda, 4, 2 * f), nullptr),
                      "the SwiGLU output is [4 x 520]");
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
    for (const int pdl : {4, 3, 2, 1, 0}) {  // 4: the small-matrix kernel (always PDL)
      SCOPED_TRACE(testing::Message() << dtype_name(dt) << (pdl == 4 ? " small-matrix kernel" : " pdl ") << pdl);
      const wo::Variant variant =
          pdl == 4 ? wo::Variant{wo::Kernel::small_gemv} : wo::Variant{wo::Kernel::gemv, -1, 0, false, pdl};
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


// ---- GGML block forms (Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, Q3_K, Q2_K) ---------------------
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
                                 {test::ggml_id::q6_k, WeightBlocks::q6_k, 768},
                                 {test::ggml_id::q3_k, WeightBlocks::q3_k, 768},
                                 {test::ggml_id::q2_k, WeightBlocks::q2_k, 512}};

// The real value of a block form's weight (formats::block_weight_value before any
// rounding: s q - m with the exact f32 factors) and |s q| + |m|, from the packed unit.
void block_weight_exact(const formats::WeightPackLayout& l, const std::uint8_t* codes, std::int64_t nn, std::int64_t kk,
                        double& exact, double& spread) {
  int q = formats::block_code_at(l, codes, nn, kk);
  auto half_at = [&](std::int64_t byte) {
    return static_cast<double>(
        formats::to_float(formats::Half{static_cast<std::uint16_t>(codes[byte] | (codes[byte + 1] << 8))}));
  };
  auto u16_at = [&](std::int64_t byte) { return static_cast<unsigned>(codes[byte] | (codes[byte + 1] << 8)); };
  const unsigned scale = u16_at(l.lane_scale_byte(nn, kk));
  double s = 0.0, m = 0.0;  // w = s * q' + m, q' = q (Q5_0: q - 16, Q6_K: q - 32, Q3_K: q - 4)
  const unsigned half = kk % 32 < 16 ? scale & 0xffu : scale >> 8;  // the halves forms' byte
  switch (l.blocks) {
    case formats::WeightBlocks::q5_0: s = half_at(l.lane_scale_byte(nn, kk)), q -= 16; break;
    case formats::WeightBlocks::q5_1: s = half_at(l.lane_scale_byte(nn, kk)), m = half_at(l.lane_min_byte(nn, kk)); break;
    case formats::WeightBlocks::q4_k:
    case formats::WeightBlocks::q5_k:
      s = half_at(l.row_factor_byte(nn, kk)) * (scale & 0xffu);
      m = -half_at(l.row_factor_byte(nn, kk) + 2) * (scale >> 8);
      break;
    case formats::WeightBlocks::q6_k:
    case formats::WeightBlocks::q3_k:
      s = half_at(l.row_factor_byte(nn, kk)) * static_cast<std::int8_t>(half);
      q -= l.blocks == formats::WeightBlocks::q6_k ? 32 : 4;
      break;
    case formats::WeightBlocks::q2_k:
      s = half_at(l.row_factor_byte(nn, kk)) * (half & 15u);
      m = -half_at(l.row_factor_byte(nn, kk) + 2) * (half >> 4);
      break;
    case formats::WeightBlocks::none: break;
  }
  exact = s * q + m;
  spread = std::fabs(s * q) + std::fabs(m);
}

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
  out.exact.resize(out.w.size());
  out.spread.resize(out.w.size());
  for (std::int64_t r = 0; r < n; ++r) {
    for (std::int64_t i = 0; i < k; ++i) {
      out.w[r * k + i] = formats::to_float(formats::block_weight_at(layout, out.codes.data(), r, i));
      block_weight_exact(layout, out.codes.data(), r, i, out.exact[r * k + i], out.spread[r * k + i]);
    }
  }
}

// The wgmma kernel (Hopper only; TMA loads, the block forms' only form) at every tile
// shape with each of `splits` (0: the rule's).
void run_block_wgmma_tiles(Rng& rng, const WeightOnlySpec& spec, const DeviceWeights& w, std::int64_t m,
                           const std::vector<int>& splits) {
  if (!wo::wgmma_available()) return;
  for (const auto& [tile_m, tile_n] :
       {std::pair{32, 0}, std::pair{64, 0}, std::pair{64, 128}, std::pair{64, 256}, std::pair{128, 0}}) {
    for (const int split : splits) {
      wo::Variant variant{wo::Kernel::wgmma};
      variant.tile_m = tile_m;
      variant.tile_n = tile_n;
      variant.k_slices = split;
      variant.tma = true;
      SCOPED_TRACE(testing::Message() << "wgmma tile_m " << tile_m << " tile_n " << tile_n << " splits " << split);
      run_case(rng, spec, w, m, m % 2 == 1, true, &variant, Entry::variant_only);
    }
  }
}

TEST_F(WeightOnlyGpu, GgmlBlockFormsMatchTheCpuReference) {
  LOWBIT_TEST_RNG(rng);
  const wo::Variant gemv{wo::Kernel::gemv}, tiled{wo::Kernel::mma};
  const wo::Variant per_weight{wo::Kernel::gemv, -1, 0, false, -1, 0};  // the GEMV's f16-weight decode
  for (const BlockCase& c : kBlockCases) {
    for (const std::int64_t n : {std::int64_t{37}, std::int64_t{200}}) {
      SCOPED_TRACE(testing::Message() << weight_blocks_name(c.blocks) << " N " << n << " K " << c.k);
      DeviceWeights w;
      make_block_weights(rng, c, n, c.k, w);
      const WeightOnlySpec spec = w.host.spec;
      for (const std::int64_t m : {1, 2, 3, 16, 17, 100}) {
        // The production choice, then each kernel that takes M (streaming GEMV up to 16,
        // the tiled kernel at any M), aligned and unaligned activation rows; M <= 2 the
        // GEMV's both decodes (sub-block by default).
        run_case(rng, spec, w, m, m % 2 == 1, true);
        if (m <= wo::kGemvMaxRows) run_case(rng, spec, w, m, false, false, &gemv);
        if (m <= 2) run_case(rng, spec, w, m, true, true, &per_weight);
        run_case(rng, spec, w, m, m == 3, m != 16, &tiled);
        if (m > wo::kGemvMaxRows) run_block_wgmma_tiles(rng, spec, w, m, {0, 1});
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
      run_case(rng, w.host.spec, w, 2, true, true);
      // The sub-block decode at forced k-slice counts (the partials' combine, 8: 1 step a
      // slice at K 1024).
      for (const int k_slices : {1, 2, 8}) {
        const wo::Variant sub{wo::Kernel::gemv, -1, k_slices, false, -1, 1};
        run_case(rng, w.host.spec, w, 2, false, true, &sub);
      }
      run_case(rng, w.host.spec, w, 16, true, true);
      run_case(rng, w.host.spec, w, 64, false, true);
      // The wgmma kernel's split-K clusters (K 1024 / 4096: 8 / 32 steps; 1 and the rule's
      // in GgmlBlockFormsMatchTheCpuReference).
      run_block_wgmma_tiles(rng, w.host.spec, w, 33, sanitizer_subset<int>({2, 8}, {0}));
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
  EXPECT_FALSE(wo::takes(wo::Variant{wo::Kernel::wgmma}, p, wo::Form::q4_k));  // cp.async loads: not for block forms
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

// The integer GEMM kernels against the CPU path of the same public API (the oracle):
// every INT8 variant that takes the arguments, the public lowbit::int8_gemm and
// lowbit::int4_gemm with cuda views, both B layouts, awkward shapes, padded and
// unaligned rows, misaligned base pointers, all four output types and every
// epilogue form. Results must equal the CPU's bit for bit (i32 exactly; float
// outputs through the one shared epilogue), including untouched row padding;
// outputs are poisoned first and guarded on both sides. Float outputs are also
// checked against FP64 within the rounding the epilogue allows.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "common/compare.h"
#include "common/expect_error.h"
#include "common/gpu.h"
#include "common/int_gemm_oracle.h"
#include "common/poison.h"
#include "common/random.h"
#include "common/storage.h"
#include "cuda/gemm/gemm_cuda.h"
#include "lowbit/gemm.h"

namespace lowbit::test {
namespace {

using cuda::Int8GemmVariant;

struct Problem {
  std::int64_t m, n, k;
  BLayout layout;
  std::int64_t a_pad = 0, b_pad = 0, c_pad = 0;  // spare elements at the end of every row
  std::size_t a_shift = 0, b_shift = 0;          // bytes past an aligned base
  bool all_min = false;                          // every operand value -128 (int4: -8)
};

// How an epilogue is exercised: 0 none, 1 scalar scales, 2 per-row and per-column
// scales + bias, 3 form 2 with scale_c and relu.
struct EpilogueCase {
  DType out = DType::i32;
  int form = 0;
};

std::string describe(const Problem& p, const EpilogueCase& e) {
  return std::to_string(p.m) + "x" + std::to_string(p.n) + "x" + std::to_string(p.k) + " " + b_layout_name(p.layout) +
         " pads " + std::to_string(p.a_pad) + "/" + std::to_string(p.b_pad) + "/" + std::to_string(p.c_pad) +
         " shifts " + std::to_string(p.a_shift) + "/" + std::to_string(p.b_shift) + (p.all_min ? " all-min" : "") +
         " out " + dtype_name(e.out) + " form " + std::to_string(e.form);
}

// Host operands and epilogue vectors of one problem, and their device copies.
struct Operands {
  Problem p;
  bool int4;
  ByteMatrix a, b;
  std::vector<float> sa, sb, bias;
  float scale_c = 1.0f;
  bool relu = false;

  std::int64_t k_storage() const { return int4 ? (p.k + 1) / 2 : p.k; }
};

Operands make_operands(Rng& rng, const Problem& p, bool int4, const EpilogueCase& ec) {
  Operands o{p, int4, {}, {}, {}, {}, {}, 1.0f, false};
  const std::int64_t ks = o.k_storage();
  o.a = random_bytes(rng, p.m, ks, p.a_pad);
  o.b = p.layout == BLayout::k_by_n ? random_bytes(rng, ks, p.n, p.b_pad) : random_bytes(rng, p.n, ks, p.b_pad);
  if (p.all_min) {
    const std::uint8_t min_byte = int4 ? 0x88 : 0x80;
    for (auto& byte : o.a.bytes) byte = min_byte;
    for (auto& byte : o.b.bytes) byte = min_byte;
  }
  std::uniform_real_distribution<float> scale(1e-4f, 2e-2f), unit(-1.0f, 1.0f);
  if (ec.form >= 1) {
    o.sa.resize(ec.form >= 2 ? p.m : 1);
    o.sb.resize(ec.form >= 2 ? p.n : 1);
    for (float& v : o.sa) v = scale(rng);
    for (float& v : o.sb) v = scale(rng);
  }
  if (ec.form >= 2) {
    o.bias.resize(p.n);
    for (float& v : o.bias) v = 50.0f * unit(rng);
  }
  if (ec.form >= 3) {
    o.scale_c = 0.75f;
    o.relu = true;
  }
  return o;
}

GemmEpilogue host_epilogue(Operands& o) {
  GemmEpilogue e;
  auto vec = [](std::vector<float>& v) {
    return v.empty() ? TensorView{} : TensorView::vector(v.data(), DType::f32, Device::cpu, static_cast<std::int64_t>(v.size()));
  };
  e.scale_a = vec(o.sa);
  e.scale_b = vec(o.sb);
  e.bias = vec(o.bias);
  e.scale_c = o.scale_c;
  e.relu = o.relu;
  return e;
}

// The output of the CPU path, in a buffer of M rows of ldc elements prefilled with
// `poison` (the row padding must stay poisoned on both sides).
std::vector<std::uint8_t> cpu_result(Operands& o, DType out, std::uint8_t poison) {
  const std::int64_t ldc = o.p.n + o.p.c_pad;
  std::vector<std::uint8_t> c(static_cast<std::size_t>(o.p.m * ldc) * dtype_size(out), poison);
  const TensorView cv = TensorView::matrix(c.data(), out, Device::cpu, o.p.m, o.p.n, ldc);
  const DType operand = o.int4 ? DType::u8 : DType::i8;
  if (o.int4) {
    int4_gemm(o.a.view(operand), o.b.view(operand), o.p.layout, o.p.k, cv, host_epilogue(o), nullptr);
  } else {
    int8_gemm(o.a.view(operand), o.b.view(operand), o.p.layout, cv, host_epilogue(o), nullptr);
  }
  return c;
}

// How the GPU result is produced: one INT8 variant, or the public entry point.
struct Runner {
  bool is_public;
  Int8GemmVariant variant;
  std::string name() const { return is_public ? "public" : cuda::int8_gemm_variant_name(variant); }
};

// Device copies of the operands; runs `runner`; compares with the CPU result.
void check_on_gpu(Operands& o, const EpilogueCase& ec, const Runner& runner, const std::vector<std::uint8_t>& want) {
  SCOPED_TRACE(runner.name() + ": " + describe(o.p, ec));
  const Problem& p = o.p;
  const DType operand = o.int4 ? DType::u8 : DType::i8;
  const std::int64_t ks = o.k_storage();
  GuardedBuffer a(o.a.bytes.size(), p.a_shift), b(o.b.bytes.size(), p.b_shift);
  a.poison(0x77);
  b.poison(0x77);
  a.upload(o.a.bytes.data(), o.a.bytes.size());
  b.upload(o.b.bytes.data(), o.b.bytes.size());
  auto device_vector = [](const std::vector<float>& v) {
    GuardedBuffer buffer(v.size() * 4);
    buffer.poison(0xff);
    if (!v.empty()) buffer.upload(v.data(), v.size() * 4);
    return buffer;
  };
  GuardedBuffer sa = device_vector(o.sa), sb = device_vector(o.sb), bias = device_vector(o.bias);
  const std::int64_t ldc = p.n + p.c_pad;
  const std::uint8_t poison = ec.out == DType::i32 ? kCodePoison : kFloatPoison;
  GuardedBuffer c(want.size());
  c.poison(poison);

  const TensorView av = TensorView::matrix(a.data(), operand, Device::cuda, p.m, ks, o.a.ld);
  const TensorView bv = p.layout == BLayout::k_by_n ? TensorView::matrix(b.data(), operand, Device::cuda, ks, p.n, o.b.ld)
                                                    : TensorView::matrix(b.data(), operand, Device::cuda, p.n, ks, o.b.ld);
  const TensorView cv = TensorView::matrix(c.data(), ec.out, Device::cuda, p.m, p.n, ldc);
  if (runner.is_public) {
    GemmEpilogue e;
    if (!o.sa.empty()) e.scale_a = TensorView::vector(sa.data(), DType::f32, Device::cuda, static_cast<std::int64_t>(o.sa.size()));
    if (!o.sb.empty()) e.scale_b = TensorView::vector(sb.data(), DType::f32, Device::cuda, static_cast<std::int64_t>(o.sb.size()));
    if (!o.bias.empty()) e.bias = TensorView::vector(bias.data(), DType::f32, Device::cuda, p.n);
    e.scale_c = o.scale_c;
    e.relu = o.relu;
    if (o.int4) {
      int4_gemm(av, bv, p.layout, p.k, cv, e, nullptr);
    } else {
      int8_gemm(av, bv, p.layout, cv, e, nullptr);
    }
  } else {
    cuda::IntGemmArgs args;
    args.a = a.data();
    args.lda = o.a.ld;
    args.b = b.data();
    args.ldb = o.b.ld;
    args.b_layout = p.layout;
    args.out = c.data();
    args.ldc = ldc;
    args.out_dtype = ec.out;
    args.m = p.m;
    args.n = p.n;
    args.k = p.k;
    args.scale_a = o.sa.empty() ? nullptr : static_cast<const float*>(sa.data());
    args.scale_a_per_row = o.sa.size() > 1;
    args.scale_b = o.sb.empty() ? nullptr : static_cast<const float*>(sb.data());
    args.scale_b_per_col = o.sb.size() > 1;
    args.scale_c = o.scale_c;
    args.bias = o.bias.empty() ? nullptr : static_cast<const float*>(bias.data());
    args.relu = o.relu;
    std::string why_not;
    if (!cuda::int8_gemm_supports(runner.variant, args, &why_not)) return;  // covered by the fallback runs
    cuda::int8_gemm(runner.variant, args, nullptr);
  }
  LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<std::uint8_t> got = c.download_bytes();
  ASSERT_TRUE(bitwise_equal(got.data(), want.data(), want.size() / dtype_size(ec.out), ec.out,
                            static_cast<std::size_t>(ldc), "out"));
  ASSERT_TRUE(c.guards_intact("out"));
}

std::vector<Runner> int8_runners(bool with_slow) {
  std::vector<Runner> runners{{true, Int8GemmVariant::production}};
  for (const Int8GemmVariant v : cuda::kInt8GemmVariants) {
    const bool fast = v == Int8GemmVariant::production || v == Int8GemmVariant::wmma || v == Int8GemmVariant::wgmma;
    if (with_slow || fast) runners.push_back({false, v});
  }
  return runners;
}

void run_case(Rng& rng, const Problem& p, bool int4, const EpilogueCase& ec, const std::vector<Runner>& runners) {
  Operands o = make_operands(rng, p, int4, ec);
  const std::uint8_t poison = ec.out == DType::i32 ? kCodePoison : kFloatPoison;
  const std::vector<std::uint8_t> want = cpu_result(o, ec.out, poison);
  for (const Runner& r : runners) {
    check_on_gpu(o, ec, r, want);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// Small awkward shapes from {1, 7, 33, 127, 1000}, each with 16-byte aligned rows
// (the production kernel's path) and with odd padding and shifted bases (the fallbacks).
std::vector<Problem> awkward_problems(bool int4) {
  struct Dims {
    std::int64_t m, n, k;
  };
  const Dims dims[] = {{1, 1, 1},     {7, 33, 127},  {33, 7, 1000}, {127, 1000, 33}, {1000, 127, 7},
                       {1, 1000, 1000}, {1000, 1, 127}, {33, 127, 1000}, {127, 33, 33},  {7, 1000, 1}};
  std::vector<Problem> problems;
  for (const Dims& d : dims) {
    for (const BLayout layout : {BLayout::n_by_k, BLayout::k_by_n}) {
      const std::int64_t ks = int4 ? (d.k + 1) / 2 : d.k;
      auto round16 = [](std::int64_t x) { return (x + 15) / 16 * 16; };
      const std::int64_t b_cols = layout == BLayout::k_by_n ? d.n : ks;
      // Aligned rows: strides rounded up to 16 bytes (+16 spare), 16-byte bases.
      problems.push_back({d.m, d.n, d.k, layout, round16(ks) - ks + 16, round16(b_cols) - b_cols, 2, 0, 0});
      // Unaligned: odd padding, bases one byte past alignment.
      problems.push_back({d.m, d.n, d.k, layout, 3, 5, 1, 1, 1});
    }
  }
  return problems;
}

class IntGemmGpu : public GpuTest {};

TEST_F(IntGemmGpu, Int8AllVariantsExactI32) {
  LOWBIT_TEST_RNG(rng);
  for (const Problem& p : awkward_problems(false)) {
    run_case(rng, p, false, EpilogueCase{}, int8_runners(true));
    if (HasFatalFailure()) return;
  }
}

TEST_F(IntGemmGpu, Int8AllVariantsFloatEpilogues) {
  LOWBIT_TEST_RNG(rng);
  const Problem problems[] = {{33, 127, 1000, BLayout::n_by_k, 8, 8, 3},
                              {127, 33, 200, BLayout::k_by_n, 8, 15, 0},
                              {7, 1000, 33, BLayout::n_by_k, 3, 0, 1, 1, 0}};
  for (const Problem& p : problems) {
    for (const DType out : kFloatDTypes) {
      for (int form = 0; form <= 3; ++form) {
        run_case(rng, p, false, EpilogueCase{out, form}, int8_runners(true));
        if (HasFatalFailure()) return;
      }
    }
  }
}

// Sums next to the INT32 limit: all -128 products at the largest K the API takes.
TEST_F(IntGemmGpu, Int8AllMinimumOperands) {
  LOWBIT_TEST_RNG(rng);
  const std::int64_t k_max = (std::int64_t{1} << 17) - 1;
  const Problem problems[] = {{3, 5, k_max, BLayout::n_by_k, 1, 1, 0},        // ld 131072: production
                              {3, 5, k_max, BLayout::k_by_n, 1, 11, 0},       // k_by_n production
                              {2, 3, k_max, BLayout::n_by_k, 0, 0, 0, 1, 0},  // unaligned: fallback
                              {33, 127, 1000, BLayout::n_by_k, 8, 1, 0}};
  for (Problem p : problems) {
    p.all_min = true;
    run_case(rng, p, false, EpilogueCase{}, int8_runners(p.k < 2000));
    if (HasFatalFailure()) return;
  }
}

// Large shapes (production and WMMA only): full tiles, K tails, and a float epilogue.
TEST_F(IntGemmGpu, Int8LargeShapes) {
  LOWBIT_TEST_RNG(rng);
  const std::vector<Runner> fast{
      {true, Int8GemmVariant::production}, {false, Int8GemmVariant::production}, {false, Int8GemmVariant::wgmma}};
  for (const BLayout layout : {BLayout::n_by_k, BLayout::k_by_n}) {
    run_case(rng, {512, 768, 1024, layout}, false, EpilogueCase{}, int8_runners(false));
    if (HasFatalFailure()) return;
    run_case(rng, {1000, 1000, 4096, layout}, false, EpilogueCase{DType::bf16, 3}, fast);
    if (HasFatalFailure()) return;
    // N tail of 4; B rows 16-byte aligned in both layouts (1040 along K, 4100 + 12 along N).
    run_case(rng, {300, 4100, 1040, layout, 16, layout == BLayout::n_by_k ? 16 : 12, 4}, false,
             EpilogueCase{DType::f16, 2}, fast);
    if (HasFatalFailure()) return;
  }
}

TEST_F(IntGemmGpu, Int4PublicExact) {
  LOWBIT_TEST_RNG(rng);
  const std::vector<Runner> pub{{true, Int8GemmVariant::production}};
  for (const Problem& p : awkward_problems(true)) {
    run_case(rng, p, true, EpilogueCase{}, pub);
    if (HasFatalFailure()) return;
  }
  for (const BLayout layout : {BLayout::n_by_k, BLayout::k_by_n}) {
    run_case(rng, {512, 768, 1023, layout, 16, 0, 0}, true, EpilogueCase{}, pub);
    if (HasFatalFailure()) return;
    for (const DType out : kFloatDTypes) {
      run_case(rng, {129, 300, 257, layout, 15, layout == BLayout::n_by_k ? 15 : 4, 2}, true, EpilogueCase{out, 3}, pub);
      if (HasFatalFailure()) return;
    }
    Problem extreme{65, 70, 4001, layout, 15, layout == BLayout::n_by_k ? 15 : 10, 0};
    extreme.all_min = true;
    run_case(rng, extreme, true, EpilogueCase{}, pub);
    if (HasFatalFailure()) return;
  }
}

// Float outputs against FP64: (acc * sa * sb) * sc + bias, four f32 roundings then
// one to the output type.
TEST_F(IntGemmGpu, FloatOutputsNearFp64) {
  LOWBIT_TEST_RNG(rng);
  for (const BLayout layout : {BLayout::n_by_k, BLayout::k_by_n}) {
    const Problem p{70, 129, 320, layout, 0, layout == BLayout::n_by_k ? 0 : 15, 0};
    for (const DType out : kFloatDTypes) {
      const EpilogueCase ec{out, 3};
      Operands o = make_operands(rng, p, false, ec);
      const std::vector<std::int64_t> exact = exact_product(o.a, o.b, layout, p.m, p.n, p.k, false);
      const std::vector<std::uint8_t> want = cpu_result(o, out, kFloatPoison);
      check_on_gpu(o, ec, Runner{true, Int8GemmVariant::production}, want);
      if (HasFatalFailure()) return;
      for (std::int64_t i = 0; i < p.m; ++i) {
        for (std::int64_t j = 0; j < p.n; ++j) {
          const std::size_t idx = static_cast<std::size_t>(i * p.n + j);
          const double bias = o.bias[j];
          double value = static_cast<double>(exact[idx]) * o.sa[i] * o.sb[j] * o.scale_c + bias;
          if (value < 0) value = 0;
          const double type_eps = out == DType::f32 ? 0x1p-24 : out == DType::f16 ? 0x1p-11 : 0x1p-8;
          const double tol = (4 * 0x1p-24 + type_eps) * (std::fabs(value) + std::fabs(bias)) +
                             (out == DType::f16 ? 0x1p-25 : 0x1p-149);
          ASSERT_LE(std::fabs(read_value(want.data(), idx, out) - value), tol) << i << "," << j;
        }
      }
    }
  }
}

// ---- the Hopper wgmma + TMA kernel (variant wgmma): skipped where it cannot run

// Skips the test, saying why, when the wgmma kernel does not run here (not a
// compute capability 9.0 GPU, or a build without sm_90a).
#define SKIP_UNLESS_WGMMA()                                                                          \
  do {                                                                                               \
    std::string why_not;                                                                             \
    if (!wgmma_runs_here(&why_not)) GTEST_SKIP() << "the wgmma variant does not run here: " << why_not; \
  } while (0)

bool wgmma_runs_here(std::string* why_not) {
  cuda::IntGemmArgs args;
  alignas(16) static const std::uint8_t dummy[16] = {};  // never read: supports only looks at the pointer
  args.a = args.b = args.out = const_cast<std::uint8_t*>(dummy);
  args.lda = args.ldb = args.ldc = 16;
  args.b_layout = BLayout::n_by_k;
  args.m = args.n = args.k = 16;
  return cuda::int8_gemm_supports(Int8GemmVariant::wgmma, args, why_not);
}

std::vector<Runner> wgmma_runners() {
  return {{false, Int8GemmVariant::wgmma}, {true, Int8GemmVariant::production}};
}

// M, N and K tails of the 128 x 256 x 128 tile, aligned rows (16-byte strides with
// spare bytes, so TMA must stop at K, not at the row stride) and outputs with even
// and odd row strides.
TEST_F(IntGemmGpu, WgmmaTailsExactI32) {
  SKIP_UNLESS_WGMMA();
  LOWBIT_TEST_RNG(rng);
  const std::int64_t mn[] = {1, 7, 33, 127, 1000, 300};
  const std::int64_t ks[] = {16, 48, 1008, 4112};
  int index = 0;
  for (const std::int64_t m : mn) {
    for (const std::int64_t n : mn) {
      const std::int64_t k = ks[index % 4];
      const Problem p{m, n, k, BLayout::n_by_k, 16 * (index % 3), 32 * (index % 2), index % 3};
      run_case(rng, p, false, EpilogueCase{}, wgmma_runners());
      if (HasFatalFailure()) return;
      ++index;
    }
  }
  for (const std::int64_t k : ks) {  // every K against a multi-tile M and N
    run_case(rng, {300, 1000, k, BLayout::n_by_k, 16, 0, 2}, false, EpilogueCase{}, wgmma_runners());
    if (HasFatalFailure()) return;
  }
}

TEST_F(IntGemmGpu, WgmmaFloatEpilogues) {
  SKIP_UNLESS_WGMMA();
  LOWBIT_TEST_RNG(rng);
  const Problem problems[] = {{300, 1000, 1008, BLayout::n_by_k, 16, 16, 2},  // vector stores
                              {127, 33, 48, BLayout::n_by_k, 0, 16, 1},       // odd ldc: element stores
                              {1000, 300, 4112, BLayout::n_by_k, 32, 0, 0},
                              {7, 1, 16, BLayout::n_by_k, 0, 0, 0}};
  for (const Problem& p : problems) {
    for (const DType out : kFloatDTypes) {
      for (int form = 0; form <= 3; ++form) {
        run_case(rng, p, false, EpilogueCase{out, form}, wgmma_runners());
        if (HasFatalFailure()) return;
      }
    }
  }
}

// More tiles than SMs, so that CTAs run several tiles: the pipeline's phases and the
// epilogue's column table carry across tiles (K = 16 is one step per tile).
TEST_F(IntGemmGpu, WgmmaPersistentTiles) {
  SKIP_UNLESS_WGMMA();
  LOWBIT_TEST_RNG(rng);
  run_case(rng, {2048, 4096, 4096, BLayout::n_by_k}, false, EpilogueCase{}, wgmma_runners());
  if (HasFatalFailure()) return;
  run_case(rng, {2000, 3000, 16, BLayout::n_by_k, 0, 0, 0}, false, EpilogueCase{DType::bf16, 3}, wgmma_runners());
  if (HasFatalFailure()) return;
  run_case(rng, {2048, 2600, 528, BLayout::n_by_k, 16, 16, 1}, false, EpilogueCase{DType::f16, 2}, wgmma_runners());
  if (HasFatalFailure()) return;
  Problem extreme{300, 600, 8192, BLayout::n_by_k};
  extreme.all_min = true;
  run_case(rng, extreme, false, EpilogueCase{}, wgmma_runners());
}

// What TMA cannot take is refused with a reason (on any machine: these checks come
// before the device's), and the public entry still computes it exactly.
TEST_F(IntGemmGpu, WgmmaRefusesWithReason) {
  core::DeviceBuffer buffer(4096);
  auto* base = static_cast<std::uint8_t*>(buffer.data());
  cuda::IntGemmArgs args;
  args.a = base;
  args.lda = 48;
  args.b = base + 1024;
  args.ldb = 48;
  args.b_layout = BLayout::n_by_k;
  args.out = base + 2048;
  args.ldc = 8;
  args.m = args.n = 8;
  args.k = 40;
  auto refuses = [&](const cuda::IntGemmArgs& a, const char* expected) {
    std::string why_not;
    EXPECT_FALSE(cuda::int8_gemm_supports(Int8GemmVariant::wgmma, a, &why_not)) << expected;
    EXPECT_NE(why_not.find(expected), std::string::npos) << why_not;
  };
  cuda::IntGemmArgs bad = args;
  bad.lda = 40;
  refuses(bad, "lda");
  bad = args;
  bad.ldb = 44;
  refuses(bad, "ldb");
  bad = args;
  bad.a = base + 8;
  refuses(bad, "A base pointer must be 16-byte aligned");
  bad = args;
  bad.b = base + 1028;
  refuses(bad, "B base pointer must be 16-byte aligned");
  bad = args;
  bad.b_layout = BLayout::k_by_n;
  refuses(bad, "n_by_k");
  std::string why_not;
  if (wgmma_runs_here(&why_not)) {
    EXPECT_TRUE(cuda::int8_gemm_supports(Int8GemmVariant::wgmma, args, &why_not)) << why_not;
  }

  // The same refusals through the public entry: exact results from the fallbacks.
  LOWBIT_TEST_RNG(rng);
  const std::vector<Runner> runners{{true, Int8GemmVariant::wgmma}, {false, Int8GemmVariant::wgmma}};
  const Problem fallbacks[] = {{33, 70, 1000, BLayout::n_by_k, 3, 0, 0},      // lda 1003
                               {33, 70, 1000, BLayout::n_by_k, 0, 5, 0},      // ldb 1005
                               {33, 70, 1008, BLayout::n_by_k, 0, 0, 0, 8, 0},  // A base 8 bytes off
                               {33, 70, 1008, BLayout::n_by_k, 0, 0, 0, 0, 4},  // B base 4 bytes off
                               {33, 70, 1008, BLayout::k_by_n, 0, 2, 0}};
  for (const Problem& p : fallbacks) {
    run_case(rng, p, false, EpilogueCase{}, runners);
    if (HasFatalFailure()) return;
    run_case(rng, p, false, EpilogueCase{DType::f16, 3}, runners);
    if (HasFatalFailure()) return;
  }
}

TEST_F(IntGemmGpu, UnsupportedVariantIsNamed) {
  core::DeviceBuffer buffer(4096);
  cuda::IntGemmArgs args;
  args.a = static_cast<char*>(buffer.data()) + 1;  // misaligned
  args.lda = 17;
  args.b = buffer.data();
  args.ldb = 16;
  args.b_layout = BLayout::n_by_k;
  args.out = static_cast<char*>(buffer.data()) + 2048;
  args.ldc = 4;
  args.m = args.n = 4;
  args.k = 16;
  std::string why_not;
  EXPECT_FALSE(cuda::int8_gemm_supports(Int8GemmVariant::production, args, &why_not));
  EXPECT_NE(why_not.find("16-byte aligned"), std::string::npos) << why_not;
  EXPECT_LOWBIT_ERROR(cuda::int8_gemm(Int8GemmVariant::production, args, nullptr), "production does not take");
}

}  // namespace
}  // namespace lowbit::test

// The Hopper wgmma weight-only kernel (cuda/weight_only/wgmma.cu) against the CPU
// reference: every grouped form (Q4_1, Q4_0, INT8) at groups 32 / 64 / 128 / K, f16 and
// bf16, awkward M (17, 33, 100, 257, 1000: partial activation tiles of all three tile
// sizes), N not a multiple of the 128-row block (nor of 8), K not a multiple of the
// 128-wide step (odd, shorter than one step), unaligned activation rows, bias or not,
// every tile size with every split-K cluster, both load forms (cp.async, TMA), and the
// public entry's dispatch. Outputs poisoned and guarded; tolerance as the other
// weight-only kernels (common/weight_only_cases.h). Skipped on GPUs other than compute capability 9.0; on
// one, a build without the kernel's sm_90a image fails the suite.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "common/gpu.h"
#include "common/random.h"
#include "common/weight_only_cases.h"
#include "cuda/weight_only/weight_only_cuda.h"
#include "gpu/sm_hold.h"
#include "lowbit/cuda_check.h"
#include "lowbit/weight_only.h"

namespace lowbit::test {
namespace {

class WeightOnlyWgmmaGpu : public GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    if (wo::wgmma_available()) return;
    int device = 0, major = 0, minor = 0;
    LOWBIT_CUDA_CHECK(cudaGetDevice(&device));
    LOWBIT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    LOWBIT_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    // On a Hopper GPU the kernel must run (the project builds 90a for it): a silent skip
    // there would hide a broken availability check.
    ASSERT_FALSE(major == 9 && minor == 0) << "a compute capability 9.0 GPU, but the wgmma weight-only kernel is "
                                              "not available: is CMAKE_CUDA_ARCHITECTURES missing 90a?";
    GTEST_SKIP() << "the wgmma weight-only kernel needs a compute capability 9.0 GPU (this one is " << major << "."
                 << minor << ")";
  }
};

const wo::Variant kWgmma{wo::Kernel::wgmma};
const wo::Variant kWgmmaTma = [] {
  wo::Variant v{wo::Kernel::wgmma};
  v.tma = true;
  return v;
}();

// Q4_1 (zero point), Q4_0 (symmetric), INT8; group 0 stands for K (per channel).
const WeightOnlySpec kForms[] = {
    {4, 32, true, DType::f16},   {4, 64, true, DType::bf16},  {4, 128, true, DType::f16}, {4, 0, true, DType::f16},
    {4, 32, false, DType::f16},  {4, 64, false, DType::f16},  {4, 128, false, DType::bf16}, {4, 0, false, DType::bf16},
    {8, 32, false, DType::bf16}, {8, 64, false, DType::f16},  {8, 128, false, DType::f16}, {8, 0, false, DType::f16},
};

TEST_F(WeightOnlyWgmmaGpu, EveryFormAndGroup) {
  LOWBIT_TEST_RNG(rng);
  struct Shape {
    std::int64_t n, k;
    std::vector<std::int64_t> ms;
  };
  // K odd and below one step, then K ragged; N a multiple of 8 but not of 128, then not of 8.
  const Shape shapes[] = {{72, 77, {17, 100}}, {136, 392, {17, 33, 100, 257}}, {300, 1000, {17, 257}}};
  int round = 0;
  for (const WeightOnlySpec& form : kForms) {
    for (const Shape& shape : shapes) {
      WeightOnlySpec spec = form;
      if (spec.group_size == 0) spec.group_size = shape.k;
      DeviceWeights w;
      make_weights(rng, spec, shape.n, shape.k, w);
      for (const std::int64_t m : shape.ms) {
        ++round;
        run_case(rng, spec, w, m, /*with_bias=*/round % 2 == 0, /*aligned_rows=*/round % 3 != 0, &kWgmma, Entry::variant_only);
        // The TMA loads: 16-byte aligned rows only (the variant refuses others, below).
        run_case(rng, spec, w, m, /*with_bias=*/round % 2 == 1, /*aligned_rows=*/true, &kWgmmaTma, Entry::variant_only);
        if (HasFailure()) return;
      }
    }
  }
}

// Every activation tile (32, 64, 128 rows; 64 on 128 and on 256 weight rows) with every cluster
// split along K (1, 2, 4, 8, bounded by the K steps), on many steps with a ragged K, a
// partial last weight block, and M on both sides of the tiles.
TEST_F(WeightOnlyWgmmaGpu, TilesAndSplits) {
  LOWBIT_TEST_RNG(rng);
  for (const WeightOnlySpec spec : {WeightOnlySpec{4, 32, true, DType::f16}, WeightOnlySpec{8, 128, false, DType::bf16},
                                    WeightOnlySpec{4, 64, false, DType::f16}}) {
    DeviceWeights w;
    make_weights(rng, spec, 264, under_sanitizer() ? 1000 : 4100, w);  // sanitizer: fewer K steps, 1 and 2 splits
    // (tile_m, tile_n): every pair built; 0 is the rule's weight rows.
    for (const auto& [tile_m, tile_n] :
         {std::pair{32, 0}, std::pair{64, 0}, std::pair{64, 128}, std::pair{64, 256}, std::pair{128, 0}}) {
      for (const int splits : sanitizer_subset<int>({1, 2, 4, 8}, {0, 1})) {
        for (const bool tma : {false, true}) {
          wo::Variant variant{wo::Kernel::wgmma};
          variant.tile_m = tile_m;
          variant.tile_n = tile_n;
          variant.k_slices = splits;
          variant.tma = tma;
          SCOPED_TRACE(testing::Message() << "tile_m " << tile_m << " tile_n " << tile_n << " splits " << splits
                                          << " tma " << tma);
          for (const std::int64_t m : {17, tile_m == 32 ? 40 : tile_m + 1}) {
            run_case(rng, spec, w, m, m % 2 == 1, tma || splits != 2, &variant, Entry::variant_only);
          }
          if (HasFailure()) return;
        }
      }
    }
  }
}

// M = 1000 (8 activation tiles of 128, the last partial) and the rasterization's groups
// of 8 m blocks.
TEST_F(WeightOnlyWgmmaGpu, ManyRows) {
  LOWBIT_TEST_RNG(rng);
  for (const WeightOnlySpec spec : {WeightOnlySpec{4, 32, true, DType::f16}, WeightOnlySpec{8, 0, false, DType::f16}}) {
    WeightOnlySpec s = spec;
    if (s.group_size == 0) s.group_size = 520;
    DeviceWeights w;
    make_weights(rng, s, 264, 520, w);
    run_case(rng, s, w, 1000, true, true, &kWgmma, Entry::variant_only);
    run_case(rng, s, w, 1000, false, true, &kWgmmaTma, Entry::variant_only);
    if (HasFailure()) return;
  }
}

// Stream-K at every tile shape (32, 64 and 128 activation rows on 128 or 256 weight rows;
// 128 rows ping-pong): persistent blocks share the (tile, K step) units, 4 or more a
// block, so with few tiles and many steps a tile's K range spans up to ~9 blocks (264 x
// 4100: 3 tiles of 33 steps) and blocks hold parts of two tiles (2000 x 1500: 16 tiles of
// 12 steps); the forms' grouped and per-channel scales, f16 and bf16, bias or not, M on
// both sides of the tiles.
TEST_F(WeightOnlyWgmmaGpu, StreamK) {
  LOWBIT_TEST_RNG(rng);
  struct Case {
    WeightOnlySpec spec;
    std::int64_t n, k;
  };
  const std::int64_t long_k = under_sanitizer() ? 1000 : 4100;
  for (const Case& c : {Case{{4, 32, true, DType::f16}, 264, long_k}, Case{{4, 128, false, DType::bf16}, 264, long_k},
                        Case{{8, 64, false, DType::f16}, 264, long_k}, Case{{4, 32, true, DType::bf16}, 2000, 1500}}) {
    DeviceWeights w;
    make_weights(rng, c.spec, c.n, c.k, w);
    for (const auto& [tile_m, tile_n] :
         {std::pair{32, 128}, std::pair{64, 128}, std::pair{64, 256}, std::pair{128, 256}}) {
      wo::Variant v = kWgmmaTma;
      v.tile_m = tile_m;
      v.tile_n = tile_n;
      v.stream_k = 1;
      SCOPED_TRACE(testing::Message() << "stream-K tile_m " << tile_m << " tile_n " << tile_n);
      const std::int64_t third = tile_m == 32 ? 1 : tile_m == 64 ? 40 : 200;  // 200: two m blocks
      for (const std::int64_t m : {std::int64_t{17}, std::int64_t{tile_m}, third}) {
        run_case(rng, c.spec, w, m, m % 2 == 1, true, &v, Entry::variant_only);
        EXPECT_TRUE(wo::stream_k_flags_clear(nullptr)) << "M " << m << ": a finisher left a flag set";
      }
      if (HasFailure()) return;
    }
  }
}

// Random activations [m x K] and an output [m x N] on the device for w, and the Params
// over them (the stream-K tests' launches).
struct Launch {
  core::DeviceBuffer x, out;
  wo::Params p;
};
Launch make_launch(Rng& rng, const WeightOnlySpec& spec, const DeviceWeights& w, std::int64_t m) {
  const std::int64_t n = w.host.n, k = w.host.k;
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  std::vector<std::uint16_t> x(static_cast<std::size_t>(m * k));
  for (auto& e : x) e = to_act_bits(spec.act_dtype, value(rng));
  Launch l{core::DeviceBuffer(x.size() * 2), core::DeviceBuffer(static_cast<std::size_t>(m * n) * 2), {}};
  LOWBIT_CUDA_CHECK(cudaMemcpy(l.x.data(), x.data(), x.size() * 2, cudaMemcpyHostToDevice));
  l.p = wo::make_params(TensorView::matrix(l.x.data(), spec.act_dtype, Device::cuda, m, k), w.device, TensorView{},
                        TensorView::matrix(l.out.data(), spec.act_dtype, Device::cuda, m, n));
  return l;
}

// A second launch gives the first one's bits, and so does a CUDA graph captured on a fresh
// stream (whose first stream-K launch allocates the stream's workspace during the
// capture), replayed twice; the finishers leave every flag at zero (StreamK checks it after
// each case too: a flag left set would let the next launch's finisher read a slot before its
// helper writes it, a race no input can force).
TEST_F(WeightOnlyWgmmaGpu, StreamKRepeatsAndCaptures) {
  LOWBIT_TEST_RNG(rng);
  const WeightOnlySpec spec{4, 32, true, DType::f16};
  DeviceWeights w;
  make_weights(rng, spec, 520, under_sanitizer() ? 1000 : 3000, w);
  const std::int64_t m = 32, n = w.host.n;
  const Launch l = make_launch(rng, spec, w, m);
  const wo::Params& p = l.p;
  const core::DeviceBuffer& d_out = l.out;
  wo::Variant v = kWgmmaTma;
  v.stream_k = 1;
  ASSERT_TRUE(wo::takes(v, p, wo::Form::q4_zero_point));
  const auto run = [&](cudaStream_t stream) {
    LOWBIT_CUDA_CHECK(cudaMemsetAsync(d_out.data(), 0xff, d_out.bytes(), stream));
    wo::launch(p, spec.act_dtype, wo::Form::q4_zero_point, v, stream);
  };
  run(nullptr);
  LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<std::uint16_t> first = download<std::uint16_t>(d_out.data(), static_cast<std::size_t>(m * n));
  run(nullptr);
  LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(download<std::uint16_t>(d_out.data(), static_cast<std::size_t>(m * n)), first) << "second launch";
  EXPECT_TRUE(wo::stream_k_flags_clear(nullptr));

  cudaStream_t stream;
  LOWBIT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  LOWBIT_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  run(stream);
  LOWBIT_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  LOWBIT_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < 2; ++replay) {
    LOWBIT_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    LOWBIT_CUDA_CHECK(cudaStreamSynchronize(stream));
    EXPECT_EQ(download<std::uint16_t>(d_out.data(), static_cast<std::size_t>(m * n)), first) << "replay " << replay;
    EXPECT_TRUE(wo::stream_k_flags_clear(stream)) << "replay " << replay;
  }
  LOWBIT_CUDA_CHECK(cudaGraphExecDestroy(exec));
  LOWBIT_CUDA_CHECK(cudaGraphDestroy(graph));
  LOWBIT_CUDA_CHECK(cudaStreamDestroy(stream));
}

// A stream-K grid needs no co-residency: with every multiprocessor but one held by another
// stream's spinning blocks (SmHold), grids of 24-41 blocks at each tile shape, one to three
// of which fit the free SM at a time, finish within seconds and give the bits they give
// with the GPU to themselves. A finisher that waited on later blocks would hold the free
// SM while they wait for it, until the hold ends.
TEST_F(WeightOnlyWgmmaGpu, StreamKNeedsNoCoResidency) {
  if (under_sanitizer()) GTEST_SKIP() << "compute-sanitizer serializes kernels: the held SMs would never free";
  LOWBIT_TEST_RNG(rng);
  const WeightOnlySpec spec{4, 32, true, DType::f16};
  DeviceWeights w;
  make_weights(rng, spec, 520, 4104, w);  // 33 K steps a tile (up to 9 blocks); 16-byte rows for TMA
  const std::int64_t n = w.host.n;
  cudaStream_t stream;
  LOWBIT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t done;
  LOWBIT_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  for (const auto& [tile_m, tile_n] :
       {std::pair{32, 128}, std::pair{64, 128}, std::pair{64, 256}, std::pair{128, 256}}) {
    SCOPED_TRACE(testing::Message() << "stream-K tile_m " << tile_m << " tile_n " << tile_n);
    const std::int64_t m = tile_m;
    const Launch l = make_launch(rng, spec, w, m);
    const wo::Params& p = l.p;
    const core::DeviceBuffer& d_out = l.out;
    wo::Variant v = kWgmmaTma;
    v.tile_m = tile_m;
    v.tile_n = tile_n;
    v.stream_k = 1;
    ASSERT_TRUE(wo::takes(v, p, wo::Form::q4_zero_point));
    const auto run = [&] {
      LOWBIT_CUDA_CHECK(cudaMemsetAsync(d_out.data(), 0xff, d_out.bytes(), stream));
      wo::launch(p, spec.act_dtype, wo::Form::q4_zero_point, v, stream);
      LOWBIT_CUDA_CHECK(cudaEventRecord(done, stream));
    };
    run();  // alone (and the stream's workspace made before the hold)
    LOWBIT_CUDA_CHECK(cudaStreamSynchronize(stream));
    const std::vector<std::uint16_t> alone = download<std::uint16_t>(d_out.data(), static_cast<std::size_t>(m * n));
    bool finished = false;
    {
      SmHold hold(1);
      ASSERT_TRUE(hold.holding()) << "could not hold all multiprocessors but one";
      run();
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      cudaError_t status = cudaErrorNotReady;
      while (status == cudaErrorNotReady && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        status = cudaEventQuery(done);
      }
      if (status != cudaErrorNotReady) LOWBIT_CUDA_CHECK(status);
      finished = status == cudaSuccess;
      hold.release();  // a grid that waits on the held SMs finishes now
    }
    LOWBIT_CUDA_CHECK(cudaStreamSynchronize(stream));
    EXPECT_TRUE(finished) << "the grid did not finish on the one free multiprocessor within 10 s";
    EXPECT_EQ(download<std::uint16_t>(d_out.data(), static_cast<std::size_t>(m * n)), alone);
    EXPECT_TRUE(wo::stream_k_flags_clear(stream));
    if (HasFailure()) break;
  }
  LOWBIT_CUDA_CHECK(cudaEventDestroy(done));
  LOWBIT_CUDA_CHECK(cudaStreamDestroy(stream));
}

// A block that holds all of K stores its tile by TMA where the output's rows are 16-byte
// aligned, through the split path's shared-memory pass otherwise: the same values bit for
// bit (one product, one rounding), at every tile, f16 and bf16, bias or not, partial tiles
// in M and N (N a multiple of 8, as TMA's stores need, but not of 64), the aligned rows'
// padding never written. (N not a multiple of 8 takes the pass: run_case's padding checks.)
TEST_F(WeightOnlyWgmmaGpu, TmaStoresEqualTheSharedMemoryPass) {
  LOWBIT_TEST_RNG(rng);
  for (const WeightOnlySpec spec : {WeightOnlySpec{4, 32, true, DType::f16}, WeightOnlySpec{4, 64, false, DType::bf16},
                                    WeightOnlySpec{8, 32, false, DType::f16}}) {
    DeviceWeights w;
    make_weights(rng, spec, 264, 1000, w);
    const std::int64_t n = w.host.n, k = w.host.k;
    const DType dt = spec.act_dtype;
    for (const auto& [tile_m, tile_n] : {std::pair{32, 0}, std::pair{64, 128}, std::pair{64, 256}, std::pair{128, 0}}) {
      wo::Variant variant{wo::Kernel::wgmma};
      variant.tile_m = tile_m;
      variant.tile_n = tile_n;
      variant.k_slices = 1;
      variant.tma = true;
      for (const std::int64_t m : {std::int64_t{17}, std::int64_t{tile_m + 9}}) {
        SCOPED_TRACE(testing::Message() << dtype_name(dt) << " bits " << spec.bits << " tile_m " << tile_m
                                        << " tile_n " << tile_n << " M " << m);
        std::uniform_real_distribution<float> value(-1.0f, 1.0f);
        std::vector<std::uint16_t> x(static_cast<std::size_t>(m * k)), bias(static_cast<std::size_t>(n));
        for (auto& v : x) v = to_act_bits(dt, value(rng));
        for (auto& v : bias) v = to_act_bits(dt, value(rng));
        GuardedBuffer d_x(x.size() * 2), d_bias(bias.size() * 2);
        d_x.upload(x.data(), x.size() * 2);
        d_bias.upload(bias.data(), bias.size() * 2);
        for (const bool with_bias : {false, true}) {
          const std::int64_t ld_tma = (n + 7) / 8 * 8 + 8, ld_pass = n + 3;
          GuardedBuffer d_tma(m * ld_tma * 2), d_pass(m * ld_pass * 2);
          const TensorView xv = TensorView::matrix(d_x.data(), dt, Device::cuda, m, k);
          const TensorView bv = with_bias ? TensorView::vector(d_bias.data(), dt, Device::cuda, n) : TensorView{};
          for (auto& [buffer, ld] : {std::pair{&d_tma, ld_tma}, std::pair{&d_pass, ld_pass}}) {
            buffer->poison(kFloatPoison);
            const wo::Params p =
                wo::make_params(xv, w.device, bv, TensorView::matrix(buffer->data(), dt, Device::cuda, m, n, ld));
            ASSERT_TRUE(wo::takes(variant, p, wo::form_of(spec)));
            ASSERT_EQ(wo::wgmma_tma_store_takes(p), buffer == &d_tma) << "row stride " << ld;
            wo::launch(p, dt, wo::form_of(spec), variant, nullptr);
          }
          LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
          EXPECT_TRUE(d_tma.guards_intact("TMA-stored out"));
          EXPECT_TRUE(d_pass.guards_intact("shared-memory-pass out"));
          const auto tma = download<std::uint16_t>(d_tma.data(), static_cast<std::size_t>(m * ld_tma));
          const auto pass = download<std::uint16_t>(d_pass.data(), static_cast<std::size_t>(m * ld_pass));
          constexpr std::uint16_t kPoison16 = kFloatPoison * 0x0101;  // padding: never written
          int failures = 0;
          for (std::int64_t r = 0; r < m && failures < 5; ++r) {
            for (std::int64_t c = 0; c < ld_tma && failures < 5; ++c) {
              const std::uint16_t got = tma[r * ld_tma + c], want = c < n ? pass[r * ld_pass + c] : kPoison16;
              if (got != want) {
                ++failures;
                ADD_FAILURE() << "bias " << with_bias << " row " << r << " col " << c << ": TMA-stored 0x" << std::hex
                              << got << ", the shared-memory pass 0x" << want << std::dec;
              }
            }
          }
          if (HasFailure()) return;
        }
      }
    }
  }
}

// The TMA loads need the activations 16-byte aligned with rows a multiple of 8 apart:
// the variant refuses other arguments (the cp.async form takes them).
TEST_F(WeightOnlyWgmmaGpu, TmaTakesAlignedRowsOnly) {
  const WeightOnlySpec spec{4, 32, true, DType::f16};
  LOWBIT_TEST_RNG(rng);
  DeviceWeights w;
  make_weights(rng, spec, 128, 256, w);
  for (const auto& [ldx, offset, taken] :
       {std::tuple{std::int64_t{256}, std::uintptr_t{0}, true}, std::tuple{std::int64_t{257}, std::uintptr_t{0}, false},
        std::tuple{std::int64_t{256}, std::uintptr_t{2}, false}}) {
    auto* x = reinterpret_cast<void*>(std::uintptr_t{0x100000} + offset);  // never read: takes() looks only
    const wo::Params p = wo::make_params(TensorView::matrix(x, spec.act_dtype, Device::cuda, 40, 256, ldx), w.device,
                                         TensorView{}, TensorView::matrix(nullptr, spec.act_dtype, Device::cuda, 40, 128));
    EXPECT_EQ(wo::takes(kWgmmaTma, p, wo::Form::q4_zero_point), taken) << "ldx " << ldx << " offset " << offset;
    EXPECT_TRUE(wo::takes(kWgmma, p, wo::Form::q4_zero_point)) << "ldx " << ldx << " offset " << offset;
  }
}

// The public entry: M <= 16 goes to a GEMV, above to the wgmma kernel from the form's
// crossover (INT4 64, INT8 17) and to the tiled mma.sync kernel below it, and every
// choice matches the reference through lowbit::weight_only_gemm.
TEST_F(WeightOnlyWgmmaGpu, PublicEntryDispatches) {
  LOWBIT_TEST_RNG(rng);
  const WeightOnlySpec spec{4, 32, true, DType::f16};
  DeviceWeights w;
  make_weights(rng, spec, 300, 1000, w);
  for (const std::int64_t m : {16, 17, 33, 63, 64, 257}) {
    const wo::Params p = wo::make_params(TensorView::matrix(nullptr, spec.act_dtype, Device::cuda, m, w.host.k),
                                         w.device, TensorView{},
                                         TensorView::matrix(nullptr, spec.act_dtype, Device::cuda, m, w.host.n));
    const wo::Kernel chosen = wo::pick(p, wo::Form::q4_zero_point).kernel;
    if (m <= wo::kGemvMaxRows) {
      EXPECT_TRUE(chosen == wo::Kernel::gemv || chosen == wo::Kernel::small_gemv) << "M " << m;
    } else {
      EXPECT_EQ(chosen, wo::Kernel::wgmma) << "M " << m;
    }
    static_assert(wo::kWgmmaMinRows == wo::kGemvMaxRows + 1, "the rows above the GEMVs go to wgmma");
    const wo::Variant int8 = wo::pick(p, wo::Form::int8);
    EXPECT_EQ(int8.kernel == wo::Kernel::wgmma, m > wo::kGemvMaxRows) << "M " << m;
    EXPECT_EQ(int8.tma, m > wo::kGemvMaxRows) << "M " << m;  // x's rows are 16-byte aligned here
    run_case(rng, spec, w, m, m == 33, m != 17, nullptr, Entry::public_api);
  }
  // INT8 on wide N (N >= 2 K) takes the wgmma kernel from 8 rows, aligned activations only.
  const WeightOnlySpec int8_spec{8, 32, false, DType::f16};
  DeviceWeights wide;
  make_weights(rng, int8_spec, 2056, 1000, wide);
  for (const std::int64_t m : {4, 7, 8, 16}) {
    for (const bool aligned : {true, false}) {
      const std::int64_t ldx = aligned ? 1000 : 1001;
      const wo::Params p = wo::make_params(
          TensorView::matrix(nullptr, DType::f16, Device::cuda, m, wide.host.k, ldx), wide.device, TensorView{},
          TensorView::matrix(nullptr, DType::f16, Device::cuda, m, wide.host.n));
      EXPECT_EQ(wo::pick(p, wo::Form::int8).kernel == wo::Kernel::wgmma, m >= 8 && aligned)
          << "M " << m << " aligned " << aligned;
      run_case(rng, int8_spec, wide, m, m % 2 == 0, aligned, nullptr, Entry::public_api);
    }
  }
}

}  // namespace
}  // namespace lowbit::test

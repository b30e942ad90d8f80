// The GPU sections of `lowbit bench gemm`. Every timed configuration is first checked:
// integer outputs must equal cuBLASLt's INT32 result exactly, the fused epilogue must
// equal cuBLASLt + the separate epilogue kernel bit for bit, and weight-only outputs
// are compared with cuBLAS on the dequantized weights (relative L2).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <iostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "bench/common/timing.h"
#include "bench/common/device_fill.h"
#include "bench/gemm/gemm_bench.h"
#include "bench/gemm/peers.h"
#include "bench/gemm/weight_inputs.h"
#include "core/device_buffer.h"
#include "cuda/gemm/gemm_cuda.h"
#include "cuda/weight_only/weight_only_cuda.h"
#include "engine/gguf/reader.h"
#include "engine/gguf/repack.h"
#include "engine/synth/random_blocks.h"
#include "formats/float16.h"
#include "lowbit/cuda_check.h"
#include "lowbit/gemm.h"
#include "lowbit/weight_only.h"

namespace lowbit::bench {
namespace {

// The weight-only sections' filters: --min-m / --max-m, --shape NxK.
bool skip_m(const GemmBenchOptions& o, std::int64_t m) { return (o.max_m > 0 && m > o.max_m) || m < o.min_m; }
bool skip_shape(const GemmBenchOptions& o, std::int64_t n, std::int64_t k) {
  return !o.shape.empty() && o.shape != std::to_string(n) + "x" + std::to_string(k);
}

using core::DeviceBuffer;

struct Shape {
  std::int64_t m, n, k;
};

std::vector<Shape> cube_shapes(bool quick) {
  if (quick) return {{128, 128, 128}, {1024, 1024, 1024}};
  return {{128, 128, 128}, {1024, 1024, 1024}, {4096, 4096, 4096}, {8192, 8192, 8192}};
}

std::vector<Shape> decode_shapes(bool quick) {
  std::vector<Shape> shapes;
  const std::int64_t nk[][2] = {{4096, 4096}, {28672, 8192}, {8192, 28672}};
  for (const auto& [n, k] : nk) {
    for (std::int64_t m : {1, 16, 64, 128}) {
      if (quick && (n != 4096 || m > 16)) continue;
      shapes.push_back({m, n, k});
    }
  }
  return shapes;
}

std::string shape_label(const Shape& s) {
  return std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k);
}

// Fewer samples for slow configurations, so that the naive kernel at 8192^3 costs seconds, not minutes.
int samples_for(double ops) { return ops > 2e11 ? 5 : 15; }

double time_ms(const std::function<void(int)>& launch, cuda_stream_t stream, double ops) {
  return gpu_median_ms(launch, stream, samples_for(ops));
}

cuda::IntGemmArgs i32_args(const void* a, const void* b, BLayout layout, void* out, const Shape& s, bool int4) {
  cuda::IntGemmArgs args;
  const std::int64_t k_storage = int4 ? (s.k + 1) / 2 : s.k;
  args.a = a;
  args.lda = k_storage;
  args.b = b;
  args.ldb = layout == BLayout::n_by_k ? k_storage : s.n;
  args.b_layout = layout;
  args.out = out;
  args.ldc = s.n;
  args.out_dtype = DType::i32;
  args.m = s.m;
  args.n = s.n;
  args.k = s.k;
  return args;
}

// The weight-only sections' peer: the same weight bytes read by a kernel that does nothing
// else (measure_read_ms).
constexpr const char* kPureRead = "pure read";

// The peer's own row: its speed-up column reads 1.00x.
GemmRow reference_row(const char* section, const char* op, const char* variant, const Shape& s, const char* out_dtype,
                      double ms, double ops, double bytes) {
  GemmRow row = GemmRow::make(section, op, variant, s.m, s.n, s.k, "n_by_k", out_dtype);
  row.ms = ms;
  row.ops = ops;
  row.bytes = bytes;
  row.peer = variant;
  row.peer_ms = ms;
  row.check = "reference";
  return row;
}

std::string exact_label(std::uint64_t mismatches, bool& ok) {
  if (mismatches == 0) return "exact";
  ok = false;
  return "MISMATCH (" + std::to_string(mismatches) + ")";
}

// ---- INT8: the seed's progression and production, against cuBLASLt -----------------

void int8_section(const GemmBenchOptions& o, cuda_stream_t stream, CublasPeers& peers, std::vector<GemmRow>& rows) {
  std::vector<Shape> shapes = cube_shapes(o.quick);
  for (const Shape& s : decode_shapes(o.quick)) shapes.push_back(s);
  const std::size_t first = rows.size();
  for (const Shape& s : shapes) {
    std::fprintf(stderr, "int8 %s\n", shape_label(s).c_str());
    const bool cube = s.m == s.n && s.n == s.k;
    const double ops = 2.0 * s.m * s.n * s.k;
    const double bytes = static_cast<double>(s.m * s.k + s.n * s.k) + 4.0 * s.m * s.n;
    DeviceBuffer a(s.m * s.k), b_nk(s.n * s.k), b_kn(s.k * s.n), ref(4 * s.m * s.n), out(4 * s.m * s.n);
    fill_random_bytes(a.data(), a.bytes(), 1000 + s.m, stream);
    fill_random_bytes(b_nk.data(), b_nk.bytes(), 2000 + s.n + s.k, stream);
    transpose_bytes(b_nk.data(), b_kn.data(), s.n, s.k, stream);
    peers.int8_gemm(a.data(), b_nk.data(), ref.data(), s.m, s.n, s.k);
    const double peer_ms = time_ms([&](int) { peers.int8_gemm(a.data(), b_nk.data(), out.data(), s.m, s.n, s.k); },
                                   stream, ops);
    rows.push_back(reference_row("int8", "int8 i32", "cublaslt", s, "i32", peer_ms, ops, bytes));
    for (const cuda::Int8GemmVariant variant : cuda::kInt8GemmVariants) {
      const bool production = variant == cuda::Int8GemmVariant::production || variant == cuda::Int8GemmVariant::wgmma;
      if (!cube && !production) continue;  // decode shapes: the production kernels against the peer only
      for (const BLayout layout : {BLayout::n_by_k, BLayout::k_by_n}) {
        const void* b = layout == BLayout::n_by_k ? b_nk.data() : b_kn.data();
        const cuda::IntGemmArgs args = i32_args(a.data(), b, layout, out.data(), s, false);
        std::string why;
        if (!cuda::int8_gemm_supports(variant, args, &why)) continue;
        LOWBIT_CUDA_CHECK(cudaMemsetAsync(out.data(), 0xff, out.bytes(), stream));
        cuda::int8_gemm(variant, args, stream);
        GemmRow row = GemmRow::make("int8", "int8 i32", cuda::int8_gemm_variant_name(variant), s.m, s.n, s.k,
                                    b_layout_name(layout), "i32");
        row.check = exact_label(count_mismatches(out.data(), ref.data(), s.m * s.n, false, stream), row.ok);
        row.ms = time_ms([&](int) { cuda::int8_gemm(variant, args, stream); }, stream, ops);
        row.ops = ops;
        row.bytes = bytes;
        row.peer = "cublaslt";
        row.peer_ms = peer_ms;
        rows.push_back(row);
      }
    }
  }
  print_gemm_table("INT8 GEMM, INT32 out (speed-up = cuBLASLt time / this time)",
                   std::vector<GemmRow>(rows.begin() + static_cast<std::ptrdiff_t>(first), rows.end()), 0);
}

// ---- the fused scale + bias + ReLU epilogue to FP16 ----------------------------------

void epilogue_section(const GemmBenchOptions& o, cuda_stream_t stream, CublasPeers& peers,
                      std::vector<GemmRow>& rows) {
  std::vector<Shape> shapes = o.quick ? std::vector<Shape>{{1024, 1024, 1024}}
                                      : std::vector<Shape>{{4096, 4096, 4096}, {8192, 8192, 8192}, {16, 28672, 8192},
                                                           {128, 28672, 8192}};
  const std::size_t first = rows.size();
  for (const Shape& s : shapes) {
    std::fprintf(stderr, "epilogue %s\n", shape_label(s).c_str());
    const double ops = 2.0 * s.m * s.n * s.k;
    DeviceBuffer a(s.m * s.k), b(s.n * s.k), acc(4 * s.m * s.n), out(2 * s.m * s.n), ref(2 * s.m * s.n);
    DeviceBuffer sa(4 * s.m), sb(4 * s.n), bias(4 * s.n);
    fill_random_bytes(a.data(), a.bytes(), 31, stream);
    fill_random_bytes(b.data(), b.bytes(), 37, stream);
    fill_random_f32(sa.as<float>(), s.m, 1e-3f, 2e-2f, 41, stream);
    fill_random_f32(sb.as<float>(), s.n, 1e-3f, 2e-2f, 43, stream);
    fill_random_f32(bias.as<float>(), s.n, -20.0f, 20.0f, 47, stream);
    const float scale_c = 0.5f;

    cuda::IntGemmArgs i32 = i32_args(a.data(), b.data(), BLayout::n_by_k, acc.data(), s, false);
    cuda::IntGemmArgs fused = i32;
    fused.out = out.data();
    fused.out_dtype = DType::f16;
    fused.scale_a = sa.as<float>();
    fused.scale_a_per_row = true;
    fused.scale_b = sb.as<float>();
    fused.scale_b_per_col = true;
    fused.scale_c = scale_c;
    fused.bias = bias.as<float>();
    fused.relu = true;

    auto peer_then_epilogue = [&] {
      peers.int8_gemm(a.data(), b.data(), acc.data(), s.m, s.n, s.k);
      launch_separate_epilogue(acc.as<std::int32_t>(), ref.data(), s.m, s.n, sa.as<float>(), sb.as<float>(), scale_c,
                               bias.as<float>(), true, stream);
    };
    peer_then_epilogue();
    LOWBIT_CUDA_CHECK(cudaMemsetAsync(out.data(), 0xff, out.bytes(), stream));
    cuda::int8_gemm(fused, stream);
    const std::string fused_name = std::string(cuda::int8_gemm_variant_name(cuda::int8_gemm_pick(fused))) + " fused";
    GemmRow row = GemmRow::make("epilogue", "int8 scale+bias+relu", fused_name, s.m, s.n, s.k, "n_by_k", "f16");
    row.check = exact_label(count_mismatches(out.data(), ref.data(), s.m * s.n, true, stream), row.ok);
    const double fused_ms = time_ms([&](int) { cuda::int8_gemm(fused, stream); }, stream, ops);
    const double i32_ms = time_ms([&](int) { cuda::int8_gemm(i32, stream); }, stream, ops);
    const double peer_ms = time_ms([&](int) { peer_then_epilogue(); }, stream, ops);
    const double bytes_in = static_cast<double>(s.m * s.k + s.n * s.k);
    row.ms = fused_ms;
    row.ops = ops;
    row.bytes = bytes_in + 2.0 * s.m * s.n;
    row.peer = "cublaslt + epilogue kernel";
    row.peer_ms = peer_ms;
    rows.push_back(row);
    GemmRow plain = reference_row("epilogue", "int8 i32 (same GEMM)", cuda::int8_gemm_variant_name(cuda::int8_gemm_pick(i32)),
                                  s, "i32", i32_ms, ops, bytes_in + 4.0 * s.m * s.n);
    plain.peer = fused_name;
    plain.peer_ms = fused_ms;
    plain.check = "-";
    rows.push_back(plain);
    rows.push_back(reference_row("epilogue", "int8 scale+bias+relu", "cublaslt + epilogue kernel", s, "f16", peer_ms,
                                 ops, bytes_in + 2.0 * s.m * s.n));
  }
  print_gemm_table("Fused epilogue to FP16 (per-row and per-column scales, bias, ReLU); the i32 row's speed-up "
                   "column is fused / i32 time, i.e. 1 - overhead",
                   std::vector<GemmRow>(rows.begin() + static_cast<std::ptrdiff_t>(first), rows.end()), 0);
}

// ---- packed INT4 x INT4 ------------------------------------------------------------------

void int4_section(const GemmBenchOptions& o, cuda_stream_t stream, CublasPeers& peers, std::vector<GemmRow>& rows) {
  std::vector<Shape> shapes = o.quick ? std::vector<Shape>{{1024, 1024, 1024}}
                                      : std::vector<Shape>{{1024, 1024, 1024}, {4096, 4096, 4096}, {8192, 8192, 8192}};
  const std::size_t first = rows.size();
  for (const Shape& s : shapes) {
    std::fprintf(stderr, "int4 %s\n", shape_label(s).c_str());
    const double ops = 2.0 * s.m * s.n * s.k;
    const std::int64_t kp = (s.k + 1) / 2;
    DeviceBuffer a(s.m * kp), b(s.n * kp), a8(s.m * s.k), b8(s.n * s.k), ref(4 * s.m * s.n), out(4 * s.m * s.n);
    fill_random_bytes(a.data(), a.bytes(), 51, stream);
    fill_random_bytes(b.data(), b.bytes(), 53, stream);
    unpack_int4_rows(a.data(), a8.data(), s.m, kp, stream);
    unpack_int4_rows(b.data(), b8.data(), s.n, kp, stream);
    peers.int8_gemm(a8.data(), b8.data(), ref.data(), s.m, s.n, s.k);
    const double peer_ms = time_ms([&](int) { peers.int8_gemm(a8.data(), b8.data(), out.data(), s.m, s.n, s.k); },
                                   stream, ops);
    const cuda::IntGemmArgs args = i32_args(a.data(), b.data(), BLayout::n_by_k, out.data(), s, true);
    LOWBIT_CUDA_CHECK(cudaMemsetAsync(out.data(), 0xff, out.bytes(), stream));
    cuda::int4_gemm(args, stream);
    GemmRow row = GemmRow::make("int4", "int4 i32", "production", s.m, s.n, s.k, "n_by_k", "i32");
    row.check = exact_label(count_mismatches(out.data(), ref.data(), s.m * s.n, false, stream), row.ok);
    row.ms = time_ms([&](int) { cuda::int4_gemm(args, stream); }, stream, ops);
    row.ops = ops;
    row.bytes = static_cast<double>(s.m * kp + s.n * kp) + 4.0 * s.m * s.n;
    row.peer = "cublaslt int8 (unpacked)";
    row.peer_ms = peer_ms;
    rows.push_back(row);
  }
  print_gemm_table("INT4 x INT4 GEMM, INT32 out (speed-up vs cuBLASLt INT8 on the unpacked operands)",
                   std::vector<GemmRow>(rows.begin() + static_cast<std::ptrdiff_t>(first), rows.end()), 0);
}

// ---- weight-only W4A16 / W8A16 against cuBLAS FP16 -----------------------------------------

struct WeightForm {
  const char* name;
  WeightOnlySpec spec;
};

// Device copies of packed weights, enough of them that rotating through them defeats L2.
struct DeviceWeights {
  std::vector<DeviceBuffer> codes, scales, mins;
  std::vector<PackedWeights> views;
};

DeviceWeights upload(const HostWeights& h, const WeightOnlySpec& spec, std::int64_t n, std::int64_t k) {
  const std::size_t bytes = h.codes.size() + h.scales_packed.size() + h.mins_packed.size();
  const int copies = static_cast<int>(std::clamp<std::size_t>((std::size_t{256} << 20) / bytes + 1, 1, 32));
  DeviceWeights d;
  for (int c = 0; c < copies; ++c) {
    d.codes.emplace_back(h.codes.size());
    d.scales.emplace_back(h.scales_packed.size());
    d.mins.emplace_back(h.mins_packed.size());
    LOWBIT_CUDA_CHECK(cudaMemcpy(d.codes.back().data(), h.codes.data(), h.codes.size(), cudaMemcpyHostToDevice));
    LOWBIT_CUDA_CHECK(cudaMemcpy(d.scales.back().data(), h.scales_packed.data(), h.scales_packed.size(),
                                 cudaMemcpyHostToDevice));
    if (!h.mins_packed.empty()) {
      LOWBIT_CUDA_CHECK(cudaMemcpy(d.mins.back().data(), h.mins_packed.data(), h.mins_packed.size(),
                                   cudaMemcpyHostToDevice));
    }
    d.views.push_back(PackedWeights{
        spec, n, k, TensorView::vector(d.codes.back().data(), DType::u8, Device::cuda, h.sizes.code_bytes),
        TensorView::vector(d.scales.back().data(), spec.act_dtype, Device::cuda, h.sizes.scale_count),
        spec.zero_point ? TensorView::vector(d.mins.back().data(), spec.act_dtype, Device::cuda, h.sizes.min_count)
                        : TensorView{}});
  }
  return d;
}

// The FP16 peer's weights: enough copies of the dequantized matrix that rotating through
// them defeats L2, as the packed copies do.
int f16_copies(std::size_t bytes) {
  return static_cast<int>(std::clamp<std::size_t>((std::size_t{256} << 20) / bytes + 1, 1, 8));
}
std::vector<DeviceBuffer> upload_dequantized(const HostWeights& h, int copies) {
  const std::size_t bytes = h.dequantized.size() * sizeof(h.dequantized[0]);
  std::vector<DeviceBuffer> w16;
  for (int c = 0; c < copies; ++c) {
    w16.emplace_back(bytes);
    LOWBIT_CUDA_CHECK(cudaMemcpy(w16.back().data(), h.dequantized.data(), bytes, cudaMemcpyHostToDevice));
  }
  return w16;
}

void weight_only_section(const GemmBenchOptions& o, cuda_stream_t stream, CublasPeers& peers, double copy_gbps,
                         std::vector<GemmRow>& rows) {
  const WeightForm forms[] = {
      {"w4a16 g32 zp (Q4_1)", {4, 32, true, DType::f16}},
      {"w4a16 g128 zp", {4, 128, true, DType::f16}},
      {"w8a16 per-channel", {8, 0, false, DType::f16}},
  };
  const std::int64_t nk[][2] = {{4096, 4096}, {28672, 8192}, {8192, 28672}};
  const std::size_t first = rows.size();
  for (const auto& [n, k] : nk) {
    if (o.quick && n != 4096) continue;
    if (skip_shape(o, n, k)) continue;
    // The FP16 peer's weights, rotated like ours.
    const std::size_t w16_bytes = static_cast<std::size_t>(n * k) * 2;
    const int w16_copies = f16_copies(w16_bytes);
    for (const WeightForm& form : forms) {
      WeightOnlySpec spec = form.spec;
      if (spec.group_size == 0) spec.group_size = k;
      std::fprintf(stderr, "weight-only %s %lldx%lld: packing on the host\n", form.name, static_cast<long long>(n),
                   static_cast<long long>(k));
      const HostWeights host = make_weights(spec, n, k, static_cast<std::uint64_t>(n + k + spec.bits + spec.group_size));
      DeviceWeights dev = upload(host, spec, n, k);
      std::vector<DeviceBuffer> w16 = upload_dequantized(host, w16_copies);
      const double weight_bytes = static_cast<double>(host.codes.size() + host.scales_packed.size() +
                                                      host.mins_packed.size());
      for (std::int64_t m : {1, 16, 64, 128}) {
        if (o.quick && m > 16) continue;
        if (skip_m(o, m)) continue;
        const double ops = 2.0 * m * n * k;
        DeviceBuffer x(2 * m * k), out(2 * m * n), ref(2 * m * n);
        fill_random_float16(x.data(), static_cast<std::size_t>(m * k), DType::f16, 1.0f, 61 + m, stream);
        const TensorView xv = TensorView::matrix(x.data(), DType::f16, Device::cuda, m, k);
        const TensorView ov = TensorView::matrix(out.data(), DType::f16, Device::cuda, m, n);
        peers.float_gemm(DType::f16, x.data(), w16[0].data(), ref.data(), m, n, k);
        LOWBIT_CUDA_CHECK(cudaMemsetAsync(out.data(), 0xff, out.bytes(), stream));
        weight_only_gemm(xv, dev.views[0], TensorView{}, ov, stream);
        const double err = relative_l2(out.data(), ref.data(), static_cast<std::size_t>(m * n), DType::f16, stream);
        const int copies = static_cast<int>(dev.views.size());
        const double ms = time_ms(
            [&](int i) { weight_only_gemm(xv, dev.views[static_cast<std::size_t>(i % copies)], TensorView{}, ov, stream); },
            stream, ops);
        const double peer_ms = time_ms(
            [&](int i) {
              peers.float_gemm(DType::f16, x.data(), w16[static_cast<std::size_t>(i % w16_copies)].data(), ref.data(), m,
                               n, k);
            },
            stream, ops);
        char check[64];
        std::snprintf(check, sizeof check, "rel %.1e", err);
        GemmRow row = GemmRow::make("weight_only", form.name, "production", m, n, k, "n_by_k", "f16");
        row.ms = ms;
        row.ops = ops;
        row.bytes = weight_bytes + 2.0 * m * k + 2.0 * m * n;
        row.peer = "cublas f16";
        row.peer_ms = peer_ms;
        row.check = check;
        row.ok = err < 5e-3;  // fp32 accumulation in another order, fp16 output rounding
        if (!row.ok) row.check += " (over 5e-3)";
        rows.push_back(row);
        rows.push_back(reference_row("weight_only", "f16 weights", "cublas f16", Shape{m, n, k}, "f16", peer_ms, ops,
                                     static_cast<double>(w16_bytes) + 2.0 * m * k + 2.0 * m * n));
      }
    }
  }
  print_gemm_table("Weight-only GEMM (FP16 activations) against cuBLAS FP16 on the dequantized weights",
                   std::vector<GemmRow>(rows.begin() + static_cast<std::ptrdiff_t>(first), rows.end()), copy_gbps);
}

// The weight-only kernels' variants (weight_only_cuda.h) on the decode shapes, f16
// weights with zero points at groups 32 and 128, M = 1, 4, 8, 16 and 32: the production
// choice (M = 32: the tiled mma.sync kernel) and every gemv shape with the K splits
// {rule, 2, 8} (M = 32: four row groups, kGemvShapeMaxRows), the shapes that split K over
// a cluster also at k-slices 4 and with K parts 1, 2, 4 and 8 beside the rule's. A sweep
// for the dispatch: each row is checked against the production choice's output (bit for bit: a variant
// changes only the order of FP32 sums within the tolerance of weight_only_gpu_test, so
// rows are compared by relative L2 like the section above).
void weight_only_variants_section(const GemmBenchOptions& o, cuda_stream_t stream, double copy_gbps,
                                  std::vector<GemmRow>& rows) {
  namespace wo = cuda::weight_only;
  // The issue's large shapes, and the decode GEMVs of Llama-3-8B (QKV, O, gate | up, down),
  // Llama-3.2-1B, Llama-3-70B (QKV, O; its gate | up and down are the large shapes) and
  // Qwen2.5-14B (QKV, down) at GGUF Q4_1's group 32.
  struct Case {
    std::int64_t n, k, group;
  };
  const Case cases[] = {{28672, 8192, 32}, {28672, 8192, 128}, {8192, 28672, 32}, {8192, 28672, 128},
                        {6144, 4096, 32},  {4096, 4096, 32},   {28672, 4096, 32}, {4096, 14336, 32},
                        {3072, 2048, 32},  {2048, 2048, 32},   {16384, 2048, 32}, {2048, 8192, 32},
                        {10240, 8192, 32}, {8192, 8192, 32},   {7168, 5120, 32},  {5120, 13824, 32}};
  const std::size_t first = rows.size();
  for (const auto& [n, k, group] : cases) {
    if (skip_shape(o, n, k)) continue;
    {
      const WeightOnlySpec spec{4, group, true, DType::f16};
      const HostWeights host = make_weights(spec, n, k, static_cast<std::uint64_t>(n + k + group));
      DeviceWeights dev = upload(host, spec, n, k);
      const double weight_bytes =
          static_cast<double>(host.codes.size() + host.scales_packed.size() + host.mins_packed.size());
      // The same bytes read by a kernel that does nothing else, in one launch: each row's
      // peer, so that its speed-up column is its share of what a read of them takes.
      const double read_ms = measure_read_ms(static_cast<std::size_t>(weight_bytes), stream);
      const char* op = group == 32 ? "w4a16 g32 zp" : "w4a16 g128 zp";
      rows.push_back(reference_row("weight_only_variants", op, kPureRead, Shape{1, n, k}, "-", read_ms, 0.0,
                                   weight_bytes));
      for (const std::int64_t m : {1, 4, 8, 16, 32}) {
        if (skip_m(o, m)) continue;
        DeviceBuffer x(2 * m * k), out(2 * m * n), ref(2 * m * n);
        fill_random_float16(x.data(), static_cast<std::size_t>(m * k), DType::f16, 1.0f, 71 + m, stream);
        const TensorView xv = TensorView::matrix(x.data(), DType::f16, Device::cuda, m, k);
        const TensorView rv = TensorView::matrix(ref.data(), DType::f16, Device::cuda, m, n);
        const TensorView ov = TensorView::matrix(out.data(), DType::f16, Device::cuda, m, n);
        const wo::Params ref_params = wo::make_params(xv, dev.views[0], TensorView{}, rv);
        const wo::Variant chosen = wo::pick(ref_params, wo::Form::q4_zero_point);
        wo::launch(ref_params, DType::f16, wo::Form::q4_zero_point, chosen, stream);
        std::vector<std::pair<std::string, wo::Variant>> variants{{"production", chosen}};
        for (int shape = 0; shape < wo::kGemvShapes; ++shape) {
          for (const int k_slices : {0, 2, 4, 8}) {
            const std::string name = "gemv shape " + std::to_string(shape) + " k_slices " + std::to_string(k_slices);
            if (k_slices != 4) variants.emplace_back(name, wo::Variant{wo::Kernel::gemv, shape, k_slices});
            if (!wo::gemv_shape_takes_k_parts(shape)) continue;
            for (const int parts : {1, 2, 4, 8}) {  // beside the rule's parts (above)
              wo::Variant split{wo::Kernel::gemv, shape, k_slices};
              split.k_parts = parts;
              variants.emplace_back(name + " k_parts " + std::to_string(parts), split);
            }
          }
        }
        const int copies = static_cast<int>(dev.views.size());
        for (const auto& [name, variant] : variants) {
          const wo::Params p = wo::make_params(xv, dev.views[0], TensorView{}, ov);
          if (!wo::takes(variant, p, wo::Form::q4_zero_point)) continue;
          LOWBIT_CUDA_CHECK(cudaMemsetAsync(out.data(), 0xff, out.bytes(), stream));
          wo::launch(p, DType::f16, wo::Form::q4_zero_point, variant, stream);
          const double err = relative_l2(out.data(), ref.data(), static_cast<std::size_t>(m * n), DType::f16, stream);
          const double ops = 2.0 * m * n * k;
          const double ms = time_ms(
              [&](int i) {
                const wo::Params pi =
                    wo::make_params(xv, dev.views[static_cast<std::size_t>(i % copies)], TensorView{}, ov);
                wo::launch(pi, DType::f16, wo::Form::q4_zero_point, variant, stream);
              },
              stream, ops);
          char check[64];
          std::snprintf(check, sizeof check, "rel %.1e", err);
          GemmRow row = GemmRow::make("weight_only_variants", op, name, m, n, k, "n_by_k", "f16");
          row.ms = ms;
          row.ops = ops;
          row.bytes = weight_bytes + 2.0 * m * k + 2.0 * m * n;
          row.peer = kPureRead;
          row.peer_ms = read_ms;
          row.check = check;
          row.ok = err < 1e-3;
          rows.push_back(row);
        }
      }
    }
  }
  print_gemm_table("Weight-only kernel variants on the decode shapes (tuning sweep; against the production choice)",
                   std::vector<GemmRow>(rows.begin() + static_cast<std::ptrdiff_t>(first), rows.end()), copy_gbps);
}

// The Hopper wgmma weight-only kernel (M > 16) against cuBLAS FP16 on the dequantized
// weights, and against the kernels it replaces: the production choice, the wgmma kernel
// named (at M = 16 too: the GEMV crossover), and the mma.sync tiled kernel. Shapes N x K
// of Llama-3-8B / 70B; M from batched decode to prefill. Times are min / median / max
// of the samples (each sample >= 1 ms of back-to-back calls, weights rotated through
// copies that defeat L2). Each configuration is checked against cuBLAS by relative L2.
void weight_only_wgmma_section(const GemmBenchOptions& o, cuda_stream_t stream, CublasPeers& peers, double copy_gbps,
                               std::vector<GemmRow>& rows) {
  namespace wo = cuda::weight_only;
  const WeightForm forms[] = {
      {"w4a16 g32 zp (Q4_1)", {4, 32, true, DType::f16}},
      {"w4a16 g128 zp", {4, 128, true, DType::f16}},
      {"w4a16 g32 sym (Q4_0)", {4, 32, false, DType::f16}},
      {"w8a16 g32 (Q8_0)", {8, 32, false, DType::f16}},
  };
  // The 8B layer's four products (QKV, O, gate|up, down), the 14336 x 4096 of the earlier runs, and
  // a 70B-class FFN.
  const std::int64_t nk[][2] = {{6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}, {14336, 4096}, {28672, 8192}};
  const std::size_t first = rows.size();
  const auto sampled = [&](GemmRow& row, const std::function<void(int)>& launch, double ops) {
    std::vector<double> t = gpu_sample_ms(launch, stream, ops > 2e11 ? 7 : 15);
    std::sort(t.begin(), t.end());
    row.ms = median(t);
    row.ms_min = t.front();
    row.ms_max = t.back();
  };
  for (const auto& [n, k] : nk) {
    if (o.quick && n != 4096) continue;
    if (skip_shape(o, n, k)) continue;
    const std::size_t w16_bytes = static_cast<std::size_t>(n * k) * 2;
    const int w16_copies = f16_copies(w16_bytes);
    for (const WeightForm& form : forms) {
      const WeightOnlySpec spec = form.spec;
      const wo::Form wform = wo::form_of(spec);
      std::fprintf(stderr, "weight-only wgmma %s %lldx%lld: packing on the host\n", form.name,
                   static_cast<long long>(n), static_cast<long long>(k));
      const HostWeights host = make_weights(spec, n, k, static_cast<std::uint64_t>(n + k + spec.bits + spec.group_size));
      DeviceWeights dev = upload(host, spec, n, k);
      std::vector<DeviceBuffer> w16 = upload_dequantized(host, w16_copies);
      const double weight_bytes =
          static_cast<double>(host.codes.size() + host.scales_packed.size() + host.mins_packed.size());
      const int copies = static_cast<int>(dev.views.size());
      for (const std::int64_t m : {16, 32, 64, 128, 256, 512, 2048, 8192}) {
        if (o.quick && m > 64) continue;
        if (skip_m(o, m)) continue;
        const double ops = 2.0 * m * n * k;
        DeviceBuffer x(2 * m * k), out(2 * m * n), ref(2 * m * n);
        fill_random_float16(x.data(), static_cast<std::size_t>(m * k), DType::f16, 1.0f, 83 + m, stream);
        const TensorView xv = TensorView::matrix(x.data(), DType::f16, Device::cuda, m, k);
        const TensorView ov = TensorView::matrix(out.data(), DType::f16, Device::cuda, m, n);
        peers.float_gemm(DType::f16, x.data(), w16[0].data(), ref.data(), m, n, k);
        GemmRow peer = GemmRow::make("weight_only_wgmma", "f16 weights", "cublas f16", m, n, k, "n_by_k", "f16");
        sampled(
            peer,
            [&](int i) {
              peers.float_gemm(DType::f16, x.data(), w16[static_cast<std::size_t>(i % w16_copies)].data(), ref.data(),
                               m, n, k);
            },
            ops);
        peer.ops = ops;
        peer.bytes = static_cast<double>(w16_bytes) + 2.0 * m * k + 2.0 * m * n;
        peer.peer = "cublas f16";
        peer.peer_ms = peer.ms;
        peer.check = "reference";
        const wo::Params p0 = wo::make_params(xv, dev.views[0], TensorView{}, ov);
        // Every wgmma row loads its stages as TMA (the default where the activations allow it)
        // except "wgmma cp.async", every thread's cp.async loader it replaced.
        wo::Variant wgmma{wo::Kernel::wgmma};
        wgmma.tma = true;
        std::vector<std::pair<std::string, wo::Variant>> variants{{"production", wo::pick(p0, wform)}, {"wgmma", wgmma}};
        {
          wo::Variant v = wgmma;
          v.tma = false;
          variants.emplace_back("wgmma cp.async", v);
        }
        if (m > wo::kGemvMaxRows) variants.emplace_back("mma.sync tiled", wo::Variant{wo::Kernel::mma});
        // The tiled grid and stream-K, each forced (the rule picks one).
        for (const int stream_k : {0, 1}) {
          wo::Variant v = wgmma;
          v.stream_k = stream_k;
          variants.emplace_back(stream_k == 1 ? "wgmma stream-K" : "wgmma tiled", v);
        }
        // 64 activation rows on 128 and on 256 weight rows a block (two wgmmas a wait; the
        // rule's for INT8; bench/notes/weight_only.md, the B = 64 step's GEMMs).
        if (m > 32 && m <= 64) {
          for (const int rows : {128, 256}) {
            wo::Variant v = wgmma;
            v.tile_n = rows;
            variants.emplace_back("wgmma " + std::to_string(rows) + " rows", v);
          }
        }
        // The split-K sweep: at large M where the rule picks 1 but the wave's working set of
        // weight and activation panels may exceed L2; at small M where the rule's clusters of
        // 4 and 8 may cost more than their fuller waves save (bench/notes/weight_only.md).
        if (m > wo::kGemvMaxRows) {
          for (const int s : {1, 2, 4, 8}) {
            if (m >= 512 && s == 8) continue;
            wo::Variant v = wgmma;
            v.k_slices = s;
            variants.emplace_back("wgmma split " + std::to_string(s), v);
          }
        }
        for (const auto& [name, variant] : variants) {
          if (!wo::takes(variant, p0, wform)) continue;
          LOWBIT_CUDA_CHECK(cudaMemsetAsync(out.data(), 0xff, out.bytes(), stream));
          wo::launch(p0, DType::f16, wform, variant, stream);
          const double err = relative_l2(out.data(), ref.data(), static_cast<std::size_t>(m * n), DType::f16, stream);
          GemmRow row = GemmRow::make("weight_only_wgmma", form.name, name, m, n, k, "n_by_k", "f16");
          sampled(
              row,
              [&](int i) {
                const wo::Params pi =
                    wo::make_params(xv, dev.views[static_cast<std::size_t>(i % copies)], TensorView{}, ov);
                wo::launch(pi, DType::f16, wform, variant, stream);
              },
              ops);
          char check[64];
          std::snprintf(check, sizeof check, "rel %.1e", err);
          row.ops = ops;
          row.bytes = weight_bytes + 2.0 * m * k + 2.0 * m * n;
          row.peer = "cublas f16";
          row.peer_ms = peer.ms;
          row.check = check;
          row.ok = err < 5e-3;  // fp32 accumulation in another order, fp16 output rounding
          if (!row.ok) row.check += " (over 5e-3)";
          rows.push_back(row);
        }
        rows.push_back(peer);
      }
    }
  }
  print_gemm_table("Weight-only GEMM on wgmma (M > 16) against cuBLAS FP16 on the dequantized weights; ms: median "
                   "(min - max)",
                   std::vector<GemmRow>(rows.begin() + static_cast<std::ptrdiff_t>(first), rows.end()), copy_gbps);
}

// weight_only_blocks_section's prompt-sized rows for one type (its weights' copies, and
// their bytes as held).
void blocks_prefill_rows(const GemmBenchOptions& o, cuda_stream_t stream, CublasPeers& peers, const std::string& name,
                         cuda::weight_only::Form form, const std::vector<PackedWeights>& views, double held,
                         std::vector<GemmRow>& rows) {
  namespace wo = cuda::weight_only;
  const std::int64_t n = views[0].n, k = views[0].k;
  const int copies = static_cast<int>(views.size());
  for (const std::int64_t m : {256, 2048}) {
    if (skip_m(o, m)) continue;
    const double ops = 2.0 * m * n * k;
    DeviceBuffer x(2 * m * k), out(2 * m * n), ref(2 * m * n), w16(2 * n * k);
    fill_random_float16(x.data(), static_cast<std::size_t>(m * k), DType::f16, 1.0f, 83 + m, stream);
    fill_random_float16(w16.data(), static_cast<std::size_t>(n * k), DType::f16, 0.02f, 89, stream);
    const TensorView xv = TensorView::matrix(x.data(), DType::f16, Device::cuda, m, k);
    const TensorView ov = TensorView::matrix(out.data(), DType::f16, Device::cuda, m, n);
    const auto sample = [&](const std::function<void(int)>& launch) {
      std::vector<double> t = gpu_sample_ms(launch, stream, 9);
      std::sort(t.begin(), t.end());
      return t;
    };
    const std::vector<double> peer =
        sample([&](int) { peers.float_gemm(DType::f16, x.data(), w16.data(), ref.data(), m, n, k); });
    const wo::Variant tiled{wo::Kernel::mma};
    wo::launch(wo::make_params(xv, views[0], TensorView{}, TensorView::matrix(ref.data(), DType::f16, Device::cuda, m, n)),
               DType::f16, form, tiled, stream);
    const wo::Variant production = wo::pick(wo::make_params(xv, views[0], TensorView{}, ov), form);
    for (const auto& [label, variant] : {std::pair<const char*, wo::Variant>{"production", production},
                                         std::pair<const char*, wo::Variant>{"mma_sync_tiled", tiled}}) {
      const auto run = [&](const PackedWeights& w) {
        wo::launch(wo::make_params(xv, w, TensorView{}, ov), DType::f16, form, variant, stream);
      };
      // The tiled row is the others' reference: its own check would compare it with itself.
      const bool reference = variant.kernel == wo::Kernel::mma;
      LOWBIT_CUDA_CHECK(cudaMemsetAsync(out.data(), 0xff, out.bytes(), stream));
      run(views[0]);
      const double err =
          reference ? 0.0 : relative_l2(out.data(), ref.data(), static_cast<std::size_t>(m * n), DType::f16, stream);
      const std::vector<double> t = sample([&](int i) { run(views[static_cast<std::size_t>(i % copies)]); });
      char check[64];
      if (reference) {
        std::snprintf(check, sizeof check, "reference");
      } else {
        std::snprintf(check, sizeof check, "rel %.1e%s", err, err < 2e-3 ? "" : " (over 2e-3)");
      }
      const double med = median(t);
      std::printf("%-11s %5lldx%-6lld %4lld %-15s %9.1f %9.1f %9.1f us %7.0f TOPS %5.2fx cublas f16 (%.1f us)  %s\n",
                  name.c_str(), static_cast<long long>(n), static_cast<long long>(k), static_cast<long long>(m),
                  label, t.front() * 1e3, med * 1e3, t.back() * 1e3, ops / (med * 1e9), median(peer) / med,
                  median(peer) * 1e3, check);
      GemmRow row = GemmRow::make("weight_only_blocks", name, label, m, n, k, "n_by_k", "f16");
      row.ms = med;
      row.ms_min = t.front();
      row.ms_max = t.back();
      row.ops = ops;
      row.bytes = held + 2.0 * m * k + 2.0 * m * n;
      row.peer = "cublas f16";
      row.peer_ms = median(peer);
      row.check = check;
      row.ok = err < 2e-3;
      rows.push_back(row);
    }
  }
}

// The GEMV (M = 1, 8 and 16) on GGML block types (weight_only.h's block forms, and
// Q4_1 / Q8_0 through the grouped forms for comparison, and Q4_K as the engine loads it,
// Q4_1 groups): random blocks in the type
// (random_blocks.h) repacked by the engine as a model load does, at Llama-3-8B's ffn
// shapes. Time is min / median / max over the samples; the ratio is the bytes as held
// on the device (codes + scales + mins) per second against the copy ceiling measured in
// this run. Each output is checked against the tiled tensor-core kernel on the same
// weights (another kernel, relative L2). Prompt-sized M (256, 2048): the production
// kernel (wgmma on Hopper) and the tiled one against cuBLAS FP16 on an FP16 matrix of the
// same shape (what a user who dequantizes once runs), min / median / max.
void weight_only_blocks_section(const GemmBenchOptions& o, cuda_stream_t stream, CublasPeers& peers,
                                double copy_gbps, std::vector<GemmRow>& rows) {
  namespace wo = cuda::weight_only;
  using engine::GgmlType;
  // Q4_K twice: the block form, and Q4_1 groups (Q4_K_groups: what the GPU engine loads).
  using engine::KQuantPacking;
  const std::pair<GgmlType, KQuantPacking> types[] = {
      {GgmlType::q4_1, KQuantPacking::blocks}, {GgmlType::q8_0, KQuantPacking::blocks},
      {GgmlType::q5_0, KQuantPacking::blocks}, {GgmlType::q5_1, KQuantPacking::blocks},
      {GgmlType::q4_k, KQuantPacking::blocks}, {GgmlType::q4_k, KQuantPacking::groups},
      {GgmlType::q5_k, KQuantPacking::blocks}, {GgmlType::q6_k, KQuantPacking::blocks},
      {GgmlType::q3_k, KQuantPacking::blocks}, {GgmlType::q2_k, KQuantPacking::blocks}};
  const std::int64_t nk[][2] = {{4096, 14336}, {14336, 4096}};
  std::printf("\nWeight-only GEMV on GGML block types (bytes as held on the device; copy ceiling %.0f GB/s)\n",
              copy_gbps);
  std::printf("pure read: a kernel that only reads the same bytes in one launch (median); read: that time over the row's\n");
  std::printf("%-11s %12s %3s %8s %9s %9s %9s %8s %7s %7s %7s  %s\n", "type", "N x K", "M", "MB", "min us", "med us",
              "max us", "GB/s", "copy", "best", "read", "check vs tiled");
  for (const auto& [n, k] : nk) {
    if (skip_shape(o, n, k)) continue;
    for (const auto& [type, packing] : types) {
      const engine::GgmlTypeInfo& info = engine::ggml_type_info(type);
      const std::string name = std::string(info.name) + (packing == KQuantPacking::groups ? "_groups" : "");
      std::vector<std::uint8_t> blocks(static_cast<std::size_t>(n * k / info.block_elements) * info.block_bytes);
      engine::fill_random_blocks(type, 0.0f, 0.02f, static_cast<std::uint64_t>(n + k) * 31 + static_cast<int>(type),
                                 blocks);
      engine::GgufTensor t;
      t.name = "w";
      t.type = type;
      t.n_dims = 2;
      t.dims = {static_cast<std::uint64_t>(k), static_cast<std::uint64_t>(n), 1, 1};
      t.element_count = static_cast<std::uint64_t>(n * k);
      t.byte_size = blocks.size();
      t.data = blocks.data();
      engine::HostPackedWeights host = engine::repack_ggml_weight(t, packing);
      const std::size_t held = host.codes.size() + 2 * (host.scales.size() + host.mins.size());
      const int copies = static_cast<int>(std::clamp<std::size_t>((std::size_t{256} << 20) / held + 1, 1, 8));
      std::vector<DeviceBuffer> buffers;
      std::vector<PackedWeights> views;
      for (int c = 0; c < copies; ++c) {
        PackedWeights w = host.view();
        for (TensorView* v : {&w.codes, &w.scales, &w.mins}) {
          if (!v->data) continue;
          buffers.emplace_back(v->span_bytes());
          LOWBIT_CUDA_CHECK(cudaMemcpy(buffers.back().data(), v->data, v->span_bytes(), cudaMemcpyHostToDevice));
          v->data = buffers.back().data();
          v->device = Device::cuda;
        }
        views.push_back(w);
      }
      const wo::Form form = wo::form_of(host.spec);
      const double read_ms = measure_read_ms(held, stream);
      std::printf("%-11s %5lldx%-6lld %3s %8.1f %9s %9.1f %9s %9.1f %8.0f %6s %6.1f%%  (pure read)\n", name.c_str(),
                  static_cast<long long>(n), static_cast<long long>(k), "-", static_cast<double>(held) / 1e6, "",
                  read_ms * 1e3, "", static_cast<double>(held) / (read_ms * 1e6),
                  100.0 * static_cast<double>(held) / (read_ms * 1e6) / copy_gbps, "", 100.0);
      for (const std::int64_t m : {1, 8, 16}) {
        if (skip_m(o, m)) continue;
        DeviceBuffer x(2 * m * k), out(2 * m * n), ref(2 * m * n);
        fill_random_float16(x.data(), static_cast<std::size_t>(m * k), DType::f16, 1.0f, 83 + m, stream);
        const TensorView xv = TensorView::matrix(x.data(), DType::f16, Device::cuda, m, k);
        const TensorView ov = TensorView::matrix(out.data(), DType::f16, Device::cuda, m, n);
        wo::launch(wo::make_params(xv, views[0], TensorView{},
                                   TensorView::matrix(ref.data(), DType::f16, Device::cuda, m, n)),
                   DType::f16, form, wo::Variant{wo::Kernel::mma}, stream);
        // The production choice; at M <= 2 on the block forms also the GEMV's other decode
        // (Variant::block_decode: the per-weight f16 decode for the K-quants, whose default is
        // the sub-block decode, and the sub-block decode for Q5_0 / Q5_1) in the same run; at
        // M 8 and 16 the wgmma kernel on 32 activation rows (the kernel above 16 rows).
        const bool k_quant = form == wo::Form::q4_k || form == wo::Form::q5_k || form == wo::Form::q6_k ||
                             form == wo::Form::q3_k || form == wo::Form::q2_k;
        struct Choice {
          const char* variant;  // the JSON row's
          const char* tag;      // the console row's
          bool production;
          wo::Variant v;
        };
        std::vector<Choice> choices{{"production", "", true, {}}};
        if (wo::is_block_form(form) && m <= 2) {
          const int other = k_quant ? 0 : 1;
          choices.push_back({other == 0 ? "per_weight_decode" : "sub_block_decode",
                             other == 0 ? "  [per-weight decode]" : "  [sub-block decode]", false,
                             wo::Variant{wo::Kernel::gemv, -1, 0, false, -1, other}});
        }
        if (m >= 8 && wo::wgmma_available()) {
          wo::Variant v{wo::Kernel::wgmma};
          v.tma = true;
          choices.push_back({"wgmma", "  [wgmma]", false, v});
        }
        for (const Choice& choice : choices) {
          auto run = [&](const PackedWeights& w) {
            if (choice.production) {
              weight_only_gemm(xv, w, TensorView{}, ov, stream);
            } else {
              wo::launch(wo::make_params(xv, w, TensorView{}, ov), DType::f16, form, choice.v, stream);
            }
          };
          LOWBIT_CUDA_CHECK(cudaMemsetAsync(out.data(), 0xff, out.bytes(), stream));
          run(views[0]);
          const double err = relative_l2(out.data(), ref.data(), static_cast<std::size_t>(m * n), DType::f16, stream);
          std::vector<double> ms =
              gpu_sample_ms([&](int i) { run(views[static_cast<std::size_t>(i % copies)]); }, stream, 21);
          std::sort(ms.begin(), ms.end());
          const double med = median(ms);
          const double gbps = static_cast<double>(held) / (med * 1e6),
                       best = static_cast<double>(held) / (ms.front() * 1e6);
          char check[64];
          std::snprintf(check, sizeof check, "rel %.1e%s", err, err < 2e-3 ? "" : " (over 2e-3)");
          std::printf("%-11s %5lldx%-6lld %3lld %8.1f %9.1f %9.1f %9.1f %8.0f %6.1f%% %6.1f%% %6.1f%%  %s%s\n",
                      name.c_str(), static_cast<long long>(n), static_cast<long long>(k),
                      static_cast<long long>(m), static_cast<double>(held) / 1e6, ms.front() * 1e3, med * 1e3,
                      ms.back() * 1e3, gbps, 100.0 * gbps / copy_gbps, 100.0 * best / copy_gbps,
                      100.0 * read_ms / med, check, choice.tag);
          GemmRow row = GemmRow::make("weight_only_blocks", name, choice.variant, m, n, k, "n_by_k", "f16");
          row.ms = med;
          row.ops = 2.0 * m * n * k;
          row.bytes = static_cast<double>(held) + 2.0 * m * k + 2.0 * m * n;
          row.peer = kPureRead;
          row.peer_ms = read_ms;
          row.check = check;
          row.ok = err < 2e-3;
          rows.push_back(row);
        }
      }
      blocks_prefill_rows(o, stream, peers, name, form, views, static_cast<double>(held), rows);
    }
  }
}

// A section runs when named, or, for the default sections, when none is named.
bool wanted(const GemmBenchOptions& o, const char* section, bool by_default = true) {
  if (o.only_sections.empty()) return by_default;
  return std::find(o.only_sections.begin(), o.only_sections.end(), section) != o.only_sections.end();
}

}  // namespace

void run_gemm_gpu(const GemmBenchOptions& options, double copy_gbps, std::vector<GemmRow>& rows) {
  cudaStream_t stream{};
  LOWBIT_CUDA_CHECK(cudaStreamCreate(&stream));
  {
    CublasPeers peers(stream);
    if (wanted(options, "int8")) int8_section(options, stream, peers, rows);
    if (wanted(options, "epilogue")) epilogue_section(options, stream, peers, rows);
    if (wanted(options, "int4")) int4_section(options, stream, peers, rows);
    if (wanted(options, "weight_only")) weight_only_section(options, stream, peers, copy_gbps, rows);
    if (wanted(options, "weight_only_variants", false)) weight_only_variants_section(options, stream, copy_gbps, rows);
    if (wanted(options, "weight_only_wgmma", false)) weight_only_wgmma_section(options, stream, peers, copy_gbps, rows);
    if (wanted(options, "weight_only_blocks", false)) weight_only_blocks_section(options, stream, peers, copy_gbps, rows);
    LOWBIT_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  LOWBIT_CUDA_CHECK(cudaStreamDestroy(stream));
}

}  // namespace lowbit::bench

// The weight-only GEMM family on the GPU (include/lowbit/weight_only.h): its kernels as
// a table of variants, the dispatch's choice among them, and the one launch switch over
// the activation type and weight form. Arguments arrive validated (the public entry, or
// the engine once at model upload); nothing here allocates or synchronizes. No CUDA
// headers, so host code and tests include it.
//
// Kernels:
//   small_gemv  M <= 16, small matrices (the layers of small models): every warp holds
//               its tile pair's codes in registers, loaded before the dependency wait
//   gemv        M <= 16: weights streamed through a per-warp cp.async ring, mma.sync;
//               for M > 8 with the activations staged once per k-slice group and, where
//               N is narrow, K split over a cluster (Variant::k_parts)
//   mma         any M: a tiled tensor-core kernel (mma.sync), split-K over a cluster
//   wgmma       any M, Hopper (sm_90a) only: wgmma with the weights dequantized into its
//               register A operand, split-K over a cluster (wgmma.cu)
// The GGML block forms (f16 only) run on gemv, mma and wgmma (TMA loads only), not
// small_gemv.
#pragma once

#include <cstdint>

#include "lowbit/tensor.h"
#include "lowbit/weight_only.h"

namespace lowbit::cuda::weight_only {

// The weight forms: lowbit's grouped INT4 / INT8, and the GGML block forms (f16 only;
// formats/weight_pack.h has their self-contained units).
enum class Form : int { q4_zero_point, q4_symmetric, int8, q5_0, q5_1, q4_k, q5_k, q6_k, q3_k, q2_k };

constexpr bool is_block_form(Form f) { return f >= Form::q5_0; }

// The raw arguments every kernel takes (formats/weight_pack.h has the packed layout).
struct Params {
  const void* x = nullptr;  // [M x K] act dtype, row stride ldx
  std::int64_t ldx = 0;
  bool x_vec16 = false;     // x and ldx allow 16-byte loads of 8 elements
  const std::uint8_t* codes = nullptr;
  const std::uint16_t* scales = nullptr;
  const std::uint16_t* mins = nullptr;
  const std::uint16_t* bias = nullptr;  // [N] or null
  std::int64_t bias_stride = 0;
  void* out = nullptr;  // [M x N] act dtype, row stride ldo
  std::int64_t ldo = 0;
  std::int64_t m = 0, n = 0, k = 0;
  std::int64_t n_tiles = 0, k_steps = 0, groups = 0;
  int group_shift = 0, groups_per_step = 0;
  // SwiGLU epilogue (the GEMV kernels, f16, no bias): the N rows are gate and up in
  // alternating tiles of 8 (weights packed by engine::repack_ggml_weights with
  // RowOrder::swiglu_tiles), and out [M x N / 2] gets silu(gate) * up of each pair.
  bool swiglu = false;
};

// Rows the GEMV kernels take: one m16 mma tile. A shape of the tuning table (Variant::
// shape, f16 Q4 with zero points) takes up to kGemvShapeMaxRows (four row groups of 8),
// for the sweep to compare against the tiled kernel before a rule takes it there.
constexpr std::int64_t kGemvMaxRows = 16;
constexpr std::int64_t kGemvShapeMaxRows = 32;

enum class Kernel : int { small_gemv, gemv, mma, wgmma };

// A kernel and its tuning: the dispatch's choice (pick) or a benchmark's sweep.
struct Variant {
  Kernel kernel = Kernel::gemv;
  // gemv (f16 weights with zero points only): an entry of its shape table, 0..8 the
  // streaming kernel's {tiles a warp, ring stages, steps a slot}, 9..15 the staged-
  // activation kernel's; -1: the rules of gemv.cu.
  int shape = -1;
  // gemv: the K split inside a block; wgmma: the blocks of a cluster along K (1, 2, 4,
  // 8); 0: the kernel's rule.
  int k_slices = 0;
  bool rotate = false;  // gemv: each warp starts its K range at a staggered chunk
  // gemv: programmatic dependent launch: 0 off, 1 wait first, 2 prefetch the weights
  // before the wait, 3 as 2 with the successor launched after the main loop (the
  // default), -1 the default.
  int pdl = -1;
  // gemv, GGML block forms: 1 the sub-block decode (codes unscaled in the mma, factors on
  // the FP32 partials; M <= 2), 0 the per-weight f16 decode, -1 the default (1 at M <= 2 for
  // the K-quants, and for Q5_0 / Q5_1 where N is narrow (gemv.cu); 0 otherwise).
  int block_decode = -1;
  // wgmma: activation rows a block takes (32, 64, 128); 0: the smallest that holds M.
  int tile_m = 0;
  // wgmma: weight rows a block takes, 128 or 256 (two m64 blocks a warpgroup); 0: the
  // rule (256 at tile_m 128 and for INT8 at 64, else 128). Only tile_m 64 takes either.
  int tile_n = 0;
  // wgmma: each stage loads as four TMA boxes (activations, codes, scales, mins) issued by
  // one thread on a full-barrier a stage, instead of cp.async by every thread (pick sets
  // it where takes allows). Needs the activations 16-byte aligned with ldx a multiple of 8
  // (Params::x_vec16) and the driver's tensor-map encoder.
  bool tma = false;
  // wgmma with TMA loads (any tile shape): 1 stream-K (persistent blocks share the (tile,
  // K step) units evenly; partial tiles meet in a per-stream workspace), 0 the tiled grid,
  // -1 the rule (wgmma.cu's stream_k_pays, with k_slices 0).
  int stream_k = -1;
  // gemv, the staged-activation shapes of 8-warp blocks (9-12) and the rules' launches of
  // that kernel: blocks of a cluster along K (1 to 8), their partials summed over
  // distributed shared memory; 0: the fill rule of gemv.cu.
  int k_parts = 0;
};
constexpr int kGemvShapes = 16;
constexpr int kGemvMaxParts = 8;
constexpr bool gemv_shape_takes_k_parts(int shape) { return shape >= 9 && shape <= 12; }

Form form_of(const WeightOnlySpec& spec);

// The kernels' arguments from validated views.
Params make_params(const TensorView& x, const PackedWeights& w, const TensorView& bias, const TensorView& out);

// Whether the wgmma kernel runs on the current device (compute capability 9.0 and an
// sm_90a image in this build); it takes every form.
bool wgmma_available();

// Whether the wgmma kernel's unsplit blocks store their output tiles by TMA for these
// arguments (16-byte aligned output rows, N a multiple of 8, the driver's tensor-map
// encoder; else the split path's shared-memory pass, the same values).
bool wgmma_tma_store_takes(const Params& p);

// For tests: whether every flag of this stream's stream-K workspace on the current device
// is zero, as the finishers leave them after each launch (true where the stream has none).
// Synchronizes the stream.
bool stream_k_flags_clear(cuda_stream_t stream);

// Whether a variant takes these arguments (M range, register or shared-memory limits).
bool takes(const Variant& variant, const Params& p, Form form);

// The production choice: for M <= 16 the small-matrix kernel where it takes the shape,
// else the streaming GEMV; above, the wgmma kernel where the device runs it (Hopper,
// grouped forms), else the tiled mma.sync kernel, the stages loaded as TMA where the
// activations allow. The crossover as measured (H200, `lowbit bench gemm --section
// weight_only_wgmma`, median ms mma.sync vs wgmma at M = 32): INT8 wgmma 1.2-1.3x faster
// (Q8_0 28672 x 8192 0.101 vs 0.076); INT4 since its A registers come straight from their
// words (session 20) 1.07-1.13x (Q4_1 28672 x 8192 0.078 vs 0.069, 4096 x 4096 0.016 vs
// 0.015); from 64 wgmma everywhere (Q4_1 64 x 28672 x 8192 0.146 vs 0.085).
constexpr std::int64_t kWgmmaMinRows = kGemvMaxRows + 1;
Variant pick(const Params& p, Form form);

// Runs `variant` (which must take p) on `stream`.
void launch(const Params& p, DType act_dtype, Form form, const Variant& variant, cuda_stream_t stream);

// pick + launch: what the public entry and the engine call.
void weight_only_gemm(const TensorView& x, const PackedWeights& w, const TensorView& bias, const TensorView& out,
                      cuda_stream_t stream);

// The gate|up product of a SwiGLU block and the activation in one launch (Params::swiglu;
// w from repack_ggml_weights with RowOrder::swiglu_tiles): out [M x N / 2] = silu(gate) * up,
// the same bits as the product followed by cuda::model::silu_mul. M <= kGemvMaxRows, f16.
// `variant` (a gemv variant; null: the rules) for the tests and the sweep.
void weight_only_gemm_swiglu(const TensorView& x, const PackedWeights& w, const TensorView& out,
                             cuda_stream_t stream, const Variant* variant = nullptr);

// Whether the engine takes the SwiGLU epilogue for this product: M <= kGemvMaxRows, f16,
// and the plain product would run on the GEMV too (where the small-matrix kernel is the
// faster choice, the separate silu_mul launch costs less than giving it up).
bool swiglu_epilogue_pays(const TensorView& x, const PackedWeights& w);

}  // namespace lowbit::cuda::weight_only

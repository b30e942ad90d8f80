// The weight-only family's dispatch: arguments from views, the production choice, and
// the one switch from run-time (activation type, form, kernel) to a launcher.
#include <type_traits>

#include "cuda/gemm/tma.h"
#include "cuda/weight_only/launch.cuh"
#include "formats/weight_pack.h"
#include "lowbit/error.h"

namespace lowbit::cuda::weight_only {

Form form_of(const WeightOnlySpec& spec) {
  switch (spec.blocks) {
    case WeightBlocks::q5_0: return Form::q5_0;
    case WeightBlocks::q5_1: return Form::q5_1;
    case WeightBlocks::q4_k: return Form::q4_k;
    case WeightBlocks::q5_k: return Form::q5_k;
    case WeightBlocks::q6_k: return Form::q6_k;
    case WeightBlocks::q3_k: return Form::q3_k;
    case WeightBlocks::q2_k: return Form::q2_k;
    case WeightBlocks::none: break;
  }
  return spec.bits == 8 ? Form::int8 : spec.zero_point ? Form::q4_zero_point : Form::q4_symmetric;
}

Params make_params(const TensorView& x, const PackedWeights& w, const TensorView& bias, const TensorView& out) {
  const formats::WeightPackLayout layout =
      w.spec.blocks != WeightBlocks::none
          ? formats::make_block_pack_layout(static_cast<formats::WeightBlocks>(w.spec.blocks), w.n, w.k)
          : formats::make_weight_pack_layout(w.spec.bits, w.spec.zero_point, w.spec.group_size, w.n, w.k);
  Params p;
  p.x = x.data;
  p.ldx = x.strides[0];
  p.x_vec16 = reinterpret_cast<std::uintptr_t>(x.data) % 16 == 0 && p.ldx % 8 == 0;
  p.codes = w.codes.ptr<const std::uint8_t>();
  p.scales = w.scales.data ? w.scales.ptr<const std::uint16_t>() : nullptr;  // (block forms: none)
  p.mins = layout.zero_point && w.mins.data ? w.mins.ptr<const std::uint16_t>() : nullptr;
  p.bias = bias.data ? bias.ptr<const std::uint16_t>() : nullptr;
  p.bias_stride = bias.data ? bias.strides[bias.rank - 1] : 0;
  p.out = out.data;
  p.ldo = out.strides[0];
  p.m = x.rows();
  p.n = w.n;
  p.k = w.k;
  p.n_tiles = layout.n_tiles;
  p.k_steps = layout.k_steps;
  p.groups = layout.groups;
  p.group_shift = layout.group_shift;
  p.groups_per_step = layout.groups_per_step;
  return p;
}

// Whether the wgmma kernel's TMA loads take these activations: 16-byte aligned rows a
// multiple of 8 apart, and the driver's tensor-map encoder.
bool tma_loads_take(const Params& p) { return p.x_vec16 && gemm::tensor_map_encoder_available(); }

bool takes(const Variant& v, const Params& p, Form form) {
  if (p.swiglu && v.kernel != Kernel::gemv) return false;  // the GEMV's epilogue only
  if (v.k_parts != 0 && v.kernel != Kernel::gemv) return false;
  if (v.stream_k < -1 || v.stream_k > 1 || (v.stream_k == 1 && v.kernel != Kernel::wgmma)) return false;
  switch (v.kernel) {
    case Kernel::small_gemv: return small_gemv_takes(p, form);
    case Kernel::gemv:
      return (p.m <= kGemvMaxRows || (v.shape >= 0 && p.m <= kGemvShapeMaxRows)) &&
             (v.shape < 0 || (form == Form::q4_zero_point && v.shape < kGemvShapes)) &&
             (v.block_decode != 1 || (is_block_form(form) && p.m <= 2)) &&
             (v.k_parts == 0 || (gemv_shape_takes_k_parts(v.shape) && v.k_parts >= 1 && v.k_parts <= kGemvMaxParts));
    case Kernel::mma: return true;
    case Kernel::wgmma:
      return wgmma_available() && (v.tile_m == 0 || v.tile_m == 32 || v.tile_m == 64 || v.tile_m == 128) &&
             (v.tile_n == 0 || wgmma_tile_n(wgmma_tile_m(p, v), v, form) == v.tile_n) &&
             (v.k_slices == 0 || v.k_slices == 1 || v.k_slices == 2 || v.k_slices == 4 || v.k_slices == 8) &&
             (!v.tma || tma_loads_take(p)) && (v.tma || !is_block_form(form)) &&
             (v.stream_k != 1 || (v.tma && v.k_slices == 0));
  }
  return false;
}

// INT8 from 8 rows on wide N (N >= 2 K): the wgmma kernel, on 32 activation rows, beats
// the staged-activation GEMV there (H200: 14336 x 4096 M = 16 40.0 -> 24.7 us, M = 8 28.3 ->
// 24.4; 28672 x 8192 M = 16 0.113 -> 0.076-0.093 ms) and loses at N <= K (4096 x 4096,
// 4096 x 14336); bench/notes/weight_only.md, session 35.
constexpr std::int64_t kInt8WideWgmmaMinRows = 8;
bool int8_wide_takes_wgmma(const Params& p, Form form) {
  return form == Form::int8 && p.m >= kInt8WideWgmmaMinRows && p.n >= 2 * p.k && wgmma_available() &&
         tma_loads_take(p);
}

Variant pick(const Params& p, Form form) {
  if (p.swiglu) return Variant{Kernel::gemv};
  if (small_gemv_takes(p, form) && small_gemv_pays(p, form)) return Variant{Kernel::small_gemv};
  if (p.m <= kGemvMaxRows && int8_wide_takes_wgmma(p, form)) {
    Variant v{Kernel::wgmma};
    v.tma = true;
    return v;
  }
  if (p.m <= kGemvMaxRows) return Variant{Kernel::gemv};
  if (p.m < kWgmmaMinRows || !wgmma_available()) return Variant{Kernel::mma};
  // The stage loads as TMA wherever the activations allow it: 1.06-1.36x over the
  // cp.async loader at every M measured (bench/notes/weight_only.md).
  Variant v{Kernel::wgmma};
  v.tma = tma_loads_take(p);
  if (!v.tma && is_block_form(form)) return Variant{Kernel::mma};  // (the block forms load by TMA only)
  return v;
}

namespace {

template <class T, Form F>
void run(const Params& p, const Variant& v, cudaStream_t stream) {
  switch (v.kernel) {
    case Kernel::small_gemv:
      if constexpr (!is_block_form(F)) return run_small_gemv<T, F>(p, v, stream);
      break;  // (takes() refuses it)
    case Kernel::gemv: return run_gemv<T, F>(p, v, stream);
    case Kernel::mma: return run_mma<T, F>(p, v, stream);
    case Kernel::wgmma: return run_wgmma<T, F>(p, v, stream);
  }
}

template <class T>
void run_form(const Params& p, Form form, const Variant& v, cudaStream_t stream) {
  switch (form) {
    case Form::q4_zero_point: return run<T, Form::q4_zero_point>(p, v, stream);
    case Form::q4_symmetric: return run<T, Form::q4_symmetric>(p, v, stream);
    case Form::int8: return run<T, Form::int8>(p, v, stream);
    default: break;
  }
  if constexpr (std::is_same_v<T, __half>) {
    switch (form) {
      case Form::q5_0: return run<T, Form::q5_0>(p, v, stream);
      case Form::q5_1: return run<T, Form::q5_1>(p, v, stream);
      case Form::q4_k: return run<T, Form::q4_k>(p, v, stream);
      case Form::q5_k: return run<T, Form::q5_k>(p, v, stream);
      case Form::q6_k: return run<T, Form::q6_k>(p, v, stream);
      case Form::q3_k: return run<T, Form::q3_k>(p, v, stream);
      case Form::q2_k: return run<T, Form::q2_k>(p, v, stream);
      default: break;
    }
  }
  LOWBIT_FAIL("weight_only: form ", static_cast<int>(form), " takes f16 activations only");
}

}  // namespace

void launch(const Params& p, DType act_dtype, Form form, const Variant& v, cuda_stream_t stream) {
  LOWBIT_CHECK(takes(v, p, form), "weight_only: kernel variant ", static_cast<int>(v.kernel), " shape ", v.shape,
               " does not take M = ", p.m, ", N = ", p.n, ", K = ", p.k);
  if (p.m == 0) return;
  if (act_dtype == DType::bf16) {
    run_form<__nv_bfloat16>(p, form, v, stream);
  } else {
    run_form<__half>(p, form, v, stream);
  }
}

void weight_only_gemm(const TensorView& x, const PackedWeights& w, const TensorView& bias, const TensorView& out,
                      cuda_stream_t stream) {
  const Params p = make_params(x, w, bias, out);
  const Form form = form_of(w.spec);
  launch(p, w.spec.act_dtype, form, pick(p, form), stream);
}

static Params swiglu_params(const TensorView& x, const PackedWeights& w, const TensorView& out) {
  LOWBIT_CHECK(x.rows() <= kGemvMaxRows, "weight_only: the SwiGLU epilogue is the GEMV's: M = ", x.rows(),
               " > ", kGemvMaxRows);
  LOWBIT_CHECK(w.spec.act_dtype == DType::f16, "weight_only: the SwiGLU epilogue takes f16 activations");
  LOWBIT_CHECK(w.n % 16 == 0, "weight_only: SwiGLU weights hold gate and up in tiles of 8 rows: N = ", w.n,
               " is not a multiple of 16");
  LOWBIT_CHECK(out.rank == 2 && out.rows() == x.rows() && out.cols() == w.n / 2, "weight_only: the SwiGLU output is [",
               x.rows(), " x ", w.n / 2, "]");
  // make_params reads out's row stride only; its width is N / 2.
  Params p = make_params(x, w, TensorView{}, out);
  p.swiglu = true;
  return p;
}

bool swiglu_epilogue_pays(const TensorView& x, const PackedWeights& w) {
  if (x.rows() > kGemvMaxRows || w.spec.act_dtype != DType::f16 || w.n % 16 != 0) return false;
  const Params p = make_params(x, w, TensorView{}, TensorView::matrix(nullptr, DType::f16, Device::cuda, x.rows(), w.n));
  return pick(p, form_of(w.spec)).kernel == Kernel::gemv;
}

void weight_only_gemm_swiglu(const TensorView& x, const PackedWeights& w, const TensorView& out,
                             cuda_stream_t stream, const Variant* variant) {
  const Params p = swiglu_params(x, w, out);
  const Form form = form_of(w.spec);
  launch(p, w.spec.act_dtype, form, variant ? *variant : pick(p, form), stream);
}

}  // namespace lowbit::cuda::weight_only

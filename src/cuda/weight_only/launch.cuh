// The per-kernel launchers behind weight_only_cuda.h's one launch switch: each is a
// template over the activation type T (__half, __nv_bfloat16) and the weight form F,
// instantiated for the six pairs in its kernel's file (LOWBIT_WEIGHT_ONLY_PAIRS).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cuda/weight_only/weight_only_cuda.h"

namespace lowbit::cuda::weight_only {

template <class T, Form F>
void run_small_gemv(const Params& p, const Variant& v, cudaStream_t stream);
template <class T, Form F>
void run_gemv(const Params& p, const Variant& v, cudaStream_t stream);
template <class T, Form F>
void run_mma(const Params& p, const Variant& v, cudaStream_t stream);
template <class T, Form F>
void run_wgmma(const Params& p, const Variant& v, cudaStream_t stream);

// The wgmma kernel's activation rows per block for p (the variant's, or its rule), and
// its weight rows per block at those activation rows for the form.
int wgmma_tile_m(const Params& p, const Variant& v);
int wgmma_tile_n(int tile_m, const Variant& v, Form form);

// The small-matrix kernel's limits (its registers hold a warp's codes), and whether it
// beats the streaming kernel (small matrices: under 1 MB of codes).
bool small_gemv_takes(const Params& p, Form form);
bool small_gemv_pays(const Params& p, Form form);

}  // namespace lowbit::cuda::weight_only

// Explicit instantiations of a launcher for every (activation type, form) pair; the GGML
// block forms take f16 activations only and every kernel but the small-matrix GEMV.
#define LOWBIT_WEIGHT_ONLY_PAIRS(fn)                                                                      \
  template void fn<__half, Form::q4_zero_point>(const Params&, const Variant&, cudaStream_t);           \
  template void fn<__half, Form::q4_symmetric>(const Params&, const Variant&, cudaStream_t);            \
  template void fn<__half, Form::int8>(const Params&, const Variant&, cudaStream_t);                    \
  template void fn<__nv_bfloat16, Form::q4_zero_point>(const Params&, const Variant&, cudaStream_t);    \
  template void fn<__nv_bfloat16, Form::q4_symmetric>(const Params&, const Variant&, cudaStream_t);     \
  template void fn<__nv_bfloat16, Form::int8>(const Params&, const Variant&, cudaStream_t)

#define LOWBIT_WEIGHT_ONLY_BLOCK_FORMS(fn)                                          \
  template void fn<__half, Form::q5_0>(const Params&, const Variant&, cudaStream_t); \
  template void fn<__half, Form::q5_1>(const Params&, const Variant&, cudaStream_t); \
  template void fn<__half, Form::q4_k>(const Params&, const Variant&, cudaStream_t); \
  template void fn<__half, Form::q5_k>(const Params&, const Variant&, cudaStream_t); \
  template void fn<__half, Form::q6_k>(const Params&, const Variant&, cudaStream_t); \
  template void fn<__half, Form::q3_k>(const Params&, const Variant&, cudaStream_t); \
  template void fn<__half, Form::q2_k>(const Params&, const Variant&, cudaStream_t)

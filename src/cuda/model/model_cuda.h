// The small kernels of the GPU forward pass (everything but the weight-only GEMMs and
// attention; RoPE rides on the KV append, cuda/kv/kv_cuda.h): embedding rows, residual
// add + RMSNorm, SwiGLU, greedy argmax, and the row gather of the batch engine.
// The residual stream is f32, as in the CPU reference; what the GEMMs read is f16.
// All run on `stream`.
#pragma once

#include <cstddef>
#include <cstdint>

#include "lowbit/tensor.h"

namespace lowbit::cuda::model {

// x[i] = table[tokens[i]] (f32 [vocab x d]); tokens int32 on the device, checked
// against vocab on the host by the caller.
void embed_rows(const float* table, const std::int32_t* tokens, std::int64_t n, std::int64_t d, float* x,
                cuda_stream_t stream);

// Per row: if delta, x += delta (f16); then h = x / rms(x) * weight as f16, with
// rms(x) = sqrt(mean(x^2) + eps), over n rows of d.
void add_rms_norm(float* x, const std::uint16_t* delta, const float* weight, std::int64_t n, std::int64_t d,
                  float eps, std::uint16_t* h, cuda_stream_t stream);

// out[i, j] = silu(gate) * up as f16, gu f16 [n x 2f]: gate | up (gate gu[i, j], up
// gu[i, f + j]), or with swiglu_tiles gate and up in alternating tiles of 8 columns
// (gate gu[i, 16 (j / 8) + j % 8], up 8 columns on: the order of the weights that the
// gate|up GEMV's SwiGLU epilogue reads, cuda/weight_only).
void silu_mul(const std::uint16_t* gu, std::int64_t n, std::int64_t f, std::uint16_t* out, cuda_stream_t stream,
              bool swiglu_tiles = false);

// *token = argmax of logits (f16 [vocab]), lowest id on ties (NaN never wins); then,
// if advance is set, ++*advance (the next step's position); if non_finite is set and a
// logit is NaN or +-Inf, *non_finite = 1 (never cleared here: it holds across steps).
// mirror (needs advance): {token, the flag} also to mirror[2 (p % 2)], p the position
// before the increment: mapped pinned memory that the host reads once the step's event
// has completed, two slots so that step p + 1 may run while the host reads step p's,
// without a copy between the steps.
void argmax_token(const std::uint16_t* logits, std::int64_t vocab, std::int32_t* token, std::int32_t* advance,
                  std::int32_t* non_finite, cuda_stream_t stream, std::int32_t* mirror = nullptr);

// dst row i = src row rows[i], for i < n: row_bytes bytes each, src rows src_stride
// bytes apart, dst rows packed (the rows of a batched pass whose logits are wanted).
// rows: int32 on the device, each in the source's range (the caller's to check);
// row_bytes and src_stride multiples of 4, src and dst 4-byte aligned.
void gather_rows(const void* src, std::size_t src_stride, std::size_t row_bytes, const std::int32_t* rows,
                 std::int64_t n, void* dst, cuda_stream_t stream);

}  // namespace lowbit::cuda::model

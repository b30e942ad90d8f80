// ggml tensor blocks decoded to f32: the CPU reference reads GGUF weights through
// this (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 and the K-quants Q2_K .. Q6_K),
// each as ggml's reference decoder computes it (the same f32 operations in the same
// order: gguf's NumPy decoder gives the same bits), except Q4_1, which is one rounding
// of q * d + m, the GPU weight-only kernels' definition. The GPU path repacks instead
// (repack.h); this is what both must agree with.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "engine/gguf/reader.h"

namespace lowbit::engine {

// Whether dequantize_row() decodes `type`.
bool can_dequantize(GgmlType type);
// "expected F32, F16, ..., Q6_K": the decodable types, for error messages.
const char* dequantizable_types();

// Decodes `count` elements (a multiple of the type's block size) from `src` into
// `dst`. `what` names the tensor in errors (unsupported type, partial block).
void dequantize_row(GgmlType type, const std::uint8_t* src, float* dst, std::int64_t count,
                    std::string_view what = "tensor");

// What dequantize_tensor() does with a NaN or Inf among the decoded values: a model's
// weights must be finite (reject: the error names the element); an inspection of the
// file's bytes wants ggml's values as they are (keep).
enum class NonFinite { reject, keep };

// The whole tensor, dims[0] fastest, as f32. Throws lowbit::Error naming the tensor
// and its type when the type is not decodable, or the first non-finite element under
// NonFinite::reject.
std::vector<float> dequantize_tensor(const GgufTensor& tensor, NonFinite non_finite = NonFinite::reject);

}  // namespace lowbit::engine

// Dispatch from run-time enums to templates.
//
// Calls fn with a value of the C++ storage type of a floating dtype (float, Half or
// BFloat16), so that one template serves all three input/output types.
#pragma once

#include "formats/code_scheme.h"
#include "formats/float16.h"
#include "lowbit/error.h"
#include "lowbit/quant.h"
#include "lowbit/tensor.h"

namespace lowbit {

template <class Fn>
decltype(auto) visit_float_dtype(DType dtype, const char* what, Fn&& fn) {
  switch (dtype) {
    case DType::f32: return fn(float{});
    case DType::f16: return fn(formats::Half{});
    case DType::bf16: return fn(formats::BFloat16{});
    default: break;
  }
  LOWBIT_FAIL(what, ": expected dtype f32, f16 or bf16, got ", dtype_name(dtype));
}

// Calls fn with the formats::CodeScheme of a QuantScheme.
template <class Fn>
decltype(auto) visit_code_scheme(QuantScheme scheme, Fn&& fn) {
  switch (scheme) {
    case QuantScheme::int8_symmetric: return fn(formats::Int8Symmetric{});
    case QuantScheme::int4_asymmetric: return fn(formats::Int4Asymmetric{});
    case QuantScheme::int8_asymmetric: return fn(formats::Int8Asymmetric{});
    case QuantScheme::int4_symmetric: return fn(formats::Int4Symmetric{});
  }
  LOWBIT_FAIL("spec.scheme: unknown value ", static_cast<int>(scheme));
}

}  // namespace lowbit

// CPU references of the integer GEMMs of include/lowbit/gemm.h: INT32 accumulation in
// the obvious loop order, the epilogue from src/formats/gemm_epilogue.h. Arguments
// arrive validated. OpenMP over rows.
#pragma once

#include <cstdint>

#include "lowbit/gemm.h"

namespace lowbit::cpu {

void int8_gemm(const TensorView& a, const TensorView& b, BLayout b_layout, const TensorView& out,
               const GemmEpilogue& epilogue);

void int4_gemm(const TensorView& a_packed, const TensorView& b_packed, BLayout b_layout, std::int64_t k,
               const TensorView& out, const GemmEpilogue& epilogue);

}  // namespace lowbit::cpu

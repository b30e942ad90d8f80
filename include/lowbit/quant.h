// Quantize and dequantize 2-D tensors (T rows = tokens, D columns = channels) to
// INT8 or INT4, symmetric or asymmetric, with one scale per tensor, per channel
// (column), per token (row) or per group of G channels within a row.
//
// Every function dispatches on the tensors' device: all CPU views run the CPU
// reference (OpenMP), all CUDA views run the production kernels on `stream`.
// Arguments are validated first; a bad one throws lowbit::Error naming it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "lowbit/tensor.h"

namespace lowbit {

// The formulas are in src/formats/code_scheme.h.
enum class QuantScheme : std::uint8_t {
  int8_symmetric,   // codes i8 [T, D], -128..127 (s = absmax / 127); scales only
  int4_asymmetric,  // codes u8 [T, ceil(D/2)], 0..15, low nibble first (s = range / 15); scales and mins
  int8_asymmetric,  // codes u8 [T, D], 0..255 (s = range / 255); scales and mins
  int4_symmetric,   // codes u8 [T, ceil(D/2)], two's complement nibbles -8..7, low nibble first
                    // (s = absmax / 7; the operand form of int4_gemm); scales only
};

// Every scheme, in declaration order.
inline constexpr QuantScheme kQuantSchemes[] = {QuantScheme::int8_symmetric, QuantScheme::int4_asymmetric,
                                                QuantScheme::int8_asymmetric, QuantScheme::int4_symmetric};

int scheme_bits(QuantScheme scheme);         // 8 or 4
bool scheme_has_mins(QuantScheme scheme);    // the asymmetric schemes
DType scheme_code_dtype(QuantScheme scheme); // i8 for int8_symmetric, else u8

enum class Granularity : std::uint8_t {
  per_tensor,   // scales [1]
  per_channel,  // scales [D]: one per column, over all T rows (KV keys)
  per_token,    // scales [T]: one per row (KV values)
  per_group,    // scales [T, ceil(D/G)]: groups of G columns within a row
};

struct QuantSpec {
  QuantScheme scheme = QuantScheme::int8_symmetric;
  Granularity granularity = Granularity::per_channel;
  std::int64_t group_size = 0;  // per_group only: a positive multiple of 16
};

const char* scheme_name(QuantScheme scheme);
const char* granularity_name(Granularity granularity);
QuantScheme parse_scheme(const char* name);           // "int8" | "int4" | "int8_asym" | "int4_sym"
Granularity parse_granularity(const char* name);      // "tensor" | "channel" | "token" | "group"

// Shapes of the quantized form of a rows x cols input.
struct QuantLayout {
  std::int64_t code_cols;   // D for int8, ceil(D/2) bytes for int4
  std::int64_t scale_rows;  // 1, 1, T, T
  std::int64_t scale_cols;  // 1, D, 1, ceil(D/G)
  std::int64_t scale_count() const { return scale_rows * scale_cols; }
};
QuantLayout quant_layout(const QuantSpec& spec, std::int64_t rows, std::int64_t cols);

// quant_layout as a rule on the input's sizes, for callers that hold the sizes
// symbolically (the Python torch ops' shape functions): each field is
// ceil(source / divisor), the source being 1, rows or cols; a divisor of 0 (an invalid
// spec, which the ops' checks name) gives 0. quant_layout() evaluates this rule.
enum class LayoutSource : std::uint8_t { one, rows, cols };
struct LayoutTerm {
  LayoutSource source = LayoutSource::one;
  std::int64_t divisor = 0;
  std::int64_t of(std::int64_t rows, std::int64_t cols) const;
};
struct QuantLayoutRule {
  LayoutTerm code_cols, scale_rows, scale_cols;
};
QuantLayoutRule quant_layout_rule(const QuantSpec& spec);
const char* layout_source_name(LayoutSource source);  // "one" | "rows" | "cols"

// The quantized tensor: codes plus its parameters. `mins` is used by the asymmetric
// schemes only (leave it empty for the symmetric ones). scales and mins are contiguous f32 with
// layout.scale_count() elements.
struct QuantizedView {
  TensorView codes;
  TensorView scales;
  TensorView mins;
};

// What a GPU quantize() does when the input holds NaN or Inf (found by the pass that
// computes the scales). CPU calls always throw at once.
enum class NonFiniteCheck : std::uint8_t {
  sync_and_throw,  // synchronize `stream` and throw lowbit::Error naming the row/column
  deferred,        // no synchronization: call check_quantize_status() later
};

// Device scratch for GPU quantize(): reductions and the NaN/Inf status word.
std::size_t quantize_workspace_bytes(const QuantSpec& spec, std::int64_t rows, std::int64_t cols);

// Scales (and mins) from x's own values, then the codes. per_token and per_group
// read x once (the reduction happens on chip); per_channel and per_tensor read it
// twice, since every row must be seen before the first code can be written.
void quantize(const TensorView& x, const QuantSpec& spec, const QuantizedView& out,
              const Workspace& workspace, cuda_stream_t stream,
              NonFiniteCheck check = NonFiniteCheck::sync_and_throw);

// Only the scales (and mins) of x, written to out.scales / out.mins; out.codes unused.
void compute_scales(const TensorView& x, const QuantSpec& spec, const QuantizedView& out,
                    const Workspace& workspace, cuda_stream_t stream,
                    NonFiniteCheck check = NonFiniteCheck::sync_and_throw);

// Codes of x with scales (and mins) the caller already holds, e.g. calibrated once
// and reused across decode steps. One pass over x.
void quantize_with_scales(const TensorView& x, const QuantSpec& spec, const QuantizedView& out,
                          cuda_stream_t stream);

// out = codes decoded with their scales (and mins), as f32, f16 or bf16.
void dequantize(const QuantizedView& in, const QuantSpec& spec, const TensorView& out,
                cuda_stream_t stream);

// For NonFiniteCheck::deferred: synchronizes `stream`, throws if the last quantize()
// or compute_scales() that used this workspace saw NaN or Inf.
void check_quantize_status(const Workspace& workspace, cuda_stream_t stream);

// A NaN/Inf report that outlives the calls writing it, for callers that launch many
// quantizations and check once (the Python package's eager default). The overloads
// below report into it instead of their workspace, never synchronize and never clear
// it: it keeps the first report (row, column) since it was last checked, from calls on
// any stream of its device. non_finite_status_bytes() of device memory, zeroed by the
// caller before the first call. CPU calls ignore it and throw at once, as always.
struct NonFiniteStatus {
  void* data = nullptr;
};
std::size_t non_finite_status_bytes();

// The workspace of the overloads that take a NonFiniteStatus: the reductions only
// (0 for per_token and per_group, which then need no workspace at all).
std::size_t quantize_workspace_bytes_without_status(const QuantSpec& spec, std::int64_t rows, std::int64_t cols);

void quantize(const TensorView& x, const QuantSpec& spec, const QuantizedView& out, const Workspace& workspace,
              const NonFiniteStatus& status, cuda_stream_t stream);
void compute_scales(const TensorView& x, const QuantSpec& spec, const QuantizedView& out,
                    const Workspace& workspace, const NonFiniteStatus& status, cuda_stream_t stream);

// Synchronizes `stream`, then throws lowbit::Error naming the first NaN/Inf reported
// into `status` since its last check, after zeroing it (each report is raised once).
// Calls on other streams must be ordered before `stream`'s work by the caller.
void check_quantize_status(const NonFiniteStatus& status, cuda_stream_t stream);

}  // namespace lowbit

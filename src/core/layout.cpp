// The layouts of lowbit's public formats: how many codes, scales and mins a quantized
// tensor, a block-format tensor or a packed weight matrix holds, and the names of the
// enums. Every layer sizes its buffers from these.
#include "core/layout.h"

#include <cstring>

#include "core/checked.h"
#include "lowbit/block_formats.h"
#include "lowbit/error.h"
#include "lowbit/gemm.h"
#include "lowbit/quant.h"
#include "lowbit/weight_only.h"

namespace lowbit {

// ---- quantize / dequantize ----------------------------------------------------------

const char* scheme_name(QuantScheme scheme) {
  switch (scheme) {
    case QuantScheme::int8_symmetric: return "int8";
    case QuantScheme::int4_asymmetric: return "int4";
    case QuantScheme::int8_asymmetric: return "int8_asym";
    case QuantScheme::int4_symmetric: return "int4_sym";
  }
  return "unknown";
}

int scheme_bits(QuantScheme scheme) {
  return scheme == QuantScheme::int8_symmetric || scheme == QuantScheme::int8_asymmetric ? 8 : 4;
}

bool scheme_has_mins(QuantScheme scheme) {
  return scheme == QuantScheme::int4_asymmetric || scheme == QuantScheme::int8_asymmetric;
}

DType scheme_code_dtype(QuantScheme scheme) {
  return scheme == QuantScheme::int8_symmetric ? DType::i8 : DType::u8;
}

const char* granularity_name(Granularity granularity) {
  switch (granularity) {
    case Granularity::per_tensor: return "tensor";
    case Granularity::per_channel: return "channel";
    case Granularity::per_token: return "token";
    case Granularity::per_group: return "group";
  }
  return "unknown";
}

QuantScheme parse_scheme(const char* name) {
  for (QuantScheme s : kQuantSchemes) {
    if (std::strcmp(name, scheme_name(s)) == 0) return s;
  }
  LOWBIT_FAIL("scheme: expected int8, int4, int8_asym or int4_sym, got '", name, "'");
}

Granularity parse_granularity(const char* name) {
  for (Granularity g : {Granularity::per_tensor, Granularity::per_channel, Granularity::per_token,
                        Granularity::per_group}) {
    if (std::strcmp(name, granularity_name(g)) == 0) return g;
  }
  LOWBIT_FAIL("granularity: expected tensor, channel, token or group, got '", name, "'");
}

std::int64_t LayoutTerm::of(std::int64_t rows, std::int64_t cols) const {
  const std::int64_t n = source == LayoutSource::rows ? rows : source == LayoutSource::cols ? cols : 1;
  return divisor > 0 ? n / divisor + (n % divisor != 0) : 0;  // ceil(n / divisor), without overflow
}

const char* layout_source_name(LayoutSource source) {
  switch (source) {
    case LayoutSource::one: return "one";
    case LayoutSource::rows: return "rows";
    case LayoutSource::cols: return "cols";
  }
  return "unknown";
}

QuantLayoutRule quant_layout_rule(const QuantSpec& spec) {
  using S = LayoutSource;
  QuantLayoutRule rule;
  rule.code_cols = {S::cols, 8 / scheme_bits(spec.scheme)};  // codes a byte
  switch (spec.granularity) {
    case Granularity::per_tensor: rule.scale_rows = {S::one, 1}; rule.scale_cols = {S::one, 1}; break;
    case Granularity::per_channel: rule.scale_rows = {S::one, 1}; rule.scale_cols = {S::cols, 1}; break;
    case Granularity::per_token: rule.scale_rows = {S::rows, 1}; rule.scale_cols = {S::one, 1}; break;
    case Granularity::per_group:
      rule.scale_rows = {S::rows, 1};
      rule.scale_cols = {S::cols, spec.group_size > 0 ? spec.group_size : 0};
      break;
  }
  return rule;
}

QuantLayout quant_layout(const QuantSpec& spec, std::int64_t rows, std::int64_t cols) {
  LOWBIT_CHECK(rows >= 1 && cols >= 1, "quant_layout: expected a non-empty shape (rows, cols >= 1), got ", rows,
               " x ", cols);
  const QuantLayoutRule rule = quant_layout_rule(spec);
  const QuantLayout layout{rule.code_cols.of(rows, cols), rule.scale_rows.of(rows, cols),
                           rule.scale_cols.of(rows, cols)};
  // scale_count() multiplies these: it must fit too.
  core::checked_mul(layout.scale_rows, layout.scale_cols, "quant_layout: scale count (", rows, " x ", cols, ")");
  return layout;
}

// ---- block formats ------------------------------------------------------------------

const char* block_format_name(BlockFormat format) {
  switch (format) {
    case BlockFormat::nf4: return "nf4";
    case BlockFormat::mxfp4: return "mxfp4";
    case BlockFormat::nvfp4: return "nvfp4";
  }
  return "unknown";
}

BlockFormat parse_block_format(const char* name) {
  for (BlockFormat f : {BlockFormat::nf4, BlockFormat::mxfp4, BlockFormat::nvfp4}) {
    if (name && std::strcmp(name, block_format_name(f)) == 0) return f;
  }
  LOWBIT_FAIL("format: expected nf4, mxfp4 or nvfp4, got '", name ? name : "(null)", "'");
}

namespace core {

void check_block_format(BlockFormat format) {
  LOWBIT_CHECK(static_cast<int>(format) <= static_cast<int>(BlockFormat::nvfp4), "format: unknown value ",
               static_cast<int>(format));
}

}  // namespace core

std::int64_t block_size(BlockFormat format) {
  switch (format) {
    case BlockFormat::nf4: return 64;
    case BlockFormat::mxfp4: return 32;
    case BlockFormat::nvfp4: return 16;
  }
  LOWBIT_FAIL("format: unknown value ", static_cast<int>(format));
}

// Checked: a BlockLayout built by hand (not by block_layout) may not fit.
std::size_t BlockLayout::code_bytes() const {
  return static_cast<std::size_t>(core::checked_mul(rows, code_cols, "block layout: code bytes"));
}

std::size_t BlockLayout::total_bytes() const {
  const std::int64_t scales =
      core::checked_mul(scale_count, static_cast<std::int64_t>(scale_bytes), "block layout: scale bytes");
  const std::int64_t codes_and_scales =
      core::checked_add(static_cast<std::int64_t>(code_bytes()), scales, "block layout: total bytes");
  return static_cast<std::size_t>(core::checked_add(codes_and_scales, has_global_scale ? 4 : 0,
                                                    "block layout: total bytes"));
}

BlockLayout block_layout(BlockFormat format, std::int64_t rows, std::int64_t cols) {
  core::check_block_format(format);
  LOWBIT_CHECK(rows >= 1, "rows: expected >= 1, got ", rows);
  LOWBIT_CHECK(cols >= 1, "cols: expected >= 1, got ", cols);
  const std::int64_t block = block_size(format);
  LOWBIT_CHECK(cols % block == 0, "cols: ", cols, " is not a multiple of the ", block_format_name(format),
               " block size ", block);
  BlockLayout layout;
  layout.rows = rows;
  layout.block_size = block;
  layout.code_cols = cols / 2;
  layout.blocks_per_row = cols / block;
  layout.scale_count = core::checked_mul(rows, layout.blocks_per_row, "block_layout: scale count (", rows, " x ",
                                         cols, ")");
  layout.scale_dtype = format == BlockFormat::nf4 ? DType::f32 : DType::u8;
  layout.scale_bytes = format == BlockFormat::nf4 ? 4 : 1;
  layout.has_global_scale = format == BlockFormat::nvfp4;
  (void)layout.total_bytes();  // every size of the layout fits, or this throws
  return layout;
}

std::size_t block_memory_bytes(BlockFormat format, std::int64_t rows, std::int64_t cols) {
  return block_layout(format, rows, cols).total_bytes();
}

// ---- integer GEMM ---------------------------------------------------------------------

const char* b_layout_name(BLayout layout) { return layout == BLayout::k_by_n ? "k_by_n" : "n_by_k"; }


// ---- weight-only GEMM ---------------------------------------------------------------

namespace core {

formats::WeightPackLayout checked_weight_layout(const WeightOnlySpec& spec, std::int64_t n, std::int64_t k) {
  LOWBIT_CHECK(n >= 1 && k >= 1, "weight-only: expected a weight shape N x K with N, K >= 1, got ", n, " x ", k);
  // The kernels index rows and k with 32-bit integers; the padded sizes below must fit.
  LOWBIT_CHECK(n < (std::int64_t{1} << 31) && k < (std::int64_t{1} << 31), "weight-only: N x K = ", n, " x ", k,
               ", expected N, K < 2^31");
  formats::WeightPackLayout layout;
  if (spec.blocks != WeightBlocks::none) {
    const int b = static_cast<int>(spec.blocks);
    LOWBIT_CHECK(b >= 1 && b <= 7,
                 "spec.blocks: expected a GGML block form (Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, Q3_K, Q2_K), got ", b);
    const WeightOnlySpec want = weight_blocks_spec(spec.blocks);
    const char* name = weight_blocks_name(spec.blocks);
    LOWBIT_CHECK(spec.bits == want.bits, "spec.bits: ", name, " weights are ", want.bits, "-bit, got ", spec.bits);
    LOWBIT_CHECK(spec.group_size == want.group_size, "spec.group_size: ", name, " blocks are ", want.group_size,
                 " wide, got ", spec.group_size);
    LOWBIT_CHECK(spec.zero_point == want.zero_point, "spec.zero_point: ", name, want.zero_point ? " has" : " has no",
                 " min, got ", spec.zero_point ? "true" : "false");
    LOWBIT_CHECK(spec.act_dtype == DType::f16, "spec.act_dtype: ", name, " weights take f16 activations, got ",
                 dtype_name(spec.act_dtype));
    LOWBIT_CHECK(k % want.group_size == 0, "weight-only: K = ", k, " is not a whole number of ", name, " blocks (",
                 want.group_size, ")");
    layout = formats::make_block_pack_layout(static_cast<formats::WeightBlocks>(b), n, k);
  } else {
    LOWBIT_CHECK(spec.bits == 4 || spec.bits == 8, "spec.bits: expected 4 or 8, got ", spec.bits);
    LOWBIT_CHECK(spec.act_dtype == DType::f16 || spec.act_dtype == DType::bf16,
                 "spec.act_dtype: expected f16 or bf16, got ", dtype_name(spec.act_dtype));
    LOWBIT_CHECK(formats::weight_group_size_ok(spec.group_size, k), "spec.group_size: expected 32, 64, 128 or K (",
                 k, ") for one scale per output row, got ", spec.group_size);
    layout = formats::make_weight_pack_layout(spec.bits, spec.zero_point, spec.group_size, n, k);
  }
  core::checked_mul(core::checked_mul(layout.n_tiles, layout.k_steps, "weight-only: units of ", n, " x ", k),
                    layout.unit_bytes(), "weight-only: code bytes of ", n, " x ", k);
  core::checked_mul(core::checked_mul(layout.n_tiles, layout.groups, "weight-only: scale groups of ", n, " x ", k),
                    formats::kPackTileN, "weight-only: scale count of ", n, " x ", k);
  return layout;
}

}  // namespace core

static_assert(static_cast<int>(WeightBlocks::q6_k) == static_cast<int>(formats::WeightBlocks::q6_k) &&
                  static_cast<int>(WeightBlocks::q5_0) == static_cast<int>(formats::WeightBlocks::q5_0) &&
                  static_cast<int>(WeightBlocks::q5_1) == static_cast<int>(formats::WeightBlocks::q5_1) &&
                  static_cast<int>(WeightBlocks::q4_k) == static_cast<int>(formats::WeightBlocks::q4_k) &&
                  static_cast<int>(WeightBlocks::q5_k) == static_cast<int>(formats::WeightBlocks::q5_k) &&
                  static_cast<int>(WeightBlocks::q3_k) == static_cast<int>(formats::WeightBlocks::q3_k) &&
                  static_cast<int>(WeightBlocks::q2_k) == static_cast<int>(formats::WeightBlocks::q2_k),
              "one numbering of the block forms");

WeightOnlySpec weight_blocks_spec(WeightBlocks blocks) {
  switch (blocks) {
    case WeightBlocks::q5_0: return {5, 32, false, DType::f16, blocks};
    case WeightBlocks::q5_1: return {5, 32, true, DType::f16, blocks};
    case WeightBlocks::q4_k: return {4, 256, true, DType::f16, blocks};
    case WeightBlocks::q5_k: return {5, 256, true, DType::f16, blocks};
    case WeightBlocks::q6_k: return {6, 256, false, DType::f16, blocks};
    case WeightBlocks::q3_k: return {3, 256, false, DType::f16, blocks};
    case WeightBlocks::q2_k: return {2, 256, true, DType::f16, blocks};
    case WeightBlocks::none: break;
  }
  LOWBIT_FAIL("weight_blocks_spec: expected a GGML block form, got ", static_cast<int>(blocks));
}

const char* weight_blocks_name(WeightBlocks blocks) {
  switch (blocks) {
    case WeightBlocks::none: return "none";
    case WeightBlocks::q5_0: return "Q5_0";
    case WeightBlocks::q5_1: return "Q5_1";
    case WeightBlocks::q4_k: return "Q4_K";
    case WeightBlocks::q5_k: return "Q5_K";
    case WeightBlocks::q6_k: return "Q6_K";
    case WeightBlocks::q3_k: return "Q3_K";
    case WeightBlocks::q2_k: return "Q2_K";
  }
  return "?";
}

PackedWeightSizes packed_weight_sizes(const WeightOnlySpec& spec, std::int64_t n, std::int64_t k) {
  const formats::WeightPackLayout layout = core::checked_weight_layout(spec, n, k);
  PackedWeightSizes sizes;
  sizes.code_bytes = layout.code_bytes();
  sizes.scale_count = layout.scale_count();
  sizes.min_count = layout.zero_point && layout.blocks == formats::WeightBlocks::none ? layout.scale_count() : 0;
  return sizes;
}

}  // namespace lowbit

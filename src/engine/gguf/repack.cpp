#include "engine/gguf/repack.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "formats/float16.h"
#include "formats/weight_pack.h"
#include "engine/gguf/finite_values.h"
#include "engine/gguf/ggml_codes.h"
#include "engine/gguf/k_scales.h"
#include "lowbit/error.h"

namespace lowbit::engine {
namespace {

constexpr std::int64_t kBlock = 32;

float half_at(const std::uint8_t* p) {
  std::uint16_t bits;
  std::memcpy(&bits, p, 2);
  return formats::to_float(formats::Half{bits});
}

// Unpacks one row of ggml 4-bit blocks into lowbit's code order (2i low nibble,
// 2i + 1 high nibble) and the f32 scales (and mins) of its groups.
void unpack_q4_row(const std::uint8_t* row, std::int64_t blocks, bool with_min, std::uint8_t* codes, float* scales,
                   float* mins) {
  const std::int64_t block_bytes = with_min ? 20 : 18;
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::uint8_t* block = row + b * block_bytes;
    scales[b] = half_at(block);
    if (with_min) mins[b] = half_at(block + 2);
    const std::uint8_t* qs = block + (with_min ? 4 : 2);
    std::uint8_t q[kBlock];
    for (int j = 0; j < 16; ++j) {
      q[j] = qs[j] & 15;
      q[j + 16] = qs[j] >> 4;
    }
    for (int i = 0; i < 16; ++i) codes[b * 16 + i] = static_cast<std::uint8_t>(q[2 * i] | (q[2 * i + 1] << 4));
  }
}

// One row of Q4_K super-blocks as Q4_1 groups of 32 (KQuantPacking::groups): codes in
// lowbit's order, scale d sc and min -dmin mn of each sub-block in f32 (both exact).
void unpack_q4_k_row(const std::uint8_t* row, std::int64_t super_blocks, std::uint8_t* codes, float* scales,
                     float* mins) {
  constexpr std::int64_t kSuperBytes = 144;
  for (std::int64_t b = 0; b < super_blocks; ++b) {
    const std::uint8_t* block = row + b * kSuperBytes;
    const float d = half_at(block + kQ4kD), dmin = half_at(block + kQ4kDmin);
    std::uint8_t q[256];
    q4_k_codes(block, false, q);
    for (int sub = 0; sub < 8; ++sub) {
      const KScaleMin sm = unpack_k_scale_min(block + kQ4kScales, sub);
      scales[b * 8 + sub] = d * static_cast<float>(sm.scale);
      mins[b * 8 + sub] = -(dmin * static_cast<float>(sm.min));
    }
    for (int i = 0; i < 128; ++i) codes[b * 128 + i] = static_cast<std::uint8_t>(q[2 * i] | (q[2 * i + 1] << 4));
  }
}

// Whether f16 holds v as a normal number or zero (a grouped Q4_K factor keeps its
// relative precision).
bool f16_normal_or_zero(float v) {
  const float r = formats::to_float(formats::from_float<formats::Half>(v));
  return r == 0.0f || (std::isfinite(r) && std::fabs(r) >= 0x1p-14f);
}

void unpack_q8_row(const std::uint8_t* row, std::int64_t blocks, std::int8_t* codes, float* scales) {
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::uint8_t* block = row + b * 34;
    scales[b] = half_at(block);
    std::memcpy(codes + b * kBlock, block + 2, kBlock);
  }
}

// The rows of a part, once its bytes are checked to hold them (K whole blocks of `width`).
std::int64_t checked_rows(const GgufTensor& t, std::int64_t k, std::int64_t width, std::size_t row_bytes) {
  const auto rows = static_cast<std::int64_t>(t.dims[1]);
  LOWBIT_CHECK(k % width == 0 && row_bytes * static_cast<std::size_t>(rows) == t.byte_size, "tensor '", t.name, "': ",
               t.byte_size, " bytes do not hold ", rows, " rows of ", k, " ", ggml_type_name(t.type), " values");
  return rows;
}

// ---- GGML block forms ----------------------------------------------------------------

formats::WeightBlocks block_form_of(GgmlType type) {
  switch (type) {
    case GgmlType::q5_0: return formats::WeightBlocks::q5_0;
    case GgmlType::q5_1: return formats::WeightBlocks::q5_1;
    case GgmlType::q4_k: return formats::WeightBlocks::q4_k;
    case GgmlType::q5_k: return formats::WeightBlocks::q5_k;
    case GgmlType::q6_k: return formats::WeightBlocks::q6_k;
    case GgmlType::q3_k: return formats::WeightBlocks::q3_k;
    case GgmlType::q2_k: return formats::WeightBlocks::q2_k;
    default: return formats::WeightBlocks::none;
  }
}

std::uint16_t u16_at(const std::uint8_t* p) {
  std::uint16_t bits;
  std::memcpy(&bits, p, 2);
  return bits;
}

// The fields of one ggml block (Q5_0 / Q5_1: 32 values; K: 256) in the form's terms:
// the stored code of each value (2 to 6 bits, before any offset), the lane scale (and
// min) of each sub-block of 32 (or pair of 16), the row factor (d | dmin << 16, or d).
struct BlockFields {
  std::uint8_t q[256];
  std::uint16_t scale[8], min[8];
  std::uint32_t factor = 0;
  float finite_check[2];  // d, dmin or m (0 when absent): must be finite
};

void decode_block(formats::WeightBlocks form, const std::uint8_t* b, BlockFields& f) {
  f.finite_check[0] = f.finite_check[1] = 0.0f;
  switch (form) {
    case formats::WeightBlocks::q5_0:
    case formats::WeightBlocks::q5_1: {  // d (, m), qh[4], qs[16]; bit j of qh: value j's fifth bit
      const bool with_min = form == formats::WeightBlocks::q5_1;
      f.scale[0] = u16_at(b);
      f.min[0] = with_min ? u16_at(b + 2) : std::uint16_t{0};
      f.finite_check[0] = half_at(b);
      if (with_min) f.finite_check[1] = half_at(b + 2);
      std::uint8_t q[32];
      q5_codes(b + (with_min ? 4 : 2), b + (with_min ? 8 : 6), q);
      std::memcpy(f.q, q, 32);
      return;
    }
    case formats::WeightBlocks::q4_k:
    case formats::WeightBlocks::q5_k: {  // d, dmin, scales[12], (qh[32],) qs[128]: as dequant.cpp
      const bool five = form == formats::WeightBlocks::q5_k;
      f.factor = u16_at(b + kQ4kD) | (static_cast<std::uint32_t>(u16_at(b + kQ4kDmin)) << 16);
      f.finite_check[0] = half_at(b + kQ4kD);
      f.finite_check[1] = half_at(b + kQ4kDmin);
      q4_k_codes(b, five, f.q);
      for (int sub = 0; sub < 8; ++sub) {
        const KScaleMin sm = unpack_k_scale_min(b + kQ4kScales, sub);
        f.scale[sub] = static_cast<std::uint16_t>(sm.scale | (sm.min << 8));
      }
      return;
    }
    case formats::WeightBlocks::q6_k: {  // ql[128], qh[64], scales[16] (int8), d: as dequant.cpp
      f.factor = u16_at(b + kQ6kD);
      f.finite_check[0] = half_at(b + kQ6kD);
      q6_k_codes(b, f.q);
      for (int sub = 0; sub < 8; ++sub) {  // the 32-wide sub-block: its two 16-wide scales
        f.scale[sub] = static_cast<std::uint16_t>(b[kQ6kScales + 2 * sub] | (b[kQ6kScales + 2 * sub + 1] << 8));
      }
      return;
    }
    case formats::WeightBlocks::q3_k: {  // hmask[32], qs[64], scales[12] (6-bit), d: as dequant.cpp
      f.factor = u16_at(b + kQ3kD);
      f.finite_check[0] = half_at(b + kQ3kD);
      q3_k_codes(b, f.q);
      for (int sub = 0; sub < 8; ++sub) {  // the two 16-wide scales, as int8 (scale - 32)
        const auto lo = static_cast<std::uint8_t>(static_cast<std::int8_t>(q3_k_scale(b, 2 * sub)));
        const auto hi = static_cast<std::uint8_t>(static_cast<std::int8_t>(q3_k_scale(b, 2 * sub + 1)));
        f.scale[sub] = static_cast<std::uint16_t>(lo | (hi << 8));
      }
      return;
    }
    case formats::WeightBlocks::q2_k: {  // scales[16] (scale | min << 4), qs[64], d, dmin: as dequant.cpp
      f.factor = u16_at(b + kQ2kD) | (static_cast<std::uint32_t>(u16_at(b + kQ2kDmin)) << 16);
      f.finite_check[0] = half_at(b + kQ2kD);
      f.finite_check[1] = half_at(b + kQ2kDmin);
      q2_k_codes(b, f.q);
      for (int sub = 0; sub < 8; ++sub) {  // the two 16-wide sub-blocks' bytes
        const Q2kScaleMin lo = q2_k_scale_min(b, 2 * sub), hi = q2_k_scale_min(b, 2 * sub + 1);
        f.scale[sub] = static_cast<std::uint16_t>((lo.scale | (lo.min << 4)) | ((hi.scale | (hi.min << 4)) << 8));
      }
      return;
    }
    case formats::WeightBlocks::none: break;
  }
}

// A block of a row with a NaN or Inf d / dmin / m (block -1: none).
struct NonFiniteScale {
  std::int64_t block = -1;
  float value = 0.0f;
};

// Writes row `o` of the packed block form from one GGUF row of `blocks` ggml blocks; stops
// at the first block with a non-finite scale and returns it. Never throws: it runs inside
// a parallel region, which an exception may not leave.
NonFiniteScale pack_block_row(const formats::WeightPackLayout& layout, const std::uint8_t* row, std::int64_t blocks,
                              std::size_t block_bytes, std::int64_t o, std::uint8_t* packed) {
  const formats::WeightBlocks form = layout.blocks;
  const int width = formats::block_k(form);
  auto put16 = [&](std::int64_t byte, std::uint16_t v) {
    packed[byte] = static_cast<std::uint8_t>(v & 0xff);
    packed[byte + 1] = static_cast<std::uint8_t>(v >> 8);
  };
  BlockFields f;
  for (std::int64_t b = 0; b < blocks; ++b) {
    decode_block(form, row + static_cast<std::size_t>(b) * block_bytes, f);
    for (const float v : f.finite_check) {
      if (!std::isfinite(v)) return {b, v};
    }
    for (int j = 0; j < width; ++j) {
      const std::int64_t k = b * width + j;
      formats::block_code_put(layout, packed, o, k, f.q[j]);
      if (j % 32 != 0) continue;  // once per lane (sub-block of 32, or two of 16)
      put16(layout.lane_scale_byte(o, k), f.scale[j / 32]);
      if (form == formats::WeightBlocks::q5_1) put16(layout.lane_min_byte(o, k), f.min[j / 32]);
      if (formats::block_is_k(form)) {
        const std::int64_t at = layout.row_factor_byte(o, k);
        put16(at, static_cast<std::uint16_t>(f.factor & 0xffff));
        if (formats::block_super_bytes(form) == 4) put16(at + 2, static_cast<std::uint16_t>(f.factor >> 16));
      }
    }
  }
  return {};
}

// The packed row of stacked row o (the parts' rows one after another) in `order`.
struct RowMap {
  RowOrder order = RowOrder::stacked;
  std::int64_t part_rows = 0;  // swiglu_tiles: the rows of each of the two parts
  std::int64_t operator()(std::int64_t o) const {
    if (order == RowOrder::stacked) return o;
    const std::int64_t part = o / part_rows, r = o % part_rows;
    return r / 8 * 16 + part * 8 + r % 8;
  }
};

HostPackedWeights repack_block_form(std::span<const GgufTensor* const> parts, std::int64_t n, RowMap map) {
  const GgufTensor& first = *parts[0];
  const formats::WeightBlocks form = block_form_of(first.type);
  const auto k = static_cast<std::int64_t>(first.dims[0]);
  const std::size_t block_bytes = ggml_type_info(first.type).block_bytes;
  const std::int64_t width = formats::block_k(form);
  const std::int64_t blocks = k / width;
  const std::size_t row_bytes = static_cast<std::size_t>(blocks) * block_bytes;
  HostPackedWeights out;
  out.spec = weight_blocks_spec(static_cast<WeightBlocks>(form));
  out.n = n;
  out.k = k;
  const formats::WeightPackLayout layout = formats::make_block_pack_layout(form, n, k);
  out.codes.assign(static_cast<std::size_t>(packed_weight_sizes(out.spec, n, k).code_bytes), 0);  // padding: 0
  std::int64_t row0 = 0;
  for (const GgufTensor* t : parts) {
    const std::int64_t rows = checked_rows(*t, k, width, row_bytes);
    // Rows of one tile share units: a tile of 8 rows per iteration (never two threads in a
    // unit; swiglu_tiles moves whole tiles, the parts' rows being a multiple of 8).
    const std::int64_t tile_begin = row0 / formats::kPackTileN, tile_end = (row0 + rows + 7) / formats::kPackTileN;
    std::int64_t bad_row = rows;  // the first row with a non-finite scale, and its block
    NonFiniteScale bad;
#pragma omp parallel for schedule(static)
    for (std::int64_t tile = tile_begin; tile < tile_end; ++tile) {
      for (std::int64_t o = std::max(tile * 8, row0); o < std::min((tile + 1) * 8, row0 + rows); ++o) {
        const NonFiniteScale found = pack_block_row(layout, t->data + static_cast<std::size_t>(o - row0) * row_bytes,
                                                    blocks, block_bytes, map(o), out.codes.data());
        if (found.block >= 0) {
#pragma omp critical
          if (o - row0 < bad_row) bad_row = o - row0, bad = found;
        }
      }
    }
    LOWBIT_CHECK(bad_row == rows, "tensor '", t->name, "': a scale of block ", bad.block, " of row ", bad_row, " is ",
                 bad.value, "; the weights must be finite");
    row0 += rows;
  }
  return out;
}

}  // namespace

PackedWeights HostPackedWeights::view() {
  return PackedWeights{spec, n, k,
                       TensorView::vector(codes.data(), DType::u8, Device::cpu, static_cast<std::int64_t>(codes.size())),
                       scales.empty() ? TensorView{}
                                      : TensorView::vector(scales.data(), spec.act_dtype, Device::cpu,
                                                           static_cast<std::int64_t>(scales.size())),
                       mins.empty() ? TensorView{}
                                    : TensorView::vector(mins.data(), spec.act_dtype, Device::cpu,
                                                         static_cast<std::int64_t>(mins.size()))};
}

bool has_weight_only_form(GgmlType type) {
  return type == GgmlType::q4_1 || type == GgmlType::q4_0 || type == GgmlType::q8_0 ||
         block_form_of(type) != formats::WeightBlocks::none;
}

HostPackedWeights repack_ggml_weight(const GgufTensor& t, KQuantPacking k_quants) {
  const GgufTensor* parts[] = {&t};
  return repack_ggml_weights(parts, RowOrder::stacked, k_quants);
}

HostPackedWeights repack_ggml_weights(std::span<const GgufTensor* const> parts, RowOrder order,
                                      KQuantPacking k_quants) {
  LOWBIT_CHECK(!parts.empty(), "repack: no tensors");
  RowMap map{order, 0};
  if (order == RowOrder::swiglu_tiles) {
    LOWBIT_CHECK(parts.size() == 2 && parts[0]->n_dims == 2 && parts[1]->n_dims == 2 &&
                     parts[0]->dims[1] == parts[1]->dims[1] && parts[0]->dims[1] % 8 == 0,
                 "repack: gate and up in tiles of 8 rows need two 2-D tensors of equal rows, a multiple of 8 ('",
                 parts[0]->name, "')");
    map.part_rows = static_cast<std::int64_t>(parts[0]->dims[1]);
  }
  const GgufTensor& first = *parts[0];
  std::int64_t n = 0;
  for (const GgufTensor* t : parts) {
    LOWBIT_CHECK(has_weight_only_form(t->type), "tensor '", t->name, "': type ", ggml_type_name(t->type),
                 " has no weight-only form (expected Q4_1, Q4_0, Q8_0, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K or Q6_K)");
    LOWBIT_CHECK(t->n_dims == 2, "tensor '", t->name, "': expected a 2-D weight, got ", t->n_dims, " dimensions");
    LOWBIT_CHECK(t->type == first.type && t->dims[0] == first.dims[0], "tensor '", t->name, "' (",
                 ggml_type_name(t->type), ", K ", t->dims[0], ") cannot be stacked with '", first.name, "' (",
                 ggml_type_name(first.type), ", K ", first.dims[0], ")");
    n += static_cast<std::int64_t>(t->dims[1]);
  }
  const bool q4_k_groups = first.type == GgmlType::q4_k && k_quants == KQuantPacking::groups;
  if (block_form_of(first.type) != formats::WeightBlocks::none && !q4_k_groups) {
    return repack_block_form(parts, n, map);
  }
  const auto k = static_cast<std::int64_t>(first.dims[0]);
  // The reader checked byte_size against the type's block size; K % 32 (Q4_K: 256) follows.
  const std::int64_t blocks = k / kBlock;
  const GgmlTypeInfo& info = ggml_type_info(first.type);
  const std::int64_t width = static_cast<std::int64_t>(info.block_elements);
  const std::size_t row_bytes = static_cast<std::size_t>(k / width) * info.block_bytes;

  HostPackedWeights out;
  out.spec = WeightOnlySpec{first.type == GgmlType::q8_0 ? 8 : 4, kBlock,
                            first.type == GgmlType::q4_1 || q4_k_groups, DType::f16};
  out.n = n;
  out.k = k;
  const bool four_bit = out.spec.bits == 4;
  const std::int64_t code_cols = four_bit ? k / 2 : k;
  std::vector<std::uint8_t> codes(static_cast<std::size_t>(n * code_cols));
  std::vector<float> scales(static_cast<std::size_t>(n * blocks)), mins(out.spec.zero_point ? scales.size() : 0);
  std::int64_t row0 = 0;
  for (const GgufTensor* t : parts) {
    const std::int64_t rows = checked_rows(*t, k, width, row_bytes);
#pragma omp parallel for schedule(static)
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::uint8_t* row = t->data + static_cast<std::size_t>(r) * row_bytes;
      const std::int64_t o = map(row0 + r);
      std::uint8_t* row_codes = codes.data() + o * code_cols;
      float* row_scales = scales.data() + o * blocks;
      if (q4_k_groups) {
        unpack_q4_k_row(row, k / width, row_codes, row_scales, mins.data() + o * blocks);
      } else if (four_bit) {
        unpack_q4_row(row, blocks, out.spec.zero_point, row_codes, row_scales,
                      out.spec.zero_point ? mins.data() + o * blocks : nullptr);
      } else {
        unpack_q8_row(row, blocks, reinterpret_cast<std::int8_t*>(row_codes), row_scales);
      }
    }
    // Codes are integers: only a block's f16 scale or min can be NaN or Inf.
    for (const std::vector<float>* params : {&scales, &mins}) {
      if (params->empty()) continue;
      for (std::int64_t r = 0; r < rows; ++r) {
        const std::span<const float> row(params->data() + map(row0 + r) * blocks, static_cast<std::size_t>(blocks));
        const std::int64_t bad = first_non_finite(row);
        LOWBIT_CHECK(bad == blocks, "tensor '", t->name, "': the ", params == &scales ? "scale" : "min",
                     q4_k_groups ? " of sub-block " : " of block ",
                     bad, " of row ", r, " is ", row[static_cast<std::size_t>(bad)], "; the weights must be finite");
      }
    }
    row0 += rows;
  }
  if (q4_k_groups && !(std::all_of(scales.begin(), scales.end(), f16_normal_or_zero) &&
                       std::all_of(mins.begin(), mins.end(), f16_normal_or_zero))) {
    return repack_block_form(parts, n, map);
  }

  const PackedWeightSizes sizes = packed_weight_sizes(out.spec, n, k);
  out.codes.resize(static_cast<std::size_t>(sizes.code_bytes));
  out.scales.resize(static_cast<std::size_t>(sizes.scale_count));
  out.mins.resize(static_cast<std::size_t>(sizes.min_count));
  pack_weights(TensorView::matrix(codes.data(), four_bit ? DType::u8 : DType::i8, Device::cpu, n, code_cols),
               TensorView::matrix(scales.data(), DType::f32, Device::cpu, n, blocks),
               out.spec.zero_point ? TensorView::matrix(mins.data(), DType::f32, Device::cpu, n, blocks)
                                   : TensorView{},
               out.view());
  return out;
}

}  // namespace lowbit::engine

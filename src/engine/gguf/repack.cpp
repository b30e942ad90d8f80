#include "engine/gguf/repack.h"

#include <cstring>

#include "formats/float16.h"
#include "engine/gguf/finite_values.h"
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

void unpack_q8_row(const std::uint8_t* row, std::int64_t blocks, std::int8_t* codes, float* scales) {
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::uint8_t* block = row + b * 34;
    scales[b] = half_at(block);
    std::memcpy(codes + b * kBlock, block + 2, kBlock);
  }
}

}  // namespace

PackedWeights HostPackedWeights::view() {
  return PackedWeights{spec, n, k,
                       TensorView::vector(codes.data(), DType::u8, Device::cpu, static_cast<std::int64_t>(codes.size())),
                       TensorView::vector(scales.data(), spec.act_dtype, Device::cpu,
                                          static_cast<std::int64_t>(scales.size())),
                       mins.empty() ? TensorView{}
                                    : TensorView::vector(mins.data(), spec.act_dtype, Device::cpu,
                                                         static_cast<std::int64_t>(mins.size()))};
}

bool has_weight_only_form(GgmlType type) {
  return type == GgmlType::q4_1 || type == GgmlType::q4_0 || type == GgmlType::q8_0;
}

HostPackedWeights repack_ggml_weight(const GgufTensor& t) {
  const GgufTensor* parts[] = {&t};
  return repack_ggml_weights(parts);
}

HostPackedWeights repack_ggml_weights(std::span<const GgufTensor* const> parts) {
  LOWBIT_CHECK(!parts.empty(), "repack: no tensors");
  const GgufTensor& first = *parts[0];
  std::int64_t n = 0;
  for (const GgufTensor* t : parts) {
    LOWBIT_CHECK(has_weight_only_form(t->type), "tensor '", t->name, "': type ", ggml_type_name(t->type),
                 " has no weight-only form (expected Q4_1, Q4_0 or Q8_0)");
    LOWBIT_CHECK(t->n_dims == 2, "tensor '", t->name, "': expected a 2-D weight, got ", t->n_dims, " dimensions");
    LOWBIT_CHECK(t->type == first.type && t->dims[0] == first.dims[0], "tensor '", t->name, "' (",
                 ggml_type_name(t->type), ", K ", t->dims[0], ") cannot be stacked with '", first.name, "' (",
                 ggml_type_name(first.type), ", K ", first.dims[0], ")");
    n += static_cast<std::int64_t>(t->dims[1]);
  }
  const auto k = static_cast<std::int64_t>(first.dims[0]);
  // The reader checked byte_size against the type's block size; K % 32 follows.
  const std::int64_t blocks = k / kBlock;
  const std::size_t row_bytes = static_cast<std::size_t>(blocks) * ggml_type_info(first.type).block_bytes;

  HostPackedWeights out;
  out.spec = WeightOnlySpec{first.type == GgmlType::q8_0 ? 8 : 4, kBlock, first.type == GgmlType::q4_1, DType::f16};
  out.n = n;
  out.k = k;
  const bool four_bit = out.spec.bits == 4;
  const std::int64_t code_cols = four_bit ? k / 2 : k;
  std::vector<std::uint8_t> codes(static_cast<std::size_t>(n * code_cols));
  std::vector<float> scales(static_cast<std::size_t>(n * blocks)), mins(out.spec.zero_point ? scales.size() : 0);
  std::int64_t row0 = 0;
  for (const GgufTensor* t : parts) {
    const auto rows = static_cast<std::int64_t>(t->dims[1]);
    LOWBIT_CHECK(k % kBlock == 0 && row_bytes * static_cast<std::size_t>(rows) == t->byte_size, "tensor '", t->name,
                 "': ", t->byte_size, " bytes do not hold ", rows, " rows of ", k, " ", ggml_type_name(t->type),
                 " values");
#pragma omp parallel for schedule(static)
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::uint8_t* row = t->data + static_cast<std::size_t>(r) * row_bytes;
      const std::int64_t o = row0 + r;
      std::uint8_t* row_codes = codes.data() + o * code_cols;
      float* row_scales = scales.data() + o * blocks;
      if (four_bit) {
        unpack_q4_row(row, blocks, out.spec.zero_point, row_codes, row_scales,
                      out.spec.zero_point ? mins.data() + o * blocks : nullptr);
      } else {
        unpack_q8_row(row, blocks, reinterpret_cast<std::int8_t*>(row_codes), row_scales);
      }
    }
    // Codes are integers: only a block's f16 scale or min can be NaN or Inf.
    for (const std::vector<float>* params : {&scales, &mins}) {
      if (params->empty()) continue;
      const std::span<const float> part(params->data() + row0 * blocks, static_cast<std::size_t>(rows * blocks));
      const std::int64_t bad = first_non_finite(part);
      LOWBIT_CHECK(bad == static_cast<std::int64_t>(part.size()), "tensor '", t->name, "': the ",
                   params == &scales ? "scale" : "min", " of block ", bad % blocks, " of row ", bad / blocks, " is ",
                   part[static_cast<std::size_t>(bad)], "; the weights must be finite");
    }
    row0 += rows;
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

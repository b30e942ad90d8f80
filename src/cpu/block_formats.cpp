#include "cpu/block_formats.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/dtype_dispatch.h"
#include "cpu/parallel.h"
#include "formats/float16.h"
#include "formats/hd.h"
#include "formats/mxfp4.h"
#include "formats/nf4.h"
#include "formats/nvfp4.h"
#include "lowbit/error.h"

namespace lowbit::cpu {
namespace {

using formats::abs_bits;
using formats::to_float;

template <class Fn>
decltype(auto) visit_block_codec(BlockFormat format, Fn&& fn) {
  switch (format) {
    case BlockFormat::nf4: return fn(formats::Nf4Codec{});
    case BlockFormat::mxfp4: return fn(formats::Mxfp4Codec{});
    case BlockFormat::nvfp4: return fn(formats::Nvfp4Codec{});
  }
  LOWBIT_FAIL("format: unknown value ", static_cast<int>(format));
}

// Serial encode time per value (ns, measured single-threaded on 512 x 512): NF4 0.8, MXFP4 4, NVFP4 11.
template <class Codec>
constexpr double kEncodeNs = std::is_same_v<Codec, formats::Nf4Codec>     ? 1.0
                             : std::is_same_v<Codec, formats::Mxfp4Codec> ? 4.0
                                                                          : 11.0;

// max |x| over the whole tensor, as bits (>= kInfBits when NaN/Inf is present).
template <class In>
std::uint32_t tensor_abs_bits(const TensorView& x) {
  const In* data = x.ptr<In>();
  const std::int64_t rows = x.rows(), cols = x.cols(), stride = x.row_stride();
  std::uint32_t result = 0;
#pragma omp parallel for schedule(static) reduction(max : result) if (parallel_worth(rows, 0.5 * cols))
  for (std::int64_t r = 0; r < rows; ++r) {
    const In* row = data + r * stride;
    std::uint32_t m = 0;
    for (std::int64_t c = 0; c < cols; ++c) m = std::max(m, abs_bits(to_float(row[c])));
    result = std::max(result, m);
  }
  return result;
}

template <class In>
[[noreturn]] void throw_first_non_finite(const TensorView& x) {
  const In* data = x.ptr<In>();
  for (std::int64_t r = 0; r < x.rows(); ++r) {
    for (std::int64_t c = 0; c < x.cols(); ++c) {
      const float v = to_float(data[r * x.row_stride() + c]);
      if (!formats::is_finite_bits(abs_bits(v))) {
        LOWBIT_FAIL("x: contains ", v, " at row ", r, ", column ", c, "; block_encode needs finite values");
      }
    }
  }
  LOWBIT_FAIL("x: contains NaN or Inf; block_encode needs finite values");
}

template <class In, class Codec>
void encode_typed(const TensorView& x, const BlockQuantizedView& out) {
  using Scale = typename Codec::Scale;
  constexpr std::int64_t kBlock = Codec::kBlock;
  const std::uint32_t tensor_bits = tensor_abs_bits<In>(x);
  if (!formats::is_finite_bits(tensor_bits)) throw_first_non_finite<In>(x);

  float global = 0.0f;
  if constexpr (Codec::kHasGlobal) {
    global = formats::nvfp4_global_scale(formats::bits_to_float(tensor_bits));
    *out.global_scale.ptr<float>() = global;
  }
  const In* data = x.ptr<In>();
  auto* codes = out.codes.ptr<std::uint8_t>();
  auto* scales = out.scales.ptr<Scale>();
  const std::int64_t rows = x.rows(), cols = x.cols(), blocks = cols / kBlock;
  const std::int64_t x_stride = x.row_stride(), code_stride = out.codes.row_stride();
#pragma omp parallel for schedule(static) if (parallel_worth(rows, kEncodeNs<Codec> * cols))
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t b = 0; b < blocks; ++b) {
      const In* v = data + r * x_stride + b * kBlock;
      std::uint32_t block_bits = 0;
      for (std::int64_t i = 0; i < kBlock; ++i) block_bits = std::max(block_bits, abs_bits(to_float(v[i])));
      const Scale s = Codec::scale(block_bits, global);
      scales[r * blocks + b] = s;
      const float param = Codec::param(s, global);
      std::uint8_t* dst = codes + r * code_stride + b * (kBlock / 2);
      for (std::int64_t j = 0; j < kBlock / 2; ++j) {
        const unsigned lo = Codec::encode(to_float(v[2 * j]), param);
        const unsigned hi = Codec::encode(to_float(v[2 * j + 1]), param);
        dst[j] = static_cast<std::uint8_t>(lo | (hi << 4));
      }
    }
  }
}

template <class Out, class Codec>
void decode_typed(const BlockQuantizedView& in, const TensorView& out) {
  using Scale = typename Codec::Scale;
  constexpr std::int64_t kBlock = Codec::kBlock;
  const float global = Codec::kHasGlobal ? *in.global_scale.ptr<const float>() : 0.0f;
  const auto* codes = in.codes.ptr<const std::uint8_t>();
  const auto* scales = in.scales.ptr<const Scale>();
  Out* dst = out.ptr<Out>();
  const std::int64_t rows = out.rows(), cols = out.cols(), blocks = cols / kBlock;
  const std::int64_t out_stride = out.row_stride(), code_stride = in.codes.row_stride();
  // NF4 1.2 ns a value, NVFP4 3.3.
#pragma omp parallel for schedule(static) if (parallel_worth(rows, 2.5 * cols))
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t b = 0; b < blocks; ++b) {
      const Scale s = scales[r * blocks + b];
      const std::uint8_t* src = codes + r * code_stride + b * (kBlock / 2);
      Out* o = dst + r * out_stride + b * kBlock;
      for (std::int64_t j = 0; j < kBlock / 2; ++j) {
        o[2 * j] = formats::from_float<Out>(Codec::decode(src[j] & 15u, s, global));
        o[2 * j + 1] = formats::from_float<Out>(Codec::decode(src[j] >> 4, s, global));
      }
    }
  }
}

}  // namespace

void block_encode(const TensorView& x, BlockFormat format, const BlockQuantizedView& out) {
  visit_float_dtype(x.dtype, "x", [&](auto in) {
    visit_block_codec(format, [&](auto codec) { encode_typed<decltype(in), decltype(codec)>(x, out); });
  });
}

void block_decode(const BlockQuantizedView& in, BlockFormat format, const TensorView& out) {
  visit_float_dtype(out.dtype, "out", [&](auto o) {
    visit_block_codec(format, [&](auto codec) { decode_typed<decltype(o), decltype(codec)>(in, out); });
  });
}

}  // namespace lowbit::cpu

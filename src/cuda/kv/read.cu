// kv_read: the cache's visible values back as f16, in position order. One block per
// (visible position, KV head, part), one thread per channel; quantized tokens decoded
// with the formats' formulas (int8_decode, int4_decode), as the CPU twin does.
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/kv/kv_cuda.h"
#include "formats/float16.h"
#include "formats/int4.h"
#include "formats/int8.h"
#include "lowbit/cuda_check.h"

namespace lowbit::cuda::kv {
namespace {

template <int Bits>
__global__ void kv_read_kernel(KvLayerShape s, KvLayerBuffers layer, DecodeSpan span, __half* k_out, __half* v_out) {
  const long long j = blockIdx.x;
  const int head = static_cast<int>(blockIdx.y);
  const bool is_v = blockIdx.z == 1;
  const KvPart part = is_v ? layer.v : layer.k;  // by value: a reference picked at run time forces local memory
  __half* out = (is_v ? v_out : k_out) + (j * s.kv_heads + head) * s.head_dim;
  const long long skip = s.drops() ? span.recent_begin - span.sink_end : 0;  // the window policy's dropped middle
  const long long pos = j < span.sink_end ? j : j + skip;
  const bool body = Bits != 0 && pos >= span.sink_end && pos < span.recent_begin;
  const long long param = (pos - s.body_base) * s.kv_heads + head;
  for (int c = static_cast<int>(threadIdx.x); c < s.head_dim; c += static_cast<int>(blockDim.x)) {
    float value;
    if (!body) {
      value = __half2float(__ushort_as_half(part.f16[(head * s.f16_slots() + s.slot(pos)) * s.head_dim + c]));
    } else if (Bits == 8) {
      const float scale = formats::half_to_float({part.scales[param]});
      value = formats::int8_decode(static_cast<std::int8_t>(part.codes[param * s.head_dim + c]), scale);
    } else {
      const float scale = formats::half_to_float({part.scales[param]});
      const float min = formats::half_to_float({part.mins[param]});
      const std::uint8_t byte = part.codes[param * (s.head_dim / 2) + c / 2];
      value = formats::int4_decode(c % 2 == 0 ? formats::int4_low(byte) : formats::int4_high(byte), scale, min);
    }
    out[c] = __float2half_rn(value);
  }
}

}  // namespace

void kv_read(const KvLayerShape& shape, const KvLayerBuffers& layer, const DecodeSpan& span, void* k_out, void* v_out,
             cuda_stream_t stream) {
  LOWBIT_CHECK(shape.key_block == 0, "kv_read: key blocks (--kv-key-block) are not read back here");
  const dim3 grid(static_cast<unsigned>(span.visible(shape)), static_cast<unsigned>(shape.kv_heads), 2);
  auto* k = static_cast<__half*>(k_out);
  auto* v = static_cast<__half*>(v_out);
  switch (shape.body) {
    case KvBody::none: kv_read_kernel<0><<<grid, 64, 0, stream>>>(shape, layer, span, k, v); break;
    case KvBody::int8: kv_read_kernel<8><<<grid, 64, 0, stream>>>(shape, layer, span, k, v); break;
    case KvBody::int4: kv_read_kernel<4><<<grid, 64, 0, stream>>>(shape, layer, span, k, v); break;
  }
  LOWBIT_CUDA_CHECK_LAUNCH();
}

}  // namespace lowbit::cuda::kv

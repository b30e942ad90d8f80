// The decode KV cache of one attention layer, as an op family: the cache's buffers
// (caller-owned), appending a token, attention of the newest query over what the
// cache holds, and reading the held values back.
//
// Policies:
//   full       every token in FP16
//   window     `sink` first tokens + the most recent `window` tokens in FP16; older dropped
//   selective  sink + window in FP16; a token leaving the window is quantized from its
//              FP16 value and kept: INT8 symmetric or INT4 asymmetric (kv_bits)
//   int8/int4  every token quantized on arrival
// "The most recent `window` tokens" include the one just appended.
//
// Quantized tokens use lowbit's INT8 symmetric / INT4 asymmetric code schemes with f16
// parameters: per token and KV head one scale (and one min for INT4), computed in f32,
// rounded to f16, the codes encoded with the rounded values. The GPU kernels and the
// CPU twin store the same bytes.
//
// Buffers of one part (K or V; kv_cache_sizes() gives their element counts, H = kv_heads,
// D = head_dim):
//   f16    f16 [H, sink + window, D]: slots [0, sink) hold positions 0..sink-1, slot
//          sink + pos % window the window's ring (full: [H, max_tokens, D], slot = pos)
//   codes  [body, H, D] i8 (INT8) or [body, H, D/2] u8 (INT4, low nibble first), by the
//          position's body slot (selective: pos - sink; int8/int4: pos)
//   scales f16 [body, H], mins f16 [body, H] (INT4 only)
// A buffer the policy does not have is an empty view.
//
// CPU views run the CPU twin; CUDA views the kernels on `stream` (no synchronization,
// no allocation). Arguments are validated; a bad one throws lowbit::Error naming it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "lowbit/tensor.h"

namespace lowbit {

enum class KvPolicy : std::uint8_t { full, window, selective, int8, int4 };

const char* kv_policy_name(KvPolicy policy);
KvPolicy parse_kv_policy(const char* name);  // "full" | "window" | "selective" | "int8" | "int4"

// A policy with its bits in one name, as the benchmarks list them: full, window,
// selective8, selective4, int8, int4 (bits 8 where the policy quantizes nothing).
struct KvPolicyBits {
  KvPolicy policy = KvPolicy::full;
  int bits = 8;
};
KvPolicyBits parse_kv_policy_bits(const char* name);  // throws naming the six names

struct KvCacheSpec {
  KvPolicy policy = KvPolicy::full;
  std::int64_t kv_heads = 0;
  std::int64_t head_dim = 0;    // 64 or 128
  std::int64_t sink = 0;        // window, selective
  std::int64_t window = 0;      // window, selective (>= 1)
  int kv_bits = 8;              // selective: 8 or 4
  std::int64_t max_tokens = 0;  // positions the buffers hold (window: the ring's only)
};

// Element counts of one part's buffers (K and V alike), in the dtypes above.
struct KvCacheSizes {
  std::int64_t f16 = 0, codes = 0, scales = 0, mins = 0;
  DType code_dtype = DType::u8;
};
KvCacheSizes kv_cache_sizes(const KvCacheSpec& spec);  // checks the spec
// Bytes of K and V together.
std::size_t kv_cache_bytes(const KvCacheSpec& spec);
// Positions the cache can be appended at: max_tokens, or -1 (any) for the window policy.
std::int64_t kv_cache_capacity(const KvCacheSpec& spec);

struct KvPartViews {
  TensorView f16, codes, scales, mins;
};
struct KvLayerViews {
  KvPartViews k, v;
};

// One layer's cache: a spec and its buffers (all on one device), checked once when made;
// the ops below then check only their own arguments.
class KvLayer {
 public:
  // Throws lowbit::Error naming the field or buffer at fault (missing, misshapen, on
  // another device, overlapping another).
  KvLayer(const KvCacheSpec& spec, const KvLayerViews& buffers);
  const KvCacheSpec& spec() const { return spec_; }
  const KvLayerViews& buffers() const { return buffers_; }
  Device device() const { return device_; }

 private:
  KvCacheSpec spec_;
  KvLayerViews buffers_;
  Device device_ = Device::cpu;
};

// Appends the token at `pos` (the cache's current length): k and v are f16
// [kv_heads, head_dim] (RoPE applied) on the layer's device. Writes its FP16 slot;
// selective first quantizes the token leaving the window (pos - window) from its FP16
// value; int8 / int4 quantize the new token.
void kv_append(const KvLayer& layer, std::int64_t pos, const TensorView& k, const TensorView& v, cuda_stream_t stream);

// out (f32 or f16 [n_heads, head_dim]) = softmax(q K^T / sqrt(head_dim)) V over what the
// query at position length - 1 sees (query head h reads KV head h / (n_heads / kv_heads));
// q f16 [n_heads, head_dim]. The workspace (CUDA) holds kv_attention_workspace_bytes.
void kv_attention(const KvLayer& layer, std::int64_t length, const TensorView& q, const TensorView& out,
                  const Workspace& workspace, cuda_stream_t stream);
// On the current device (the split plan depends on its multiprocessors); 0 in a CPU-only build.
std::size_t kv_attention_workspace_bytes(const KvCacheSpec& spec, std::int64_t n_heads, std::int64_t length);

// The CUDA-graph forms: the position is an int32 [1] array on the layer's device, read
// when the work runs, so that one captured graph serves every decode step.
// kv_append_at appends at *pos; kv_attention_at attends as the query at *pos, with the
// split plan of max_length positions; the caller keeps *pos < max_length <= the
// capacity (the GPU cannot check it; the CPU twin does). kv_attention_at's workspace
// (kv_attention_at_workspace_bytes) must be zeroed before its first use; every call
// leaves it ready for the next.
void kv_append_at(const KvLayer& layer, const TensorView& pos, const TensorView& k, const TensorView& v,
                  cuda_stream_t stream);
void kv_attention_at(const KvLayer& layer, const TensorView& pos, std::int64_t max_length, const TensorView& q,
                     const TensorView& out, const Workspace& workspace, cuda_stream_t stream);
std::size_t kv_attention_at_workspace_bytes(const KvCacheSpec& spec, std::int64_t n_heads, std::int64_t max_length);

// The values the query at position length - 1 reads, in position order (the window
// policy skips the dropped middle): k_out and v_out f16 [visible, kv_heads, head_dim],
// with visible = kv_visible_count(spec, length). FP16 tokens are copied, quantized ones
// dequantized (q * scale, or q * scale + min for INT4, rounded once to f16).
std::int64_t kv_visible_count(const KvCacheSpec& spec, std::int64_t length);
void kv_read(const KvLayer& layer, std::int64_t length, const TensorView& k_out, const TensorView& v_out,
             cuda_stream_t stream);

}  // namespace lowbit

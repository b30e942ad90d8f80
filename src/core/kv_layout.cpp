// The layout functions of the decode KV cache (include/lowbit/kv_cache.h): policy
// names, the checked layer shape of a spec, buffer sizes.
#include "core/kv_layout.h"

#include <cstring>
#include <string_view>

namespace lowbit {

const char* kv_policy_name(KvPolicy policy) {
  switch (policy) {
    case KvPolicy::full: return "full";
    case KvPolicy::window: return "window";
    case KvPolicy::selective: return "selective";
    case KvPolicy::int8: return "int8";
    case KvPolicy::int4: return "int4";
  }
  return "unknown";
}

KvPolicy parse_kv_policy(const char* name) {
  for (KvPolicy p : {KvPolicy::full, KvPolicy::window, KvPolicy::selective, KvPolicy::int8, KvPolicy::int4}) {
    if (name && std::strcmp(name, kv_policy_name(p)) == 0) return p;
  }
  LOWBIT_FAIL("kv cache policy: expected full, window, selective, int8 or int4, got '", name ? name : "(null)", "'");
}

KvPolicyBits parse_kv_policy_bits(const char* name) {
  const std::string_view n = name ? name : "";
  if (n == "selective8") return {KvPolicy::selective, 8};
  if (n == "selective4") return {KvPolicy::selective, 4};
  if (n == "full" || n == "window" || n == "int8" || n == "int4") {
    const KvPolicy policy = parse_kv_policy(name);
    return {policy, policy == KvPolicy::int4 ? 4 : 8};
  }
  LOWBIT_FAIL("kv cache policy: expected full, window, selective8, selective4, int8 or int4, got '", n, "'");
}

namespace core {

KvLayerShape kv_layer_shape(const KvCacheSpec& spec) {
  LOWBIT_CHECK(static_cast<int>(spec.policy) <= static_cast<int>(KvPolicy::int4), "kv cache: unknown policy ",
               static_cast<int>(spec.policy));
  LOWBIT_CHECK(spec.kv_heads >= 1 && spec.kv_heads <= 1024, "kv cache: kv_heads = ", spec.kv_heads,
               ", expected 1..1024");
  LOWBIT_CHECK(spec.max_tokens >= 1 && spec.max_tokens <= (std::int64_t{1} << 30), "kv cache: max_tokens = ",
               spec.max_tokens, ", expected 1..2^30");
  LOWBIT_CHECK(spec.head_dim == 64 || spec.head_dim == 128, "kv cache: head_dim = ", spec.head_dim,
               ", expected 64 or 128");
  KvLayerShape s;
  s.kv_heads = spec.kv_heads;
  s.head_dim = spec.head_dim;
  switch (spec.policy) {
    case KvPolicy::full: s.sink = spec.max_tokens; break;
    case KvPolicy::window:
    case KvPolicy::selective:
      LOWBIT_CHECK(spec.sink >= 0 && spec.window >= 1 && spec.sink + spec.window <= (std::int64_t{1} << 30),
                   "kv cache: sink ", spec.sink, " (>= 0), window ", spec.window, " (>= 1)");
      s.sink = spec.sink;
      s.window = spec.window;
      if (spec.policy == KvPolicy::selective) {
        LOWBIT_CHECK(spec.kv_bits == 8 || spec.kv_bits == 4, "kv cache: kv_bits = ", spec.kv_bits,
                     ", expected 8 or 4");
        s.body = spec.kv_bits == 8 ? KvBody::int8 : KvBody::int4;
        s.body_base = spec.sink;
        s.body_slots = std::max<std::int64_t>(0, spec.max_tokens - spec.sink - spec.window);
      }
      break;
    case KvPolicy::int8:
    case KvPolicy::int4:
      s.body = spec.policy == KvPolicy::int8 ? KvBody::int8 : KvBody::int4;
      s.body_slots = spec.max_tokens;
      break;
  }
  return s;
}

KvLayerShape with_key_block(KvLayerShape s, std::int64_t key_block) {
  LOWBIT_CHECK(key_block == 0 || (key_block >= 2 && key_block <= 1024 && key_block % 2 == 0),
               "kv cache: kv_key_block = ", key_block, ", expected 0 (off) or an even 2..1024 on the GPU");
  // Policies without a body (full, window) keep every key FP16: nothing to block.
  s.key_block = s.body == KvBody::none ? 0 : key_block;
  return s;
}

}  // namespace core

KvCacheSizes kv_cache_sizes(const KvCacheSpec& spec) {
  const core::KvLayerShape s = core::kv_layer_shape(spec);
  KvCacheSizes sizes;
  sizes.f16 = s.kv_heads * s.f16_slots() * s.head_dim;
  if (s.body != core::KvBody::none) {
    sizes.codes = s.body_slots * s.kv_heads * s.code_bytes();
    sizes.scales = s.body_slots * s.kv_heads;
    sizes.mins = s.has_mins() ? sizes.scales : 0;
  }
  sizes.code_dtype = s.body == core::KvBody::int8 ? DType::i8 : DType::u8;
  return sizes;
}

std::size_t kv_cache_bytes(const KvCacheSpec& spec) {
  const KvCacheSizes z = kv_cache_sizes(spec);
  return 2 * static_cast<std::size_t>(2 * z.f16 + z.codes + 2 * z.scales + 2 * z.mins);
}

std::int64_t kv_cache_capacity(const KvCacheSpec& spec) {
  const core::KvLayerShape s = core::kv_layer_shape(spec);
  return s.drops() ? -1 : core::kv_positions_held(s);
}

std::int64_t kv_visible_count(const KvCacheSpec& spec, std::int64_t length) {
  const core::KvLayerShape s = core::kv_layer_shape(spec);
  return core::decode_span(s, length).visible(s);
}

}  // namespace lowbit

#include "engine/gpu_kv_storage.h"

#include "cuda/kv/kv_cuda.h"

#include "lowbit/cuda_check.h"
#include "lowbit/error.h"

namespace lowbit::engine {

namespace {

constexpr std::size_t kAlign = 256;

std::size_t aligned(std::size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

KvCacheSpec spec_of(const ModelConfig& c, const KvCacheOptions& cache, std::int64_t capacity) {
  return KvCacheSpec{cache.policy, c.n_kv_heads, c.head_dim, cache.sink, cache.window, cache.kv_bits, capacity};
}

// Lays every layer's K and V parts out from `base` (null: only counts); returns the bytes.
std::size_t carve(const core::KvLayerShape& s, std::int64_t n_layers, std::uint8_t* base,
                  std::vector<core::KvLayerBuffers>* layers) {
  std::size_t offset = 0;
  auto take = [&](std::size_t bytes) -> std::uint8_t* {
    if (bytes == 0) return nullptr;
    std::uint8_t* p = base ? base + offset : nullptr;
    offset += aligned(bytes);
    return p;
  };
  for (std::int64_t l = 0; l < n_layers; ++l) {
    core::KvLayerBuffers layer;
    for (core::KvPart* part : {&layer.k, &layer.v}) {
      const bool is_k = part == &layer.k;  // key blocks: K's parameters per block and channel, its staging ring
      const std::size_t params = (is_k ? s.key_param_count() : s.param_count()) * core::KvLayerShape::kParamBytes;
      part->f16 = reinterpret_cast<std::uint16_t*>(take(s.f16_bytes()));
      part->codes = take(s.code_bytes_total());
      part->scales = reinterpret_cast<std::uint16_t*>(take(params));
      part->mins = s.has_mins() ? reinterpret_cast<std::uint16_t*>(take(params)) : nullptr;
      part->staged = is_k ? reinterpret_cast<std::uint16_t*>(take(s.staged_bytes())) : nullptr;
    }
    if (layers) layers->push_back(layer);
  }
  return offset;
}

}  // namespace

bool check_gpu_kv_options(const ModelConfig& c, const KvCacheOptions& cache, const char* who, bool paged) {
  LOWBIT_CHECK(cache.kv_group == 0 || cache.kv_group == c.head_dim, who, ": --kv-group ", cache.kv_group,
               " is not supported on the GPU (one scale per token per head: 0 or head_dim ", c.head_dim, ")");
  // The GPU cache reads rotated keys as they are (the query is rotated with them, after
  // RoPE); values rotated (kv) would need the output rotated back, and symmetric INT4 has
  // no GPU layout yet.
  LOWBIT_CHECK(cache.kv_rotate != KvRotate::kv, who, ": --kv-rotate kv is not supported on the GPU (k or off)");
  LOWBIT_CHECK(!cache.kv_symmetric, who, ": --kv-symmetric on is not supported on the GPU");
  // The paged cache's key blocks: pages of a block (a multiple of 16 tokens), read by the
  // batched decode's mma_swap kernel (GQA groups of up to kMmaSwapMaxGroup).
  LOWBIT_CHECK(!paged || cache.kv_key_block == 0 ||
                   (cache.kv_key_block % 16 == 0 && c.n_heads / c.n_kv_heads <= cuda::kv::kMmaSwapMaxGroup),
               who, ": --kv-key-block ", cache.kv_key_block, " on the paged GPU cache (batched serving) needs a "
               "multiple of 16 and GQA groups of up to ", cuda::kv::kMmaSwapMaxGroup, " query heads (the model has ",
               c.n_heads / c.n_kv_heads, ")");
  const bool hadamard =
      cache.kv_rotate == KvRotate::k && cache.policy != KvPolicy::full && cache.policy != KvPolicy::window;
  LOWBIT_CHECK(!hadamard || c.head_dim == 64 || c.head_dim == 128, who,
               ": --kv-rotate k needs head_dim 64 or 128, got ", c.head_dim);
  return hadamard;
}

GpuKvStorage::GpuKvStorage(const ModelConfig& c, const KvCacheOptions& cache, std::int64_t capacity)
    : shape_(core::with_key_block(core::kv_layer_shape(spec_of(c, cache, capacity)), cache.kv_key_block)),
      capacity_(capacity) {
  const std::size_t bytes = carve(shape_, c.n_layers, nullptr, nullptr);
  buffer_ = core::DeviceBuffer(bytes);
  layers_.reserve(static_cast<std::size_t>(c.n_layers));
  carve(shape_, c.n_layers, buffer_.as<std::uint8_t>(), &layers_);
}

}  // namespace lowbit::engine

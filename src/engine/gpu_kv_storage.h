// One sequence's decode KV cache on the GPU, every layer, in the contiguous layout of
// core/kv_layout.h for `capacity` positions: what GpuSession holds for its max_tokens
// (GpuBatchEngine holds its sequences in the paged pool, core/kv_pages.h).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/device_buffer.h"
#include "core/kv_layout.h"
#include "engine/kv_cache.h"
#include "engine/model.h"

namespace lowbit::engine {

// Throws lowbit::Error for a cache option the GPU layout lacks (kv_group other than one
// scale per token per head, --kv-rotate kv, --kv-symmetric on, --kv-key-block on the
// paged cache (`paged`: the batch engine's)) or a head_dim other
// than 64 / 128 with --kv-rotate k; `who` names the caller. Returns whether keys (and
// queries) are rotated after RoPE (--kv-rotate k on a quantizing policy).
bool check_gpu_kv_options(const ModelConfig& c, const KvCacheOptions& cache, const char* who, bool paged);

class GpuKvStorage {
 public:
  GpuKvStorage(const ModelConfig& c, const KvCacheOptions& cache, std::int64_t capacity);

  const core::KvLayerShape& shape() const { return shape_; }
  const std::vector<core::KvLayerBuffers>& layers() const { return layers_; }
  std::int64_t capacity() const { return capacity_; }
  std::size_t bytes() const { return buffer_.bytes(); }

 private:
  core::KvLayerShape shape_;
  std::int64_t capacity_ = 0;
  std::vector<core::KvLayerBuffers> layers_;
  core::DeviceBuffer buffer_;  // every layer's parts, 256-byte aligned each
};

}  // namespace lowbit::engine

// Validation at the boundary, then dispatch by device to cpu/ or cuda/.
#include "lowbit/flash_attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>

#include "core/checked.h"
#include "core/validate.h"
#include "cpu/flash_attention.h"
#include "lowbit/error.h"
#if LOWBIT_WITH_CUDA
#include <cuda_runtime.h>

#include "cuda/flash/flash_cuda.h"
#include "lowbit/cuda_check.h"
#endif

namespace lowbit {
namespace {

void check_params(const FlashAttentionParams& p) {
  LOWBIT_CHECK(p.head_dim == 64 || p.head_dim == 128, "head_dim: expected 64 or 128, got ", p.head_dim);
  LOWBIT_CHECK(p.heads >= 1 && p.heads <= 65535, "heads: expected 1..65535, got ", p.heads);
  LOWBIT_CHECK(p.kv_heads >= 1 && p.kv_heads <= p.heads, "kv_heads: expected 1..heads (", p.heads, "), got ",
               p.kv_heads);
  LOWBIT_CHECK(p.heads % p.kv_heads == 0, "kv_heads: heads ", p.heads, " is not a multiple of kv_heads ", p.kv_heads,
               " (grouped-query attention shares each KV head among heads / kv_heads query heads)");
  LOWBIT_CHECK(p.scale >= 0.0f && std::isfinite(p.scale), "scale: expected a finite value > 0 (or 0 for 1 / sqrt(",
               p.head_dim, ")), got ", p.scale);
}

// The prefix sums: batch + 1 of them from 0, each sequence with >= 1 query and key (and
// no more queries than keys when causal); returns the longest sequence's queries.
std::int64_t check_sequences(std::span<const std::int32_t> cu_q, std::span<const std::int32_t> cu_k, bool causal) {
  LOWBIT_CHECK(cu_q.size() >= 2 && cu_q.size() <= 65536, "cu_q: expected 2..65536 prefix sums (a batch of 1..65535 "
               "sequences), got ", cu_q.size());
  LOWBIT_CHECK(cu_k.size() == cu_q.size(), "cu_k: ", cu_k.size(), " prefix sums, but cu_q has ", cu_q.size());
  LOWBIT_CHECK(cu_q[0] == 0 && cu_k[0] == 0, "cu_q, cu_k: the prefix sums start at 0, got ", cu_q[0], " and ",
               cu_k[0]);
  std::int64_t longest = 0;
  for (std::size_t b = 0; b + 1 < cu_q.size(); ++b) {
    const std::int64_t q_len = std::int64_t{cu_q[b + 1]} - cu_q[b], k_len = std::int64_t{cu_k[b + 1]} - cu_k[b];
    LOWBIT_CHECK(q_len >= 1, "cu_q: sequence ", b, " has ", q_len, " queries (each sequence needs at least one)");
    LOWBIT_CHECK(k_len >= 1, "cu_k: sequence ", b, " has ", k_len, " keys (each sequence needs at least one)");
    LOWBIT_CHECK(!causal || k_len >= q_len, "cu_q, cu_k: sequence ", b, " has ", q_len, " queries and only ", k_len,
                 " keys; causal attention takes the queries as the last of the keys' positions");
    longest = std::max(longest, q_len);
  }
  return longest;
}

void check_rows(const TensorView& t, const char* what, DType dtype, std::int64_t rows, std::int64_t cols) {
  LOWBIT_CHECK(t.data != nullptr, what, ": data pointer is null");
  LOWBIT_CHECK(t.dtype == DType::f16 || t.dtype == DType::bf16, what, ": expected f16 or bf16, got ",
               dtype_name(t.dtype));
  core::check_dtype(t, what, dtype);
  core::check_matrix(t, what, rows, cols);
}

}  // namespace

std::size_t flash_attention_workspace_bytes(std::int64_t batch) {
  LOWBIT_CHECK(batch >= 1 && batch <= 65535, "batch: expected 1..65535 sequences, got ", batch);
#if LOWBIT_WITH_CUDA
  return static_cast<std::size_t>(2 * (batch + 1)) * sizeof(std::int32_t);
#else
  return 0;
#endif
}

void flash_attention(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                     std::span<const std::int32_t> cu_q, std::span<const std::int32_t> cu_k,
                     const FlashAttentionParams& p, const Workspace& workspace, cuda_stream_t stream) {
  check_params(p);
  const std::int64_t longest = check_sequences(cu_q, cu_k, p.causal);
  const std::int64_t q_cols = core::checked_mul(p.heads, p.head_dim, "heads x head_dim");
  const std::int64_t kv_cols = core::checked_mul(p.kv_heads, p.head_dim, "kv_heads x head_dim");
  check_rows(q, "q", q.dtype, cu_q.back(), q_cols);
  check_rows(k, "k", q.dtype, cu_k.back(), kv_cols);
  check_rows(v, "v", q.dtype, cu_k.back(), kv_cols);
  check_rows(out, "out", q.dtype, cu_q.back(), q_cols);
  core::check_same_device(q.device, k, "k");
  core::check_same_device(q.device, v, "v");
  core::check_same_device(q.device, out, "out");
  const TensorView ws = q.device == Device::cuda ? core::byte_view(workspace.data, workspace.bytes) : TensorView{};
  core::check_no_aliasing({{out, "out"}, {ws, "workspace"}}, {{q, "q"}, {k, "k"}, {v, "v"}});
  if (q.device == Device::cpu) return cpu::flash_attention(q, k, v, out, cu_q, cu_k, p);
#if LOWBIT_WITH_CUDA
  for (const auto& [t, name] : {std::pair{&q, "q"}, std::pair{&k, "k"}, std::pair{&v, "v"}, std::pair{&out, "out"}}) {
    LOWBIT_CHECK(reinterpret_cast<std::uintptr_t>(t->data) % 16 == 0 && t->row_stride() % 8 == 0, name,
                 ": the GPU kernel reads and writes 16-byte aligned rows (pointer ", t->data, ", row stride ",
                 t->row_stride(), " elements)");
    core::check_device_data(*t, name);
  }
  const std::int64_t batch = static_cast<std::int64_t>(cu_q.size()) - 1;
  LOWBIT_CHECK(longest <= 65535 * 128, "cu_q: a sequence of ", longest, " queries; the GPU kernel takes up to ",
               65535 * 128, " a sequence (65535 tiles of 128)");
  const std::size_t need = flash_attention_workspace_bytes(batch);
  core::check_workspace(workspace, need, "flash_attention_workspace_bytes");
  LOWBIT_CHECK(reinterpret_cast<std::uintptr_t>(workspace.data) % 4 == 0,
               "workspace: expected a 4-byte aligned pointer, got ", workspace.data);
  // The prefix sums to the device (from pageable memory: the call returns once they are read).
  auto* device = static_cast<std::int32_t*>(workspace.data);
  LOWBIT_CUDA_CHECK(cudaMemcpyAsync(device, cu_q.data(), cu_q.size_bytes(), cudaMemcpyHostToDevice, stream));
  LOWBIT_CUDA_CHECK(
      cudaMemcpyAsync(device + cu_q.size(), cu_k.data(), cu_k.size_bytes(), cudaMemcpyHostToDevice, stream));
  cuda::flash::flash_attention(q, k, v, out, device, device + cu_q.size(), batch, longest, p, stream);
#else
  (void)workspace, (void)stream, (void)longest;
  core::fail_no_cuda("flash_attention");
#endif
}

}  // namespace lowbit

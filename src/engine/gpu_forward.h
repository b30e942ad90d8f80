// The pieces of the GPU forward pass that GpuSession (one sequence) and GpuBatchEngine
// (many sequences' rows in one pass) share: the activation buffers, the layers over n
// rows with the attention as a callback, the output head, and the two forms of one
// sequence's attention in a layer (a decode row at a position in device memory, as the
// CUDA graphs replay it; a chunk of rows at pos0..). The arithmetic is GpuSession's
// (gpu_session.h describes it); all work goes to `stream`.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>

#include "core/device_buffer.h"
#include "core/kv_layout.h"
#include "core/kv_pages.h"
#include "engine/gpu_model.h"
#include "engine/step_profile.h"

namespace lowbit::engine {

// Activations of up to `rows` rows: x the f32 residual stream [rows x d], h the normed
// GEMM input, qkv [rows x (q_dim + 2 kv_dim)], att [rows x q_dim], proj [rows x d],
// gu [rows x 2 ffn], act [rows x ffn] (f16).
struct GpuActivations {
  GpuActivations(const ModelConfig& c, std::int64_t rows);
  std::int64_t rows = 0;
  core::DeviceBuffer x, h, qkv, att, proj, gu, act;
};

// RoPE angles on the device for positions 0..positions-1: rope_table's values.
struct GpuRope {
  GpuRope(const ModelConfig& c, std::int64_t positions);
  core::DeviceBuffer cos, sin;
};

// The attention's scratch for caches up to max_length positions: decode (kv_attention_at's
// workspace, zeroed once: its fused combine's counters, which every call leaves zero),
// a chunk's rows (kv_attention_rows' partials, as many rows a launch as 64 MiB hold, up
// to max_rows) and the ring's snapshot before a chunk (window, selective).
struct GpuAttentionScratch {
  GpuAttentionScratch(const core::KvLayerShape& shape, std::int64_t n_heads, std::int64_t max_length,
                      std::int64_t max_rows);
  core::DeviceBuffer decode, rows, snapshot;
};

// out = x W^T (+ bias) on the weight-only kernels.
void gpu_gemm(const TensorView& x, const PackedWeights& w, const TensorView& out, cudaStream_t stream,
              const TensorView& bias = TensorView{});

// Called as each part's work is about to be queued (a profiler's boundary: the part
// runs until the next call); empty: nothing is called.
using PartMark = std::function<void(StepPart part)>;

// Every layer over the n rows whose embeddings are in a.x. attend(layer) runs that
// layer's attention: it reads a.qkv's rows and writes a.att's. mark: as each of a
// layer's parts (norm, qkv, attention, o_proj, norm, gate_up, swiglu, down) begins.
void run_gpu_layers(const GpuModel& model, GpuActivations& a, std::int64_t n,
                    const std::function<void(std::int64_t layer)>& attend, cudaStream_t stream,
                    const PartMark& mark = {});

// The last layer's residual add, the final norm and the output head over `rows` rows:
// x (f32, updated in place) and proj (f16) hold them at row stride d_model; h is
// scratch of rows x d_model f16; logits get f16 [rows x vocab].
void gpu_output_logits(const GpuModel& model, float* x, const std::uint16_t* proj, std::int64_t rows,
                       std::uint16_t* h, void* logits, cudaStream_t stream);

// One sequence's cache in one layer, and how its keys are rotated.
struct SequenceLayer {
  const core::KvLayerShape& shape;
  const core::KvLayerBuffers& layer;
  const GpuRope& rope;
  bool hadamard = false;  // --kv-rotate k on a quantizing policy
};

// One decode row (qkv f16 [q | k | v] at `qkv_row`) at position *device_pos: RoPE on the
// append, the append, the attention over max_length's split plan into att_row (f16).
// The workspace is kv_attention_at's (zeroed once); ring_backup: kv_append_at's (or null).
// history_complete: kv_append_at's guarantee (kv_cuda.h).
void attend_decode_row(const ModelConfig& c, const SequenceLayer& s, std::uint16_t* qkv_row,
                       const std::int32_t* device_pos, std::int64_t max_length, std::uint16_t* att_row,
                       void* workspace, std::size_t workspace_bytes, void* ring_backup, bool history_complete,
                       cudaStream_t stream);

// n rows at positions pos0.. (qkv rows at `qkv`, row stride q_dim + 2 kv_dim): RoPE, the
// appends and each row's attention at its position into att (row stride q_dim).
// snapshot: ring_snapshot_bytes of the shape; workspace: kv_attention_rows' partials.
void attend_chunk(const ModelConfig& c, const SequenceLayer& s, std::uint16_t* qkv, std::int64_t n, std::int64_t pos0,
                  std::uint16_t* att, void* snapshot, void* workspace, std::size_t workspace_bytes,
                  cudaStream_t stream);

// One sequence's layer in the paged pool (core/kv_pages.h): its slot, the page tables
// on the device (KvPageAllocator::tables(), uploaded), and the kernels' fault word.
struct PagedSequenceLayer {
  const core::KvPageLayout& layout;
  const core::KvPagedLayer& layer;
  std::int32_t slot = -1;
  const std::int32_t* tables = nullptr;
  std::int32_t* status = nullptr;
  const GpuRope& rope;
  bool hadamard = false;
};

// attend_chunk on the sequence's pages (the paged rows form: the same arithmetic, but
// for the full policy on Hopper, where attend_chunk runs flash's wgmma kernel and this
// the mma rows kernel: equal up to their rounding).
void attend_chunk_paged(const ModelConfig& c, const PagedSequenceLayer& s, std::uint16_t* qkv, std::int64_t n,
                        std::int64_t pos0, std::uint16_t* att, void* snapshot, void* workspace,
                        std::size_t workspace_bytes, cudaStream_t stream);

// The decode rows of many sequences in one layer: rows 0..batch-1 of qkv (row stride
// q_dim + 2 kv_dim), row b the new token of the sequence descs[b] names (device memory:
// its position and slot). One paged append (RoPE on it) and one paged attention over a
// split plan of max_length positions, into att (row stride q_dim). The workspace is
// paged_kv_attention_workspace's with its counters zero (every call leaves them so for
// the next of the same batch size). history_complete: as kv_append_at's.
void attend_decode_rows(const ModelConfig& c, const core::KvPageLayout& layout, const core::KvPagedLayer& layer,
                        const core::KvSeqDesc* descs, const std::int32_t* tables, std::int32_t* status,
                        std::int64_t batch, std::int64_t max_length, const GpuRope& rope, bool hadamard,
                        std::uint16_t* qkv, std::uint16_t* att, void* workspace, std::size_t workspace_bytes,
                        bool history_complete, cudaStream_t stream);

}  // namespace lowbit::engine

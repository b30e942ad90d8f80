// The paged decode KV cache of continuous batching: one device pool of fixed pages of
// P tokens shared by every sequence and every layer, a page table per sequence, and the
// host-side allocator that hands pages out. Plain arithmetic (LOWBIT_HD: the kernels
// address the pool with it) and host code, no CUDA headers; the CPU tests check both.
//
// What lives where, per layer (H = kv_heads, D = head_dim, P = page_tokens; the
// per-layer shape is kv_layout.h's KvLayerShape of the policy):
//   full        every position in FP16 pages: K [H][P][D] f16, then V [H][P][D].
//   int8, int4  every position in body pages: K codes [P][H][cb], V codes [P][H][cb],
//   selective   K scales [P][H] f16, V scales, (INT4) K mins [P][H], V mins. Selective's
//               body holds the positions that left the window, [sink, length - window).
//   window,     the FP16 sink and window ring in the sequence's FIXED AREA: K f16
//   selective   [H][sink + window][D], then V, exactly the contiguous cache's f16 buffer
//               (slot = pos < sink ? pos : sink + pos % window). window has no pages.
// The fixed area is one per sequence slot (max_seqs of them, budgeted with the pages):
// a sequence needs all sink + window slots once it is sink + window tokens long, and a
// second page size in the pool would fragment it (docs/DESIGN.md).
//
// A position's page: table[logical page], logical page = pos / P for FP16 pages, and
// pos / P - body_base / P for body pages (positions keep their offset pos % P in the
// page, so a 16-aligned tile of body positions is 16 consecutive rows of one page: P is
// a multiple of 16). Selective's first body page thus leaves its first body_base % P
// rows unused (less than one page a sequence).
//
// Pool memory (one allocation of pool_bytes()): layer l's pages at l * pages * page_bytes,
// then the fixed areas: layer l's at layers * pages * page_bytes + l * max_seqs *
// fixed_bytes, sequence slot s's at + s * fixed_bytes.
//
// A batched decode step (cuda/kv/paged_kv_cuda.h) reads per batch row b a descriptor
// KvSeqDesc{pos, slot} from device memory: the new token's position (the length before
// the step) and the sequence's slot (its fixed area and its row of the page tables,
// tables[slot * table_stride ...]); pos < 0 marks an idle row (padding of a batch-size
// bucket: nothing appended, nothing written).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/kv_layout.h"
#include "formats/hd.h"
#include "lowbit/kv_cache.h"

namespace lowbit::core {

struct KvSeqDesc {
  std::int32_t pos = -1;   // the new token's position (-1: idle row)
  std::int32_t slot = -1;  // the sequence's slot: fixed area and page-table row
};

struct KvPageLayout {
  KvLayerShape shape;             // per layer (body_slots: a sequence's body positions at most)
  std::int64_t layers = 0;
  std::int64_t page_tokens = 16;  // P, a multiple of 16
  std::int64_t pages = 0;         // in the pool (each spans every layer)
  std::int64_t max_seqs = 0;      // sequence slots
  std::int64_t max_tokens = 0;    // positions a sequence holds at most
  std::int64_t table_stride = 0;  // page-table entries a sequence (pages_for(max_tokens))

  LOWBIT_HD bool paged_f16() const { return shape.window == 0 && shape.body == KvBody::none; }  // full
  LOWBIT_HD bool paged_body() const { return shape.body != KvBody::none; }
  LOWBIT_HD bool has_pages() const { return paged_f16() || paged_body(); }  // not window
  // FP16 slots of a sequence's fixed area (window, selective: sink + window).
  LOWBIT_HD std::int64_t fixed_slots() const { return shape.window > 0 ? shape.sink + shape.window : 0; }

  // Bytes of one page of one layer, and of its parts (K and V alike, but for K's
  // parameters with key blocks).
  LOWBIT_HD std::int64_t f16_part_bytes() const { return shape.kv_heads * page_tokens * shape.head_dim * 2; }
  LOWBIT_HD std::int64_t code_part_bytes() const { return page_tokens * shape.kv_heads * shape.code_bytes(); }
  // Scales (or mins) of one part: per position and head, [P][H] f16; K's with key blocks
  // per channel of the block whose first position is in the page, [H][D] f16 (pages of
  // key_block tokens hold one block's first position each; see key_block_page).
  LOWBIT_HD std::int64_t param_part_bytes(bool v = true) const {
    return shape.key_blocks() && !v ? shape.kv_heads * shape.head_dim * 2 : page_tokens * shape.kv_heads * 2;
  }
  LOWBIT_HD std::int64_t page_bytes() const {
    if (paged_f16()) return 2 * f16_part_bytes();
    if (!paged_body()) return 0;
    return 2 * code_part_bytes() + (param_part_bytes(false) + param_part_bytes(true)) * (shape.has_mins() ? 2 : 1);
  }
  // Offsets in a body page: codes K, V; scales K, V; mins K, V.
  LOWBIT_HD std::int64_t codes_offset(bool v) const { return v ? code_part_bytes() : 0; }
  LOWBIT_HD std::int64_t scales_offset(bool v) const {
    return 2 * code_part_bytes() + (v ? param_part_bytes(false) : 0);
  }
  LOWBIT_HD std::int64_t mins_offset(bool v) const {
    return 2 * code_part_bytes() + param_part_bytes(false) + param_part_bytes(true) + (v ? param_part_bytes(false) : 0);
  }
  // Key blocks: the position whose page holds block j's parameters (the block's first).
  LOWBIT_HD std::int64_t key_block_page(std::int64_t j) const { return shape.body_base + j * shape.key_block; }
  // Bytes of one sequence's fixed area of one layer: the FP16 sink and window (K, then
  // V), then with key blocks K's staging ring (the open block's FP16 keys, [H][B][D]).
  LOWBIT_HD std::int64_t fixed_f16_bytes() const { return 2 * shape.kv_heads * fixed_slots() * shape.head_dim * 2; }
  LOWBIT_HD std::int64_t fixed_bytes() const {
    return fixed_f16_bytes() + (shape.key_blocks() ? shape.kv_heads * shape.key_block * shape.head_dim * 2 : 0);
  }

  // The page-table index of position pos (FP16 pages: pos / P; body: see above).
  LOWBIT_HD std::int64_t logical_page(std::int64_t pos) const {
    return paged_f16() ? pos / page_tokens : pos / page_tokens - shape.body_base / page_tokens;
  }
  // Pages a sequence of `length` positions holds (the positions it has written: full,
  // int8, int4 every one; selective those that left the window).
  LOWBIT_HD std::int64_t pages_for(std::int64_t length) const {
    if (paged_f16() || (paged_body() && shape.window == 0)) return (length + page_tokens - 1) / page_tokens;
    if (!paged_body() || length - shape.window <= shape.body_base) return 0;
    return logical_page(length - shape.window - 1) + 1;
  }

  std::size_t pages_bytes() const { return static_cast<std::size_t>(layers * pages * page_bytes()); }
  std::size_t fixed_bytes_total() const { return static_cast<std::size_t>(layers * max_seqs * fixed_bytes()); }
  std::size_t pool_bytes() const { return pages_bytes() + fixed_bytes_total(); }
  // Tokens the pool holds over all sequences: the pages' and (window, selective) the
  // fixed areas' (a sequence's sink + window).
  std::int64_t pool_tokens() const { return pages * page_tokens + max_seqs * fixed_slots(); }
};

// The layout of `budget_bytes` for a policy (spec: policy, heads, head_dim, sink,
// window, bits; spec.max_tokens: the positions one sequence may reach), `layers`
// layers, up to `max_seqs` sequences at once: the fixed areas first, the rest in pages.
// Throws lowbit::Error naming what does not fit (a budget below the fixed areas and
// one page, a page size that is not a positive multiple of 16, too many pages for int32
// ids).
// key_block B > 0 (a body policy): K in key blocks (core/kv_layout.h), which needs pages of
// B tokens (page_tokens = B, a multiple of 16).
KvPageLayout kv_page_layout(const KvCacheSpec& spec, std::int64_t layers, std::size_t budget_bytes,
                            std::int64_t max_seqs, std::int64_t page_tokens = 16, std::int64_t key_block = 0);

// Host pointers of one layer in a pool at `pool` (device or host memory).
struct KvPagedLayer {
  std::uint8_t* pages = nullptr;   // [pages][page_bytes]
  std::uint16_t* fixed = nullptr;  // [max_seqs][fixed_bytes / 2] (null without a fixed area)
};
KvPagedLayer kv_paged_layer(const KvPageLayout& layout, void* pool, std::int64_t layer);
// Sequence slot `slot`'s fixed area in a layer as the contiguous cache's FP16 buffers
// (k.f16, v.f16; with key blocks k.staged; the rest null; all null without a fixed
// area): the rows forms and the kernels read and write it with the contiguous arithmetic.
KvLayerBuffers kv_fixed_area(const KvPageLayout& layout, const KvPagedLayer& layer, std::int64_t slot);

// Checks a batch's descriptors and the page tables they use as the kernels would read
// them (host copies): every active row's slot in range, pos + 1 <= max_length <=
// max_tokens, each page its positions need present in the slot's table and a pool page,
// and no slot twice in the batch. Throws lowbit::Error naming the row and what is wrong.
void check_paged_batch(const KvPageLayout& layout, const KvSeqDesc* descs, std::int64_t batch,
                       const std::int32_t* tables, std::int64_t max_length);

// Pages for sequences, on the host: a sequence opens a slot, grows its pages as its
// length grows (before the append of position length - 1) and closes (finished or
// preempted), which returns its pages. tables() is the page tables to upload, [max_seqs]
// [table_stride] int32, -1 where no page is held. Every failure throws lowbit::Error
// and leaves the allocator as it was.
class KvPageAllocator {
 public:
  // shuffle_seed != 0 hands pages out in a shuffled order (tests: pages scattered in
  // the pool); 0 in ascending order.
  explicit KvPageAllocator(const KvPageLayout& layout, std::uint64_t shuffle_seed = 0);

  const KvPageLayout& layout() const { return layout_; }
  std::int32_t open();                               // a free slot, length 0
  void grow(std::int32_t slot, std::int64_t length);  // pages for positions [0, length)
  void close(std::int32_t slot);                     // frees the slot and its pages

  std::int64_t free_pages() const { return static_cast<std::int64_t>(free_.size()); }
  std::int64_t used_pages() const { return layout_.pages - free_pages(); }
  std::int64_t open_sequences() const { return open_count_; }
  bool is_open(std::int32_t slot) const;
  std::int64_t length(std::int32_t slot) const;      // as grown
  std::int64_t pages_held(std::int32_t slot) const;
  // Pages grow(slot, length) would take now (0 when it holds them already).
  std::int64_t pages_needed(std::int32_t slot, std::int64_t length) const;
  const std::vector<std::int32_t>& tables() const { return tables_; }
  const std::int32_t* table(std::int32_t slot) const;

 private:
  void check_slot(std::int32_t slot, const char* what) const;
  KvPageLayout layout_;
  std::vector<std::int32_t> free_;   // a stack: back() is handed out next
  std::vector<std::int32_t> tables_;
  std::vector<std::int64_t> lengths_;  // -1: slot closed
  std::vector<std::int32_t> free_slots_;
  std::int64_t open_count_ = 0;
};

}  // namespace lowbit::core

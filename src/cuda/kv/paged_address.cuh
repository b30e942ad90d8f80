// The paged address map of the decode cache's kernels (layout: core/kv_pages.h): where a
// batch row's FP16 rows and body rows are, read through its page table. The kernels are
// compiled with a `Paged` template argument: contiguous (kv_layout.h) or this map, one
// kernel body. A row's fixed area (window, selective) is the contiguous f16 buffer, so
// the kernels point KvLayerBuffers' f16 at it and keep their own arithmetic for it.
// What the device reads that the host could not check (slot, position, page ids) is
// checked here: a bad one sets a PagedFault bit in *status and reads page 0 instead (in
// the pool; the row's output is then meaningless, and flagged).
#pragma once

#include <cstdint>

#include "cuda/kv/paged_kv_cuda.h"

namespace lowbit::cuda::kv {

struct PagedArgs {
  KvPageLayout layout;
  KvPagedLayer layer;
  const KvSeqDesc* descs = nullptr;
  const std::int32_t* tables = nullptr;
  std::int32_t* status = nullptr;
  long long max_length = 0;
};

__device__ __forceinline__ void paged_fault(const PagedArgs& p, std::int32_t bit) {
  if (p.status) atomicOr(p.status, bit);
}

// The batch row's descriptor, checked: its table and fixed area, or false (idle row, or
// a bad one: flagged) when the row has nothing to do.
struct PagedRow {
  int pos;
  const std::int32_t* table;
  std::uint16_t* fixed;  // K's fixed area; V's follows at fixed_part_halves()
};
__device__ __forceinline__ bool paged_row(const PagedArgs& p, int b, PagedRow& row) {
  const KvSeqDesc d = p.descs[b];
  if (d.pos < 0) return false;
  if (d.slot < 0 || d.slot >= p.layout.max_seqs) {
    paged_fault(p, kPagedBadSlot);
    return false;
  }
  if (static_cast<long long>(d.pos) + 1 > p.max_length) {
    paged_fault(p, kPagedBadPosition);
    return false;
  }
  row.pos = d.pos;
  row.table = p.tables + static_cast<long long>(d.slot) * p.layout.table_stride;
  row.fixed = p.layer.fixed ? p.layer.fixed + static_cast<long long>(d.slot) * (p.layout.fixed_bytes() / 2) : nullptr;
  return true;
}

// Halves of one part (K) of a fixed area: V's starts there.
__device__ __forceinline__ long long fixed_part_halves(const KvPageLayout& l) {
  return l.shape.kv_heads * l.fixed_slots() * l.shape.head_dim;
}

// Points a batch row's layer buffers at its fixed area (core::kv_fixed_area's arithmetic):
// K's FP16 slots, V's after them, then K's staging ring (key blocks; unread otherwise).
__device__ __forceinline__ void enter_fixed_area(const KvPageLayout& l, std::uint16_t* fixed, KvLayerBuffers& layer) {
  layer.k.f16 = fixed;
  layer.v.f16 = fixed + fixed_part_halves(l);
  layer.k.staged = fixed + l.fixed_f16_bytes() / 2;
}

// Position pos's page-table index (KvPageLayout::logical_page) and its row in the page,
// in 32-bit arithmetic: positions are below 2^31 (kv_page_layout checks max_tokens), and
// a division by the runtime page size takes ~20 instructions in 32 bits against ~70 in 64
// (with two of those, the paged FP16 decode spent ~200 instructions on each row's
// address, four times the contiguous kernel's).
__device__ __forceinline__ int page_index(const KvPageLayout& l, long long pos) {
  const int tokens = static_cast<int>(l.page_tokens);
  const int page = static_cast<int>(pos) / tokens;
  return l.paged_f16() ? page : page - static_cast<int>(l.shape.body_base) / tokens;
}
__device__ __forceinline__ int row_in_page(const KvPageLayout& l, long long pos) {
  return static_cast<int>(pos) % static_cast<int>(l.page_tokens);
}

// The pool page holding position pos (its page-table entry, checked), or null (flagged)
// when the entry is not a pool page: writers skip, readers read page 0 (page_of).
__device__ __forceinline__ std::uint8_t* page_or_null(const PagedArgs& p, const std::int32_t* table, long long pos) {
  const int logical = page_index(p.layout, pos);
  const std::int32_t id = logical >= 0 && logical < p.layout.table_stride ? __ldg(table + logical) : -1;
  if (id < 0 || id >= p.layout.pages) {
    paged_fault(p, kPagedBadPage);
    return nullptr;
  }
  return p.layer.pages + static_cast<long long>(id) * p.layout.page_bytes();
}
__device__ __forceinline__ std::uint8_t* page_of(const PagedArgs& p, const std::int32_t* table, long long pos) {
  std::uint8_t* page = page_or_null(p, table, pos);
  return page ? page : p.layer.pages;
}

// FP16 row (head, row `row`) of a paged FP16 cache (full) in its page: D halves. Offsets
// inside a page are 32-bit (kv_page_layout keeps a page under 2^31 bytes): 64-bit
// products of the layout's sizes took ~60 instructions of a tile's issue path.
__device__ __forceinline__ std::uint16_t* f16_row_at(const KvPageLayout& l, std::uint8_t* page, bool is_v, int head,
                                                     int row) {
  const int part = is_v ? static_cast<int>(l.f16_part_bytes()) : 0;
  return reinterpret_cast<std::uint16_t*>(page + part) +
         (head * static_cast<int>(l.page_tokens) + row) * static_cast<int>(l.shape.head_dim);
}
// The same by position.
__device__ __forceinline__ std::uint16_t* f16_row_in(const KvPageLayout& l, std::uint8_t* page, bool is_v, int head,
                                                     long long pos) {
  return f16_row_at(l, page, is_v, head, row_in_page(l, pos));
}
__device__ __forceinline__ std::uint16_t* paged_f16_row(const PagedArgs& p, const std::int32_t* table, bool is_v,
                                                         int head, long long pos) {
  return f16_row_in(p.layout, page_of(p, table, pos), is_v, head, pos);
}

// K's and V's FP16 rows (head, pos): one page lookup, the two share the page.
struct F16Rows {
  const std::uint16_t* k = nullptr;
  const std::uint16_t* v = nullptr;
};
__device__ __forceinline__ F16Rows paged_f16_rows(const PagedArgs& p, const std::int32_t* table, int head,
                                                  long long pos) {
  std::uint8_t* const page = page_of(p, table, pos);
  return F16Rows{f16_row_in(p.layout, page, false, head, pos), f16_row_in(p.layout, page, true, head, pos)};
}

// A body position's rows for KV head 0: its codes, scale and min; head h's are h * code
// bytes / h further, and the next position's kv_heads rows further (as in kv_layout.h).
struct BodyRow {
  std::uint8_t* codes;
  std::uint16_t* scales;
  std::uint16_t* mins;
};
// Row `row` of a page (row_in_page of its position), in 32-bit offsets as f16_row_at.
__device__ __forceinline__ BodyRow body_row_at(const KvPageLayout& l, std::uint8_t* page, bool is_v, int row) {
  const int r = row * static_cast<int>(l.shape.kv_heads);
  const int codes = static_cast<int>(l.codes_offset(is_v)) + r * static_cast<int>(l.shape.code_bytes());
  const int scales = static_cast<int>(l.scales_offset(is_v)), mins = static_cast<int>(l.mins_offset(is_v));
  return BodyRow{page + codes, reinterpret_cast<std::uint16_t*>(page + scales) + r,
                 reinterpret_cast<std::uint16_t*>(page + mins) + r};
}
__device__ __forceinline__ BodyRow body_row_in(const KvPageLayout& l, std::uint8_t* page, bool is_v, long long pos) {
  return body_row_at(l, page, is_v, row_in_page(l, pos));
}
__device__ __forceinline__ BodyRow paged_body_row(const PagedArgs& p, const std::int32_t* table, bool is_v,
                                                  long long pos) {
  return body_row_in(p.layout, page_of(p, table, pos), is_v, pos);
}
// K's and V's body rows of pos: one page lookup, the two share the page.
struct BodyRows {
  BodyRow k, v;
};
__device__ __forceinline__ BodyRows paged_body_rows(const PagedArgs& p, const std::int32_t* table, long long pos) {
  std::uint8_t* const page = page_of(p, table, pos);
  return BodyRows{body_row_in(p.layout, page, false, pos), body_row_in(p.layout, page, true, pos)};
}

// The same in a contiguous cache.
__device__ __forceinline__ BodyRow contiguous_body_row(const KvLayerShape& s, const KvPart& part, long long pos) {
  const long long r = (pos - s.body_base) * s.kv_heads;
  return BodyRow{part.codes + r * s.code_bytes(), part.scales + r, part.mins ? part.mins + r : nullptr};
}

}  // namespace lowbit::cuda::kv

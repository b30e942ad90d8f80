// The paged KV cache's host side (core/kv_pages.h): sizing a pool from a byte budget,
// the per-layer pointers, the check of a batch's descriptors, the page allocator.
#include "core/kv_pages.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <random>
#include <unordered_set>

#include "core/checked.h"

namespace lowbit::core {

KvPageLayout kv_page_layout(const KvCacheSpec& spec, std::int64_t layers, std::size_t budget_bytes,
                            std::int64_t max_seqs, std::int64_t page_tokens, std::int64_t key_block) {
  LOWBIT_CHECK(page_tokens >= 16 && page_tokens % 16 == 0 && page_tokens <= 4096, "kv pages: page_tokens = ",
               page_tokens, ", expected a multiple of 16 in 16..4096");
  LOWBIT_CHECK(layers >= 1 && layers <= 4096, "kv pages: layers = ", layers, ", expected 1..4096");
  LOWBIT_CHECK(max_seqs >= 1 && max_seqs <= 65535, "kv pages: max_seqs = ", max_seqs, ", expected 1..65535");
  KvPageLayout l;
  l.shape = with_key_block(kv_layer_shape(spec), key_block);
  LOWBIT_CHECK(!l.shape.key_blocks() || (key_block % 16 == 0 && page_tokens == key_block), "kv pages: key blocks of ",
               key_block, " need pages of as many tokens (a multiple of 16), got page_tokens ", page_tokens);
  l.layers = layers;
  l.page_tokens = page_tokens;
  l.max_seqs = max_seqs;
  l.max_tokens = spec.policy == KvPolicy::window ? std::int64_t{1} << 30 : spec.max_tokens;
  LOWBIT_CHECK(l.max_tokens < (std::int64_t{1} << 31) - 1, "kv pages: max_tokens ", l.max_tokens,
               " past int32 positions");
  // The kernels address inside a page in 32 bits (cuda/kv/paged_address.cuh).
  LOWBIT_CHECK(l.page_bytes() < (std::int64_t{1} << 31), "kv pages: a page of ", l.page_bytes(),
               " bytes a layer (page_tokens ", page_tokens, ", kv_heads ", l.shape.kv_heads,
               ") is past the kernels' 32-bit offsets; use fewer page_tokens");
  l.table_stride = std::max<std::int64_t>(1, l.pages_for(l.max_tokens));
  const std::int64_t fixed = checked_mul(checked_mul(layers, max_seqs, "kv pages: fixed areas"), l.fixed_bytes(),
                                         "kv pages: fixed area bytes");
  LOWBIT_CHECK(budget_bytes <= static_cast<std::size_t>(std::numeric_limits<std::int64_t>::max()),
               "kv pages: budget of ", budget_bytes, " bytes");
  const auto budget = static_cast<std::int64_t>(budget_bytes);
  LOWBIT_CHECK(budget >= fixed, "kv pages: a budget of ", budget, " bytes does not hold the ", max_seqs,
               " sequences' FP16 sink and window (", fixed, " bytes)");
  if (l.has_pages()) {
    const std::int64_t per_page = checked_mul(layers, l.page_bytes(), "kv pages: page bytes");
    l.pages = (budget - fixed) / per_page;
    LOWBIT_CHECK(l.pages >= 1, "kv pages: a budget of ", budget, " bytes leaves ", budget - fixed,
                 " bytes after the fixed areas, less than one page of ", per_page, " bytes");
    l.pages = std::min<std::int64_t>(l.pages, std::numeric_limits<std::int32_t>::max());
  }
  return l;
}

KvPagedLayer kv_paged_layer(const KvPageLayout& layout, void* pool, std::int64_t layer) {
  LOWBIT_CHECK(pool != nullptr && layer >= 0 && layer < layout.layers, "kv pages: layer ", layer, " of ",
               layout.layers, (pool ? "" : " (null pool)"));
  auto* base = static_cast<std::uint8_t*>(pool);
  KvPagedLayer v;
  if (layout.has_pages()) v.pages = base + static_cast<std::size_t>(layer * layout.pages * layout.page_bytes());
  if (layout.fixed_bytes() > 0) {
    v.fixed = reinterpret_cast<std::uint16_t*>(base + layout.pages_bytes() +
                                               static_cast<std::size_t>(layer * layout.max_seqs * layout.fixed_bytes()));
  }
  return v;
}

KvLayerBuffers kv_fixed_area(const KvPageLayout& layout, const KvPagedLayer& layer, std::int64_t slot) {
  LOWBIT_CHECK(slot >= 0 && slot < layout.max_seqs, "kv pages: slot ", slot, ", expected 0..", layout.max_seqs - 1);
  KvLayerBuffers b;
  if (layout.fixed_bytes() == 0) return b;
  LOWBIT_CHECK(layer.fixed != nullptr, "kv pages: the layer's fixed areas are missing");
  std::uint16_t* area = layer.fixed + slot * (layout.fixed_bytes() / 2);
  if (layout.fixed_slots() > 0) {
    b.k.f16 = area;
    b.v.f16 = b.k.f16 + layout.shape.kv_heads * layout.fixed_slots() * layout.shape.head_dim;
  }
  if (layout.shape.key_blocks()) b.k.staged = area + layout.fixed_f16_bytes() / 2;
  return b;
}

void check_paged_batch(const KvPageLayout& layout, const KvSeqDesc* descs, std::int64_t batch,
                       const std::int32_t* tables, std::int64_t max_length) {
  LOWBIT_CHECK(batch >= 1 && batch <= 65535 && descs != nullptr, "paged batch: ", batch,
               " rows (1..65535, descriptors set)");
  LOWBIT_CHECK(max_length >= 1 && max_length <= layout.max_tokens, "paged batch: max_length ", max_length,
               ", expected 1..", layout.max_tokens, " (the positions a sequence holds)");
  LOWBIT_CHECK(tables != nullptr || !layout.has_pages(), "paged batch: null page tables");
  std::unordered_set<std::int32_t> seen;
  for (std::int64_t b = 0; b < batch; ++b) {
    const KvSeqDesc d = descs[b];
    if (d.pos < 0) continue;
    LOWBIT_CHECK(d.slot >= 0 && d.slot < layout.max_seqs, "paged batch: row ", b, " has slot ", d.slot,
                 ", expected 0..", layout.max_seqs - 1);
    LOWBIT_CHECK(seen.insert(d.slot).second, "paged batch: row ", b, " repeats slot ", d.slot);
    LOWBIT_CHECK(d.pos + std::int64_t{1} <= max_length, "paged batch: row ", b, " at position ", d.pos,
                 " needs length ", d.pos + 1, " > max_length ", max_length);
    const std::int64_t need = layout.pages_for(d.pos + std::int64_t{1});
    LOWBIT_CHECK(need <= layout.table_stride, "paged batch: row ", b, " needs ", need, " pages, the table holds ",
                 layout.table_stride);
    const std::int32_t* row = tables + d.slot * layout.table_stride;
    for (std::int64_t i = 0; i < need; ++i) {
      LOWBIT_CHECK(row[i] >= 0 && row[i] < layout.pages, "paged batch: row ", b, " (slot ", d.slot, ") page ", i,
                   " is ", row[i], ", expected a pool page 0..", layout.pages - 1);
    }
  }
}

KvPageAllocator::KvPageAllocator(const KvPageLayout& layout, std::uint64_t shuffle_seed)
    : layout_(layout),
      free_(static_cast<std::size_t>(layout.pages)),
      tables_(static_cast<std::size_t>(checked_mul(layout.max_seqs, layout.table_stride, "kv pages: tables")), -1),
      lengths_(static_cast<std::size_t>(layout.max_seqs), -1),
      free_slots_(static_cast<std::size_t>(layout.max_seqs)) {
  LOWBIT_CHECK(layout.max_seqs >= 1 && layout.table_stride >= 1 && layout.pages >= 0, "kv page allocator: layout of ",
               layout.max_seqs, " sequences, ", layout.table_stride, " table entries, ", layout.pages, " pages");
  // Stacks: back() goes first, so page 0 and slot 0 lead unless shuffled.
  std::iota(free_.rbegin(), free_.rend(), 0);
  std::iota(free_slots_.rbegin(), free_slots_.rend(), 0);
  if (shuffle_seed != 0) {
    std::mt19937_64 rng(shuffle_seed);
    std::shuffle(free_.begin(), free_.end(), rng);
  }
}

void KvPageAllocator::check_slot(std::int32_t slot, const char* what) const {
  LOWBIT_CHECK(slot >= 0 && slot < layout_.max_seqs && lengths_[static_cast<std::size_t>(slot)] >= 0,
               "kv page allocator: ", what, " of slot ", slot, ", which is not open");
}

std::int32_t KvPageAllocator::open() {
  LOWBIT_CHECK(!free_slots_.empty(), "kv page allocator: all ", layout_.max_seqs, " sequence slots are open");
  const std::int32_t slot = free_slots_.back();
  free_slots_.pop_back();
  lengths_[static_cast<std::size_t>(slot)] = 0;
  ++open_count_;
  return slot;
}

bool KvPageAllocator::is_open(std::int32_t slot) const {
  return slot >= 0 && slot < layout_.max_seqs && lengths_[static_cast<std::size_t>(slot)] >= 0;
}

std::int64_t KvPageAllocator::length(std::int32_t slot) const {
  check_slot(slot, "length");
  return lengths_[static_cast<std::size_t>(slot)];
}

std::int64_t KvPageAllocator::pages_held(std::int32_t slot) const {
  return layout_.pages_for(length(slot));
}

std::int64_t KvPageAllocator::pages_needed(std::int32_t slot, std::int64_t length) const {
  return std::max<std::int64_t>(0, layout_.pages_for(length) - pages_held(slot));
}

const std::int32_t* KvPageAllocator::table(std::int32_t slot) const {
  check_slot(slot, "table");
  return tables_.data() + slot * layout_.table_stride;
}

void KvPageAllocator::grow(std::int32_t slot, std::int64_t length) {
  check_slot(slot, "grow");
  LOWBIT_CHECK(length >= 0 && length <= layout_.max_tokens, "kv page allocator: length ", length, " of slot ", slot,
               ", expected 0..", layout_.max_tokens);
  std::int64_t& held_length = lengths_[static_cast<std::size_t>(slot)];
  const std::int64_t held = layout_.pages_for(held_length), need = layout_.pages_for(length);
  LOWBIT_CHECK(need - held <= free_pages(), "kv page allocator: slot ", slot, " needs ", need - held,
               " more pages for length ", length, ", the pool has ", free_pages(), " free of ", layout_.pages);
  std::int32_t* row = tables_.data() + slot * layout_.table_stride;
  for (std::int64_t i = held; i < need; ++i) {
    row[i] = free_.back();
    free_.pop_back();
  }
  held_length = std::max(held_length, length);
}

void KvPageAllocator::close(std::int32_t slot) {
  check_slot(slot, "close");
  std::int32_t* row = tables_.data() + slot * layout_.table_stride;
  const std::int64_t held = pages_held(slot);
  for (std::int64_t i = held - 1; i >= 0; --i) {  // back in reverse: the next sequence reuses them in order
    free_.push_back(row[i]);
    row[i] = -1;
  }
  lengths_[static_cast<std::size_t>(slot)] = -1;
  free_slots_.push_back(slot);
  --open_count_;
}

}  // namespace lowbit::core

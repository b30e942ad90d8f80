// The paged decode cache (cuda/kv/paged_kv_cuda.h, core/kv_pages.h): B sequences of
// mixed lengths (1, non-multiples of the page, several splits) appended one step at a
// time by paged_kv_append into pages handed out in a shuffled order (scattered in the
// pool), then attended by one paged_kv_attention launch. Checked, for every policy,
// head_dim 64 / 128, GQA 32/8, every kernel:
//   - the pages and fixed areas hold the CPU twin's bytes (FP16 rows, codes, scales,
//     mins), position by position, so the paged append writes what kv_append does;
//   - each row's output equals kv_attention_at's on a contiguous cache of the same bytes
//     with the batch's split length, bit for bit, and the twin's attention in double
//     within kv_cache_gpu_test's tolerance;
//   - idle rows and the rows' guards are untouched; the pool outside the held pages and
//     the outputs start poisoned (NaN), so a read of a wrong page shows.
// With rope, the paged append rotates K and q as kv_append_at does (same bits). Bad
// descriptors and tables are flagged: paged_kv_check_status throws lowbit::Error.
// The prefill rows form on the pool (paged_kv_append_rows, paged_kv_attention_rows):
// two sequences in scattered pages, prefilled chunk by chunk, equal the contiguous rows
// form bit for bit (outputs poisoned; every policy; both kernels, tensor cores and simt;
// the pool's bytes, the outputs).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/gpu.h"
#include "common/kv_twin.h"
#include "common/poison.h"
#include "common/random.h"
#include "common/expect_error.h"
#include "core/device_buffer.h"
#include "core/kv_pages.h"
#include "cuda/kv/paged_kv_cuda.h"
#include "formats/float16.h"

namespace lowbit::test {
namespace {

namespace ce = cuda::kv;
using core::KvPageAllocator;
using core::KvPageLayout;
using core::KvSeqDesc;
using lowbit::KvPolicy;

struct Case {
  KvPolicy policy;
  int bits;
  const char* name;
};
const Case kCases[] = {{KvPolicy::full, 8, "full"},          {KvPolicy::window, 8, "window"},
                       {KvPolicy::selective, 8, "selective INT8"}, {KvPolicy::selective, 4, "selective INT4"},
                       {KvPolicy::int8, 8, "int8"},          {KvPolicy::int4, 4, "int4"}};
constexpr std::int64_t kSink = 5, kWindow = 37, kHeads = 32, kKvHeads = 8;

std::vector<std::int64_t> lengths_of(std::int64_t batch) {
  if (batch == 1) return {3001};
  if (batch == 3) return {1, under_sanitizer() ? 300 : 2100, 47};  // 300: still several splits
  return {1, 7, 16, 17, 40, 100, 129, 255, 256, 257, 500, 777, 1000, 1024, 1300, 1500};
}

template <class T>
void upload(core::DeviceBuffer& d, const std::vector<T>& h) {
  d = core::DeviceBuffer(h.size() * sizeof(T));
  if (!h.empty()) LOWBIT_CUDA_CHECK(cudaMemcpy(d.data(), h.data(), d.bytes(), cudaMemcpyHostToDevice));
}

// A batch's paged cache after every row's appends, with the twins of its sequences.
struct Batch {
  KvPageLayout layout;
  std::vector<std::int32_t> slots;
  std::vector<std::int64_t> lengths;
  std::int64_t max_length = 0;
  std::vector<KvTwin> twins;
  core::DeviceBuffer pool, tables, descs, status;
  ce::KvPagedLayer layer;
  std::vector<std::int32_t> host_tables;
  ce::PagedBatch dev(std::int64_t rows) const {
    return ce::PagedBatch{descs.as<KvSeqDesc>(), tables.as<std::int32_t>(), rows, max_length,
                          status.as<std::int32_t>()};
  }
};

KvCacheSpec spec_of(const Case& c, std::int64_t d, std::int64_t max_tokens) {
  return KvCacheSpec{c.policy, kKvHeads, d, kSink, kWindow, c.bits, max_tokens};
}

// Builds the batch by B-row appends (step t appends position t of every row still
// shorter than its length; the others idle) through a shuffled allocator. key_block > 0:
// K in key blocks of that many tokens, on pages of as many.
Batch build_batch(std::mt19937& rng, const Case& c, std::int64_t d, const std::vector<std::int64_t>& lengths,
                  std::int64_t key_block = 0) {
  Batch b;
  b.lengths = lengths;
  b.max_length = *std::max_element(lengths.begin(), lengths.end());
  const auto rows = static_cast<std::int64_t>(lengths.size());
  const KvCacheSpec spec = spec_of(c, d, b.max_length);
  const std::int64_t page_tokens = key_block > 0 ? key_block : 16;
  // Room for every row and a third more pages, so that held pages are scattered among free ones.
  const KvPageLayout probe = core::kv_page_layout(spec, 1, std::size_t{1} << 32, rows + 3, page_tokens, key_block);
  std::int64_t pages = 1;
  for (std::int64_t len : lengths) pages += probe.pages_for(len);
  b.layout = core::kv_page_layout(
      spec, 1, probe.fixed_bytes_total() + static_cast<std::size_t>((pages + pages / 3) * probe.page_bytes()), rows + 3,
      page_tokens, key_block);
  KvPageAllocator alloc(b.layout, 0x9e3779b9u + static_cast<std::uint64_t>(rows));
  const std::int32_t spare = alloc.open();  // slots out of order too
  for (std::int64_t i = 0; i < rows; ++i) b.slots.push_back(alloc.open());
  alloc.close(spare);
  for (std::int64_t i = 0; i < rows; ++i) alloc.grow(b.slots[static_cast<std::size_t>(i)], lengths[static_cast<std::size_t>(i)]);
  b.host_tables = alloc.tables();
  upload(b.tables, b.host_tables);
  b.pool = core::DeviceBuffer(b.layout.pool_bytes());
  LOWBIT_CUDA_CHECK(cudaMemset(b.pool.data(), kFloatPoison, b.pool.bytes()));
  b.layer = core::kv_paged_layer(b.layout, b.pool.data(), 0);
  upload(b.status, std::vector<std::int32_t>{0});

  // Rows of every step: [t][row][ld], K at column kv_heads * d (n_heads = kv_heads: no q).
  const std::int64_t hd = kKvHeads * d, ld = 3 * hd;
  std::vector<std::uint16_t> steps = random_f16(rng, b.max_length * rows, ld, 1.0f);
  core::DeviceBuffer steps_dev;
  upload(steps_dev, steps);
  std::vector<KvSeqDesc> descs(static_cast<std::size_t>(rows));
  b.descs = core::DeviceBuffer(descs.size() * sizeof(KvSeqDesc));
  for (std::int64_t t = 0; t < b.max_length; ++t) {
    for (std::int64_t i = 0; i < rows; ++i) {
      const auto e = static_cast<std::size_t>(i);
      descs[e] = t < lengths[e] ? KvSeqDesc{static_cast<std::int32_t>(t), b.slots[e]} : KvSeqDesc{-1, b.slots[e]};
    }
    LOWBIT_CUDA_CHECK(cudaMemcpy(b.descs.data(), descs.data(), b.descs.bytes(), cudaMemcpyHostToDevice));
    const ce::BatchRows r{steps_dev.as<std::uint16_t>() + t * rows * ld, ld, hd, 2 * hd};
    ce::paged_kv_append(b.layout, b.layer, b.dev(rows), r, kKvHeads, nullptr);
  }
  LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
  for (std::int64_t i = 0; i < rows; ++i) {
    const std::int64_t len = lengths[static_cast<std::size_t>(i)];
    std::vector<std::uint16_t> k(static_cast<std::size_t>(len * hd)), v(k.size());
    for (std::int64_t t = 0; t < len; ++t) {
      const std::uint16_t* row = steps.data() + (t * rows + i) * ld;
      std::copy(row + hd, row + 2 * hd, k.begin() + t * hd);
      std::copy(row + 2 * hd, row + 3 * hd, v.begin() + t * hd);
    }
    b.twins.push_back(build_kv_twin(b.layout.shape, len, k, v));
  }
  return b;
}

// Index of the first differing element of n, or -1.
template <class T>
long long first_difference(const T* got, const T* want, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    if (std::memcmp(got + i, want + i, sizeof(T)) != 0) return i;
  }
  return -1;
}

// Key blocks: K's codes of the complete blocks by position, each block's parameters in
// the page of its first position, and the staging ring in the sequence's fixed area.
template <class PageOf>
void expect_key_blocks_hold_twin(const KvPageLayout& l, const core::KvPagedLayer& host, std::int32_t slot,
                                 const PageOf& page, const KvTwin& t) {
  const core::KvLayerShape& s = l.shape;
  const std::int64_t d = s.head_dim, h = s.kv_heads, cb = s.code_bytes();
  const std::int64_t body_end = std::max(s.body_base, t.length - s.window);
  const std::int64_t blocks = (s.open_block_begin(body_end) - s.body_base) / s.key_block;
  for (std::int64_t pos = s.body_base; pos < s.body_base + blocks * s.key_block; ++pos) {
    const std::int64_t r = (pos % l.page_tokens) * h, p = (pos - s.body_base) * h;
    ASSERT_EQ(first_difference(page(pos) + l.codes_offset(false) + r * cb, t.k.codes.data() + p * cb, h * cb), -1)
        << "K codes of position " << pos;
  }
  for (std::int64_t j = 0; j < blocks; ++j) {
    const std::uint8_t* at = page(l.key_block_page(j));
    ASSERT_EQ(first_difference(reinterpret_cast<const std::uint16_t*>(at + l.scales_offset(false)),
                               t.k.scales.data() + j * h * d, h * d),
              -1)
        << "K scales of block " << j;
    if (s.has_mins()) {
      ASSERT_EQ(first_difference(reinterpret_cast<const std::uint16_t*>(at + l.mins_offset(false)),
                                 t.k.mins.data() + j * h * d, h * d),
                -1)
          << "K mins of block " << j;
    }
  }
  // The open block's slots (the others hold older blocks' keys, as the twin's ring does).
  const std::uint16_t* ring = host.fixed + slot * (l.fixed_bytes() / 2) + l.fixed_f16_bytes() / 2;
  for (std::int64_t pos = s.open_block_begin(body_end); pos < body_end; ++pos) {
    for (std::int64_t hh = 0; hh < h; ++hh) {
      const std::int64_t at = (hh * s.key_block + s.staged_slot(pos)) * d;
      ASSERT_EQ(first_difference(ring + at, t.k.staged.data() + at, d), -1) << "staged K of position " << pos;
    }
  }
}

// The pool holds every row's twin bytes where the layout puts them.
void expect_pool_holds_twins(const Batch& b) {
  const KvPageLayout& l = b.layout;
  const core::KvLayerShape& s = l.shape;
  const std::vector<std::uint8_t> pool = download<std::uint8_t>(b.pool.data(), b.pool.bytes());
  const core::KvPagedLayer host = core::kv_paged_layer(l, const_cast<std::uint8_t*>(pool.data()), 0);
  const std::int64_t d = s.head_dim, h = s.kv_heads, cb = s.code_bytes();
  for (std::size_t i = 0; i < b.twins.size(); ++i) {
    SCOPED_TRACE("row " + std::to_string(i) + " length " + std::to_string(b.lengths[i]));
    const KvTwin& t = b.twins[i];
    const std::int32_t* table = b.host_tables.data() + b.slots[i] * l.table_stride;
    auto page = [&](std::int64_t pos) { return host.pages + table[l.logical_page(pos)] * l.page_bytes(); };
    for (bool is_v : {false, true}) {
      const TwinPart& part = is_v ? t.v : t.k;
      if (l.fixed_slots() > 0) {
        const std::uint16_t* fixed = host.fixed + b.slots[i] * (l.fixed_bytes() / 2) + (is_v ? h * l.fixed_slots() * d : 0);
        ASSERT_EQ(first_difference(fixed, part.f16.data(), h * l.fixed_slots() * d), -1) << "fixed area " << is_v;
      }
      if (!is_v && s.key_blocks()) {
        expect_key_blocks_hold_twin(l, host, b.slots[i], page, t);
        continue;
      }
      for (std::int64_t pos = 0; pos < t.length; ++pos) {
        if (l.paged_f16()) {
          for (std::int64_t hh = 0; hh < h; ++hh) {
            const auto* row = reinterpret_cast<const std::uint16_t*>(page(pos) + (is_v ? l.f16_part_bytes() : 0)) +
                              (hh * l.page_tokens + pos % l.page_tokens) * d;
            ASSERT_EQ(first_difference(row, part.f16.data() + (hh * s.f16_slots() + pos) * d, d), -1)
                << "FP16 position " << pos << " head " << hh;
          }
        }
        const bool in_body = l.paged_body() && pos >= s.body_base && (s.window == 0 || pos < t.length - s.window);
        if (!in_body) continue;
        const std::int64_t r = (pos % l.page_tokens) * h, p = (pos - s.body_base) * h;
        ASSERT_EQ(first_difference(page(pos) + l.codes_offset(is_v) + r * cb, part.codes.data() + p * cb, h * cb), -1)
            << "codes of position " << pos;
        const auto* scales = reinterpret_cast<const std::uint16_t*>(page(pos) + l.scales_offset(is_v)) + r;
        ASSERT_EQ(first_difference(scales, part.scales.data() + p, h), -1) << "scales of position " << pos;
        if (s.has_mins()) {
          const auto* mins = reinterpret_cast<const std::uint16_t*>(page(pos) + l.mins_offset(is_v)) + r;
          ASSERT_EQ(first_difference(mins, part.mins.data() + p, h), -1) << "mins of position " << pos;
        }
      }
    }
  }
}

// One contiguous layer on the device holding a twin's bytes.
struct ContiguousLayer {
  core::DeviceBuffer kf, kc, ks, km, kst, vf, vc, vs, vm;
  ce::KvLayerBuffers dev;
  explicit ContiguousLayer(const KvTwin& t) {
    upload(kf, t.k.f16), upload(kc, t.k.codes), upload(ks, t.k.scales), upload(km, t.k.mins), upload(kst, t.k.staged);
    upload(vf, t.v.f16), upload(vc, t.v.codes), upload(vs, t.v.scales), upload(vm, t.v.mins);
    dev.k = {kf.as<std::uint16_t>(), kc.as<std::uint8_t>(), ks.as<std::uint16_t>(), km.as<std::uint16_t>(),
             kst.as<std::uint16_t>()};  // key blocks' staging ring (empty otherwise)
    dev.v = {vf.as<std::uint16_t>(), vc.as<std::uint8_t>(), vs.as<std::uint16_t>(), vm.as<std::uint16_t>()};
  }
  // The layer's bytes now, as a twin of `length` positions shaped like `like`.
  KvTwin contents(const KvTwin& like, std::int64_t length) const {
    KvTwin t = like;
    t.length = length;
    t.k.f16 = download<std::uint16_t>(kf.data(), t.k.f16.size());
    t.v.f16 = download<std::uint16_t>(vf.data(), t.v.f16.size());
    t.k.codes = download<std::uint8_t>(kc.data(), t.k.codes.size());
    t.v.codes = download<std::uint8_t>(vc.data(), t.v.codes.size());
    t.k.scales = download<std::uint16_t>(ks.data(), t.k.scales.size());
    t.v.scales = download<std::uint16_t>(vs.data(), t.v.scales.size());
    t.k.mins = download<std::uint16_t>(km.data(), t.k.mins.size());
    t.v.mins = download<std::uint16_t>(vm.data(), t.v.mins.size());
    t.k.staged = download<std::uint16_t>(kst.data(), t.k.staged.size());  // key blocks' staging ring
    return t;
  }
};

// The pool (moved in) holds, sequence by sequence, what the contiguous layers hold: their
// first lengths[i] positions (twins shaped like empty[i]).
void expect_pool_holds_contiguous(const KvPageLayout& l, const KvPageAllocator& alloc, core::DeviceBuffer pool,
                                  const std::vector<std::int32_t>& slots, const std::vector<std::int64_t>& lengths,
                                  const std::vector<ContiguousLayer>& contiguous, const std::vector<KvTwin>& empty) {
  Batch b;
  b.layout = l;
  b.slots = slots;
  b.lengths = lengths;
  b.host_tables = alloc.tables();
  b.pool = std::move(pool);
  for (std::size_t i = 0; i < slots.size(); ++i) b.twins.push_back(contiguous[i].contents(empty[i], lengths[i]));
  expect_pool_holds_twins(b);
}

const char* kernel_name(ce::AttentionKernel k) {
  return k == ce::AttentionKernel::simt ? "simt" : k == ce::AttentionKernel::mma ? "mma" : "mma_swap";
}

class PagedKvGpu : public GpuTest {};

// The batched decode attention of rows sequences (the last row idle) equals the contiguous
// kernel's bit for bit at the batch's split length and the twin in double, for each of
// `kernels`; key_block > 0: K in key blocks on pages of as many tokens.
void check_batched_attention(std::mt19937& rng, const Case& c, std::int64_t d, std::int64_t rows,
                             std::int64_t key_block, std::initializer_list<ce::AttentionKernel> kernels) {
  const Batch b = build_batch(rng, c, d, lengths_of(rows), key_block);
  expect_pool_holds_twins(b);
  EXPECT_EQ(download<std::int32_t>(b.status.data(), 1)[0], 0);
  // q rows: [row][ld], q at column 0; the last row idle (its output keeps the poison).
  const std::int64_t hd = kHeads * d, ld = hd + 2 * kKvHeads * d;
  const std::vector<std::uint16_t> q = random_f16(rng, rows + 1, ld, 1.5f);
  core::DeviceBuffer qd;
  upload(qd, q);
  std::vector<KvSeqDesc> descs;
  for (std::int64_t i = 0; i < rows; ++i) {
    descs.push_back({static_cast<std::int32_t>(b.lengths[static_cast<std::size_t>(i)] - 1),
                     b.slots[static_cast<std::size_t>(i)]});
  }
  descs.push_back({-1, 0});
  core::DeviceBuffer descs_dev;
  upload(descs_dev, descs);
  ce::PagedBatch batch{descs_dev.as<KvSeqDesc>(), b.tables.as<std::int32_t>(), rows + 1, b.max_length,
                       b.status.as<std::int32_t>()};
  const ce::BatchRows qrows{qd.data(), ld, hd, hd + kKvHeads * d};
  for (ce::AttentionKernel kernel : kernels) {
    for (DType out_dtype : sanitizer_subset<DType>({DType::f32, DType::f16}, {0})) {
      SCOPED_TRACE(std::string(kernel_name(kernel)) + " out " + dtype_name(out_dtype));
      const std::size_t ws_bytes = ce::paged_kv_attention_workspace(b.layout, kHeads, rows + 1, b.max_length);
      core::DeviceBuffer ws(ws_bytes);
      LOWBIT_CUDA_CHECK(cudaMemset(ws.data(), 0, ws_bytes));
      const std::size_t es = dtype_size(out_dtype);
      const std::int64_t out_ld = hd + 64;  // a gap between rows: must stay poisoned
      GuardedBuffer out(static_cast<std::size_t>((rows + 1) * out_ld) * es);
      out.poison(kFloatPoison);
      ce::paged_kv_attention(b.layout, b.layer, batch, qrows, kHeads, out.data(), out_ld, out_dtype, ws.data(),
                             ws_bytes, nullptr, false, kernel);
      // Twice: the fused combine's counters are left ready for the next call.
      ce::paged_kv_attention(b.layout, b.layer, batch, qrows, kHeads, out.data(), out_ld, out_dtype, ws.data(),
                             ws_bytes, nullptr, false, kernel);
      LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
      EXPECT_TRUE(out.guards_intact("out"));
      ce::paged_kv_check_status(b.status.as<std::int32_t>(), nullptr);
      const std::vector<std::uint8_t> got = out.download_bytes();
      const ce::DecodeSplitPlan plan =
          ce::paged_kv_attention_plan(b.layout, kHeads, rows + 1, b.max_length, kernel);
      for (std::int64_t i = 0; i <= rows; ++i) {
        const std::uint8_t* row = got.data() + static_cast<std::size_t>(i * out_ld) * es;
        // Past each row's heads, and all of the idle row: untouched.
        const std::int64_t written = i < rows ? hd : 0;
        for (std::size_t e = static_cast<std::size_t>(written) * es; e < static_cast<std::size_t>(out_ld) * es; ++e) {
          ASSERT_EQ(row[e], kFloatPoison) << "row " << i << " byte " << e;
        }
        if (i == rows) continue;
        const KvTwin& t = b.twins[static_cast<std::size_t>(i)];
        // The contiguous kernel with the batch's split length.
        const ContiguousLayer cl(t);
        core::DeviceBuffer pos, qi, outc;
        upload(pos, std::vector<std::int32_t>{static_cast<std::int32_t>(t.length - 1)});
        upload(qi, std::vector<std::uint16_t>(q.begin() + i * ld, q.begin() + i * ld + hd));
        outc = core::DeviceBuffer(static_cast<std::size_t>(hd) * es);
        LOWBIT_CUDA_CHECK(cudaMemset(outc.data(), kFloatPoison, outc.bytes()));
        const std::int64_t splits = (b.max_length + plan.split_len - 1) / plan.split_len;
        const std::size_t cws = core::decode_workspace_bytes(kHeads, d, splits) + 4096;
        core::DeviceBuffer cw(cws);
        LOWBIT_CUDA_CHECK(cudaMemset(cw.data(), 0, cws));
        ce::kv_attention_at(t.shape, cl.dev, pos.as<std::int32_t>(), b.max_length, qi.data(), kHeads,
                            outc.data(), out_dtype, cw.data(), cws, nullptr, false, kernel, plan.split_len);
        const std::vector<std::uint8_t> want = download<std::uint8_t>(outc.data(), outc.bytes());
        ASSERT_EQ(first_difference(row, want.data(), hd * static_cast<std::int64_t>(es)), -1)
            << "row " << i << " (length " << t.length << ") differs from the contiguous kernel";
        // And the twin in double (kv_cache_gpu_test's tolerance).
        const std::vector<std::uint16_t> qh(q.begin() + i * ld, q.begin() + i * ld + hd);
        const TwinAttention ref = twin_attention(t, qh, kHeads);
        const bool f16_p = kernel == ce::AttentionKernel::mma_swap;
        int bad = 0;
        for (std::int64_t e = 0; e < hd; ++e) {
          const auto h = static_cast<std::size_t>(e / d);
          float v;
          if (out_dtype == DType::f32) {
            std::memcpy(&v, row + 4 * e, 4);
          } else {
            std::uint16_t bits;
            std::memcpy(&bits, row + 2 * e, 2);
            v = formats::half_to_float({bits});
          }
          const double want_e = ref.out[static_cast<std::size_t>(e)];
          const double tol = ref.vmax[h] * (2.0 * static_cast<double>(d + 4) * 0x1p-24 * ref.smax[h] + 0x1p-15 +
                                            (f16_p ? 0x1p-10 : 0.0)) +
                             (out_dtype == DType::f16 ? 0x1p-11 * std::fabs(want_e) : 0.0) + 1e-7;
          if (!(std::fabs(v - want_e) <= tol) && bad++ < 3) {
            ADD_FAILURE() << "row " << i << " element " << e << ": " << v << " vs twin " << want_e;
          }
        }
      }
    }
  }
}

TEST_F(PagedKvGpu, BatchedAttentionEqualsContiguousAndTheTwin) {
  LOWBIT_TEST_RNG(rng);
  for (const Case& c : kCases) {
    for (std::int64_t d : {64, 128}) {
      for (std::int64_t rows : sanitizer_subset<std::int64_t>({1, 3, 16}, {1})) {
        SCOPED_TRACE(std::string(c.name) + " D " + std::to_string(d) + " B " + std::to_string(rows));
        check_batched_attention(rng, c, d, rows, 0,
                                {ce::AttentionKernel::simt, ce::AttentionKernel::mma, ce::AttentionKernel::mma_swap});
      }
    }
  }
}

// Key blocks: mma_swap's paged KB instance (each block's parameters from the page of its
// first position, the open block from the fixed area's ring) against its contiguous one.
TEST_F(PagedKvGpu, BatchedAttentionWithKeyBlocksEqualsContiguousAndTheTwin) {
  LOWBIT_TEST_RNG(rng);
  for (const Case& c : {kCases[2], kCases[3], kCases[4], kCases[5]}) {
    for (std::int64_t d : {64, 128}) {
      for (std::int64_t key_block : {16, 32}) {
        for (std::int64_t rows : sanitizer_subset<std::int64_t>({1, 3, 16}, {3})) {
          SCOPED_TRACE(std::string(c.name) + " D " + std::to_string(d) + " key block " + std::to_string(key_block) +
                       " B " + std::to_string(rows));
          check_batched_attention(rng, c, d, rows, key_block, {ce::AttentionKernel::mma_swap});
        }
      }
    }
  }
}

// Key blocks (KIVI) on pages of B tokens: the batched append writes the twin's bytes (K's
// blocks quantized per channel as they complete, their parameters in the page of their
// first position, the open block in the fixed area's ring), rows of different lengths.
TEST_F(PagedKvGpu, AppendWithKeyBlocksWritesTheTwinsBytes) {
  LOWBIT_TEST_RNG(rng);
  for (const Case& c : {kCases[2], kCases[3], kCases[4], kCases[5]}) {
    for (std::int64_t d : {64, 128}) {
      for (std::int64_t key_block : {16, 32, 64}) {
        SCOPED_TRACE(std::string(c.name) + " D " + std::to_string(d) + " B " + std::to_string(key_block));
        const Batch b = build_batch(rng, c, d, {1, 31, 33, 96, 250, 257}, key_block);
        expect_pool_holds_twins(b);
        EXPECT_EQ(download<std::int32_t>(b.status.data(), 1)[0], 0);
      }
    }
  }
}

// The same by the prefill's rows append: one sequence's chunks (crossing blocks, pages and
// the window's ring within and across chunks), each block the chunk completes quantized
// from the chunk's rows and the snapshot.
TEST_F(PagedKvGpu, RowsAppendWithKeyBlocksWritesTheTwinsBytes) {
  LOWBIT_TEST_RNG(rng);
  const std::vector<std::int64_t> chunks = {37, 1, 100, 64, 211, 3};
  std::int64_t length = 0;
  for (std::int64_t n : chunks) length += n;
  for (const Case& c : {kCases[2], kCases[3], kCases[4], kCases[5]}) {
    for (std::int64_t d : {64, 128}) {
      for (std::int64_t key_block : {16, 32}) {
        SCOPED_TRACE(std::string(c.name) + " D " + std::to_string(d) + " B " + std::to_string(key_block));
        const KvCacheSpec spec = spec_of(c, d, length);
        const KvPageLayout probe = core::kv_page_layout(spec, 1, std::size_t{1} << 32, 2, key_block, key_block);
        const std::int64_t pages = 2 * probe.pages_for(length) + 1;  // scattered among as many free ones
        Batch b;
        b.layout = core::kv_page_layout(spec, 1, probe.fixed_bytes_total() + static_cast<std::size_t>(pages * probe.page_bytes()),
                                        2, key_block, key_block);
        const KvPageLayout& l = b.layout;
        KvPageAllocator alloc(l, 0x6a09e667u);
        const std::int32_t spare = alloc.open();
        b.slots = {alloc.open()};
        alloc.close(spare);
        b.lengths = {length};
        b.max_length = length;
        b.pool = core::DeviceBuffer(l.pool_bytes());
        LOWBIT_CUDA_CHECK(cudaMemset(b.pool.data(), kFloatPoison, b.pool.bytes()));
        b.layer = core::kv_paged_layer(l, b.pool.data(), 0);
        upload(b.status, std::vector<std::int32_t>{0});
        const std::int64_t hd = kKvHeads * d, ld = 3 * hd;  // no query heads: K at hd, V at 2 hd
        const std::vector<std::uint16_t> data = random_f16(rng, length, ld, 1.0f);
        core::DeviceBuffer rows_dev, snapshot(std::max<std::size_t>(ce::ring_snapshot_bytes(l.shape), 16));
        upload(rows_dev, data);
        std::int64_t pos0 = 0;
        for (std::int64_t n : chunks) {
          alloc.grow(b.slots[0], pos0 + n);
          upload(b.tables, alloc.tables());
          const ce::ChunkRows chunk{rows_dev.as<std::uint16_t>() + pos0 * ld, n, ld, hd, 2 * hd, pos0};
          ce::paged_kv_append_rows(l, b.layer, b.slots[0], b.tables.as<std::int32_t>(), chunk, snapshot.data(), nullptr,
                                   b.status.as<std::int32_t>());
          LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
          pos0 += n;
        }
        ce::paged_kv_check_status(b.status.as<std::int32_t>(), nullptr);
        b.host_tables = alloc.tables();
        std::vector<std::uint16_t> k(static_cast<std::size_t>(length * hd)), v(k.size());
        for (std::int64_t t = 0; t < length; ++t) {
          std::copy(data.begin() + t * ld + hd, data.begin() + t * ld + 2 * hd, k.begin() + t * hd);
          std::copy(data.begin() + t * ld + 2 * hd, data.begin() + t * ld + 3 * hd, v.begin() + t * hd);
        }
        b.twins.push_back(build_kv_twin(l.shape, length, k, v));
        expect_pool_holds_twins(b);
      }
    }
  }
}

TEST_F(PagedKvGpu, AppendWithRopeRotatesLikeKvAppendAt) {
  LOWBIT_TEST_RNG(rng);
  for (const Case& c : {kCases[0], kCases[3]}) {
    for (std::int64_t d : {64, 128}) {
      SCOPED_TRACE(std::string(c.name) + " D " + std::to_string(d));
      const std::int64_t rows = 3, positions = 120, rope_dims = d;
      const KvCacheSpec spec = spec_of(c, d, positions);
      const KvPageLayout l = core::kv_page_layout(spec, 1, std::size_t{16} << 20, rows);
      KvPageAllocator alloc(l, 3);
      std::vector<std::int32_t> slots;
      for (std::int64_t i = 0; i < rows; ++i) slots.push_back(alloc.open());
      const std::vector<std::int64_t> lengths = {1, 70, 120};
      for (std::int64_t i = 0; i < rows; ++i) alloc.grow(slots[static_cast<std::size_t>(i)], lengths[static_cast<std::size_t>(i)]);
      core::DeviceBuffer tables, pool(l.pool_bytes()), status, descs;
      upload(tables, alloc.tables());
      upload(status, std::vector<std::int32_t>{0});
      LOWBIT_CUDA_CHECK(cudaMemset(pool.data(), kFloatPoison, pool.bytes()));
      const ce::KvPagedLayer layer = core::kv_paged_layer(l, pool.data(), 0);
      std::vector<float> cosv(static_cast<std::size_t>(positions * rope_dims / 2)), sinv(cosv.size());
      for (std::size_t e = 0; e < cosv.size(); ++e) {
        const double a = 0.001 * static_cast<double>(e);
        cosv[e] = static_cast<float>(std::cos(a));
        sinv[e] = static_cast<float>(std::sin(a));
      }
      core::DeviceBuffer cosd, sind;
      upload(cosd, cosv);
      upload(sind, sinv);
      const std::int64_t hd = kHeads * d, ld = hd + 2 * kKvHeads * d;
      // Every row appends positions 0 .. length - 1; the contiguous twin layer of each
      // row appends the same rows with kv_append_at.
      std::vector<ContiguousLayer> contiguous;
      std::vector<KvTwin> empty(static_cast<std::size_t>(rows));
      for (std::int64_t i = 0; i < rows; ++i) {
        KvTwin& t = empty[static_cast<std::size_t>(i)];
        t.shape = l.shape;
        poison_part(l.shape, t.k);
        poison_part(l.shape, t.v);
        contiguous.emplace_back(empty[static_cast<std::size_t>(i)]);
      }
      const std::int64_t steps = *std::max_element(lengths.begin(), lengths.end());
      const std::vector<std::uint16_t> data = random_f16(rng, steps * rows, ld, 1.0f);
      core::DeviceBuffer paged_rows, flat_rows, pos_dev(sizeof(std::int32_t));
      upload(paged_rows, data);
      upload(flat_rows, data);
      for (std::int64_t t = 0; t < steps; ++t) {
        std::vector<KvSeqDesc> dsc;
        for (std::int64_t i = 0; i < rows; ++i) {
          dsc.push_back(t < lengths[static_cast<std::size_t>(i)] ? KvSeqDesc{static_cast<std::int32_t>(t), slots[static_cast<std::size_t>(i)]}
                                                                 : KvSeqDesc{-1, slots[static_cast<std::size_t>(i)]});
        }
        upload(descs, dsc);
        ce::AppendRope rope{cosd.as<float>(), sind.as<float>(), rope_dims, nullptr, 0, false, false};
        const ce::PagedBatch batch{descs.as<KvSeqDesc>(), tables.as<std::int32_t>(), rows, positions,
                                   status.as<std::int32_t>()};
        auto* base = paged_rows.as<std::uint16_t>() + t * rows * ld;
        ce::paged_kv_append(l, layer, batch, ce::BatchRows{base, ld, hd, hd + kKvHeads * d}, kHeads, nullptr, &rope);
        const std::int32_t tt = static_cast<std::int32_t>(t);
        LOWBIT_CUDA_CHECK(cudaMemcpy(pos_dev.data(), &tt, sizeof tt, cudaMemcpyHostToDevice));
        for (std::int64_t i = 0; i < rows; ++i) {
          if (t >= lengths[static_cast<std::size_t>(i)]) continue;
          auto* row = flat_rows.as<std::uint16_t>() + (t * rows + i) * ld;
          ce::AppendRope r = rope;
          r.q = row;
          r.n_heads = kHeads;
          ce::kv_append_at(l.shape, contiguous[static_cast<std::size_t>(i)].dev, pos_dev.as<std::int32_t>(), row + hd,
                           row + hd + kKvHeads * d, nullptr, &r);
        }
      }
      LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
      ce::paged_kv_check_status(status.as<std::int32_t>(), nullptr);
      // Rotated q (in place in the rows) equal; the caches' bytes equal.
      const auto pr = download<std::uint16_t>(paged_rows.data(), data.size());
      const auto fr = download<std::uint16_t>(flat_rows.data(), data.size());
      EXPECT_EQ(first_difference(pr.data(), fr.data(), static_cast<std::int64_t>(pr.size())), -1) << "rotated q";
      expect_pool_holds_contiguous(l, alloc, std::move(pool), slots, lengths, contiguous, empty);
    }
  }
}

// With key blocks (pages of B tokens) the prefill is paged_kv_prefill_key_blocks against
// kv_prefill_key_blocks: the whole chunk on the tensor cores (each row reading its open
// block's keys from the chunk or the snapshot), or in pieces on simt.
TEST_F(PagedKvGpu, RowsFormEqualsContiguousRowsForm) {
  LOWBIT_TEST_RNG(rng);
  // Two sequences' chunks, interleaved: the first crosses the window's ring several
  // times within a chunk and across chunks; one-row chunks; a chunk ending mid-page.
  const std::vector<std::vector<std::int64_t>> chunks = {{37, 1, 100, 64, 211, 3}, {5, 90, 1, 160}};
  for (const Case& c : kCases) {
    using Run = std::tuple<std::int64_t, ce::AttentionKernel, std::int64_t>;
    std::vector<Run> runs;
    for (std::int64_t key_block : {0, 16, 32}) {
      if (key_block > 0 && (c.policy == KvPolicy::full || c.policy == KvPolicy::window)) continue;
      for (std::int64_t d : {64, 128}) {
        for (ce::AttentionKernel k : {ce::AttentionKernel::automatic, ce::AttentionKernel::simt}) {
          runs.push_back(Run{d, k, key_block});
        }
      }
    }
    for (auto [d, kernel, key_block] : runs) {
      SCOPED_TRACE(std::string(c.name) + " D " + std::to_string(d) +
                   (kernel == ce::AttentionKernel::simt ? " simt" : " tensor cores") + " key block " +
                   std::to_string(key_block));
      const std::int64_t page_tokens = key_block > 0 ? key_block : 16;
      std::vector<std::int64_t> lengths;
      for (const auto& plan : chunks) {
        std::int64_t n = 0;
        for (std::int64_t r : plan) n += r;
        lengths.push_back(n);
      }
      const std::int64_t max_tokens = *std::max_element(lengths.begin(), lengths.end()) + 20;
      const KvCacheSpec spec = spec_of(c, d, max_tokens);
      const KvPageLayout probe = core::kv_page_layout(spec, 1, std::size_t{1} << 32, 4, page_tokens, key_block);
      // Room for both and as many pages again, handed out shuffled: scattered pages.
      const std::int64_t pages = 2 * (probe.pages_for(lengths[0]) + probe.pages_for(lengths[1])) + 1;
      const KvPageLayout l = core::kv_page_layout(
          spec, 1, probe.fixed_bytes_total() + static_cast<std::size_t>(pages * probe.page_bytes()), 4, page_tokens,
          key_block);
      KvPageAllocator alloc(l, 0x51ed2701u);
      const std::int32_t spare = alloc.open();
      const std::vector<std::int32_t> slots = {alloc.open(), alloc.open()};
      alloc.close(spare);
      core::DeviceBuffer tables, pool(l.pool_bytes()), status;
      upload(status, std::vector<std::int32_t>{0});
      LOWBIT_CUDA_CHECK(cudaMemset(pool.data(), kFloatPoison, pool.bytes()));
      const ce::KvPagedLayer layer = core::kv_paged_layer(l, pool.data(), 0);
      std::vector<KvTwin> empty(2);
      std::vector<ContiguousLayer> contiguous;
      for (KvTwin& t : empty) {
        t.shape = l.shape;
        poison_part(l.shape, t.k, true);
        poison_part(l.shape, t.v);
        contiguous.emplace_back(t);
      }
      const std::int64_t hd = kHeads * d, ld = hd + 2 * kKvHeads * d, out_ld = hd + 64;
      // A workspace of 7 rows: longer chunks take several launches.
      const std::size_t ws_bytes = ce::kv_attention_rows_workspace(l.shape, kHeads, 7, max_tokens);
      core::DeviceBuffer ws_paged(ws_bytes), ws_flat(ws_bytes);
      const std::size_t snap_bytes = std::max<std::size_t>(ce::ring_snapshot_bytes(l.shape), 16);
      core::DeviceBuffer snap_paged(snap_bytes), snap_flat(snap_bytes);
      std::vector<std::int64_t> done(2, 0);
      std::vector<std::size_t> next(2, 0);
      for (bool more = true; more;) {
        more = false;
        for (std::size_t i = 0; i < 2; ++i) {
          if (next[i] == chunks[i].size()) continue;
          more = true;
          const std::int64_t n = chunks[i][next[i]++], pos0 = done[i];
          SCOPED_TRACE("sequence " + std::to_string(i) + " rows " + std::to_string(pos0) + ".." +
                       std::to_string(pos0 + n - 1));
          alloc.grow(slots[i], pos0 + n);
          upload(tables, alloc.tables());
          const std::vector<std::uint16_t> data = random_f16(rng, n, ld, 1.0f);
          core::DeviceBuffer rows_dev;
          upload(rows_dev, data);
          const ce::ChunkRows chunk{rows_dev.data(), n, ld, hd, hd + kKvHeads * d, pos0};
          GuardedBuffer out_paged(static_cast<std::size_t>(n * out_ld) * 2), out_flat(out_paged.bytes());
          out_paged.poison(kFloatPoison);
          out_flat.poison(kFloatPoison);
          // The paged form's automatic kernel is mma: so the contiguous one's here (its
          // automatic runs flash on Hopper where it takes the chunk, which rounds differently).
          const ce::AttentionKernel flat_kernel =
              kernel == ce::AttentionKernel::automatic ? ce::AttentionKernel::mma : kernel;
          if (key_block > 0) {
            ce::paged_kv_prefill_key_blocks(l, layer, slots[i], tables.as<std::int32_t>(), chunk, snap_paged.data(),
                                            kHeads, out_paged.data(), out_ld, ws_paged.data(), ws_bytes, nullptr,
                                            status.as<std::int32_t>(), kernel);
            ce::kv_prefill_key_blocks(l.shape, contiguous[i].dev, chunk, snap_flat.data(), kHeads, out_flat.data(),
                                      out_ld, ws_flat.data(), ws_bytes, nullptr, flat_kernel);
          } else {
            ce::paged_kv_append_rows(l, layer, slots[i], tables.as<std::int32_t>(), chunk, snap_paged.data(), nullptr,
                                     status.as<std::int32_t>());
            ce::paged_kv_attention_rows(l, layer, slots[i], tables.as<std::int32_t>(), chunk, snap_paged.data(),
                                        kHeads, out_paged.data(), out_ld, ws_paged.data(), ws_bytes, nullptr,
                                        status.as<std::int32_t>(), kernel);
            ce::kv_append_rows(l.shape, contiguous[i].dev, chunk, snap_flat.data(), nullptr);
            ce::kv_attention_rows(l.shape, contiguous[i].dev, chunk, snap_flat.data(), kHeads, out_flat.data(),
                                  out_ld, ws_flat.data(), ws_bytes, nullptr, flat_kernel);
          }
          LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
          ce::paged_kv_check_status(status.as<std::int32_t>(), nullptr);
          EXPECT_TRUE(out_paged.guards_intact("paged out"));
          const std::vector<std::uint8_t> got = out_paged.download_bytes(), want = out_flat.download_bytes();
          ASSERT_EQ(first_difference(got.data(), want.data(), static_cast<std::int64_t>(got.size())), -1)
              << "the paged rows form differs from the contiguous one";
          // Every row's heads written (no poison left in them); the gaps kept.
          for (std::int64_t r = 0; r < n; ++r) {
            const std::uint8_t* row = got.data() + r * out_ld * 2;
            for (std::int64_t e = 0; e < hd; ++e) {
              ASSERT_FALSE(row[2 * e] == kFloatPoison && row[2 * e + 1] == kFloatPoison) << "row " << r << " element " << e;
            }
            for (std::int64_t e = 2 * hd; e < 2 * out_ld; ++e) ASSERT_EQ(row[e], kFloatPoison) << "row " << r;
          }
          done[i] += n;
        }
      }
      expect_pool_holds_contiguous(l, alloc, std::move(pool), slots, lengths, contiguous, empty);
    }
  }
}

TEST_F(PagedKvGpu, BadRowsAreFlaggedAndNothingIsWrittenOutsideTheirPages) {
  const Case c = kCases[5];  // int4
  const std::int64_t d = 128;
  const KvPageLayout l = core::kv_page_layout(spec_of(c, d, 256), 1, std::size_t{4} << 20, 4);
  KvPageAllocator alloc(l);
  const std::int32_t s0 = alloc.open(), s1 = alloc.open();
  alloc.grow(s0, 40);
  alloc.grow(s1, 16);
  std::vector<std::int32_t> tables = alloc.tables();
  core::DeviceBuffer tdev, status, descs, pool(l.pool_bytes());
  upload(tdev, tables);
  upload(status, std::vector<std::int32_t>{0});
  LOWBIT_CUDA_CHECK(cudaMemset(pool.data(), 0, pool.bytes()));
  const ce::KvPagedLayer layer = core::kv_paged_layer(l, pool.data(), 0);
  const std::int64_t hd = kHeads * d, ld = hd + 2 * kKvHeads * d;
  std::mt19937 rng(5);
  const std::vector<std::uint16_t> data = random_f16(rng, 3, ld, 1.0f);
  core::DeviceBuffer rows_dev;
  upload(rows_dev, data);
  const ce::BatchRows rows{rows_dev.data(), ld, hd, hd + kKvHeads * d};
  auto run_append = [&](std::vector<KvSeqDesc> dsc, std::int64_t max_length) {
    upload(descs, dsc);
    ce::paged_kv_append(l, layer, ce::PagedBatch{descs.as<KvSeqDesc>(), tdev.as<std::int32_t>(),
                                                  static_cast<std::int64_t>(dsc.size()), max_length,
                                                  status.as<std::int32_t>()},
                        rows, kHeads, nullptr);
  };
  // Position 16 of s1 needs a second page that its table does not hold.
  run_append({{39, s0}, {16, s1}}, 256);
  EXPECT_LOWBIT_ERROR(ce::paged_kv_check_status(status.as<std::int32_t>(), nullptr), "page-table entry outside");
  run_append({{3, 7}}, 256);
  EXPECT_LOWBIT_ERROR(ce::paged_kv_check_status(status.as<std::int32_t>(), nullptr), "slot outside");
  run_append({{100, s0}}, 50);
  EXPECT_LOWBIT_ERROR(ce::paged_kv_check_status(status.as<std::int32_t>(), nullptr), "position past max_length");
  // Only s0's page of position 39 was written (the first call): every other page is zero.
  const std::vector<std::uint8_t> host = download<std::uint8_t>(pool.data(), pool.bytes());
  const std::int64_t written = tables[static_cast<std::size_t>(s0 * l.table_stride + 39 / l.page_tokens)];
  for (std::int64_t p = 0; p < l.pages; ++p) {
    if (p == written) continue;
    const auto* page = host.data() + p * l.page_bytes();
    ASSERT_TRUE(std::all_of(page, page + l.page_bytes(), [](std::uint8_t x) { return x == 0; })) << "page " << p;
  }
  // A bad table entry in the attention is flagged too; a clean call then reports nothing.
  tables[static_cast<std::size_t>(s0 * l.table_stride + 1)] = static_cast<std::int32_t>(l.pages + 5);
  upload(tdev, tables);
  upload(descs, std::vector<KvSeqDesc>{{39, s0}});
  const std::size_t ws_bytes = ce::paged_kv_attention_workspace(l, kHeads, 1, 256);
  core::DeviceBuffer ws(ws_bytes), out(static_cast<std::size_t>(hd) * 4);
  LOWBIT_CUDA_CHECK(cudaMemset(ws.data(), 0, ws_bytes));
  const ce::PagedBatch batch{descs.as<KvSeqDesc>(), tdev.as<std::int32_t>(), 1, 256, status.as<std::int32_t>()};
  ce::paged_kv_attention(l, layer, batch, rows, kHeads, out.data(), hd, DType::f32, ws.data(), ws_bytes, nullptr);
  EXPECT_LOWBIT_ERROR(ce::paged_kv_check_status(status.as<std::int32_t>(), nullptr), "page-table entry outside");
  ce::paged_kv_check_status(status.as<std::int32_t>(), nullptr);
  // Host-side checks of the call.
  EXPECT_LOWBIT_ERROR(ce::paged_kv_attention(l, layer, ce::PagedBatch{batch.descs, batch.tables, 1, 257, nullptr},
                                             rows, kHeads, out.data(), hd, DType::f32, ws.data(), ws_bytes, nullptr),
                      "max_length 257");
  EXPECT_LOWBIT_ERROR(ce::paged_kv_attention(l, layer, batch, rows, kHeads, out.data(), hd, DType::f32, ws.data(), 16,
                                             nullptr),
                      "workspace of 16 bytes");
  EXPECT_LOWBIT_ERROR(ce::paged_kv_append(l, layer, batch, ce::BatchRows{rows_dev.data(), ld, 8, 16}, kHeads, nullptr),
                      "paged_kv_append: rows of ld");
}

}  // namespace
}  // namespace lowbit::test

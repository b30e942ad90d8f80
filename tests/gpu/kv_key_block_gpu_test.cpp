// Key blocks on the GPU (core/kv_layout.h; the engine's --kv-key-block): the append
// (kv_append, kv_append_at by device position, kv_append_rows_in_order over chunks)
// writes the CPU twin's bytes exactly
// (FP16 slots, the staging ring, codes by position, per block and channel f16 scales and
// mins, V per token), and the decode attention (kv_attention, kv_attention_at, the
// prefill's kv_attend_rows_one_by_one) matches the twin's attention in double, for every
// quantizing policy, B = 32 and 64, head_dim 64 and 128, GQA groups 1, 3 and 4, lengths
// inside the first block, at a block's end and mid-block. Buffers nothing wrote hold
// poison, outputs are poisoned first. kv_key_block_twin_test ties the twin to the
// engine's KvCache.
//
// Tolerance, per output element: that of kv_cache_gpu_test's simt kernel (the kernel
// decodes a blocked key to the twin's value, f16(q s + min) by one rounding, then the same
// f32 dot product, softmax and sums): Vmax ((D + 4) 2u Smax + 2^-15), plus 2^-11 |o| for
// an f16 output. The tensor-core kernel (mma_swap, automatic's choice for GQA groups up to
// 8 and key blocks of a multiple of 16) decodes the same f16 keys (HFMA2) and scores them
// on the tensor cores (exact products, f32 sums), so the same bound, plus mma_swap's f16
// weights: Vmax 2^-10 (kv_cache_gpu_test).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "common/expect_error.h"
#include "common/gpu.h"
#include "common/kv_twin.h"
#include "common/poison.h"
#include "common/random.h"
#include "core/device_buffer.h"
#include "cuda/flash/flash_cuda.h"
#include "cuda/kv/kv_cuda.h"
#include "engine/gpu_kv_storage.h"
#include "formats/float16.h"

namespace lowbit::test {
namespace {

namespace ce = cuda::kv;

using Policy = QuantizingPolicy;
constexpr const auto& kPolicies = kQuantizingPolicies;

constexpr std::int64_t kSink = 5, kWindow = 11;

ce::KvLayerShape blocked_shape(const Policy& p, std::int64_t hkv, std::int64_t d, std::int64_t b,
                               std::int64_t max_tokens) {
  return core::with_key_block(kv_shape(p.policy, hkv, d, kSink, kWindow, p.bits, max_tokens), b);
}

// One layer's device buffers with K's staging ring, poisoned as the twin's unwritten ones.
struct BlockedLayer {
  struct Part {
    core::DeviceBuffer f16, codes, scales, mins, staged;
    std::vector<core::DeviceBuffer*> all() { return {&f16, &codes, &scales, &mins, &staged}; }
  };
  Part k, v;
  ce::KvLayerBuffers dev;

  explicit BlockedLayer(const ce::KvLayerShape& s) {
    for (auto [part, view, is_k] : {std::tuple{&k, &dev.k, true}, std::tuple{&v, &dev.v, false}}) {
      const std::size_t params = (is_k ? s.key_param_count() : s.param_count()) * ce::KvLayerShape::kParamBytes;
      part->f16 = core::DeviceBuffer(s.f16_bytes());
      part->codes = core::DeviceBuffer(s.code_bytes_total());
      part->scales = core::DeviceBuffer(params);
      part->mins = core::DeviceBuffer(s.has_mins() ? params : 0);
      part->staged = core::DeviceBuffer(is_k ? s.staged_bytes() : 0);
      view->f16 = part->f16.as<std::uint16_t>();
      view->codes = part->codes.as<std::uint8_t>();
      view->scales = part->scales.as<std::uint16_t>();
      view->mins = part->mins.as<std::uint16_t>();
      view->staged = part->staged.as<std::uint16_t>();
    }
  }
  void poison() {
    for (Part* p : {&k, &v}) {
      for (core::DeviceBuffer* b : p->all()) {
        const int byte = b == &p->codes ? kCodePoison : kFloatPoison;
        if (b->bytes()) LOWBIT_CUDA_CHECK(cudaMemset(b->data(), byte, b->bytes()));
      }
    }
  }
  void upload(const KvTwin& t) {
    for (auto [p, h] : {std::pair{&k, &t.k}, std::pair{&v, &t.v}}) {
      const void* src[] = {h->f16.data(), h->codes.data(), h->scales.data(), h->mins.data(), h->staged.data()};
      const std::vector<core::DeviceBuffer*> bufs = p->all();
      for (std::size_t i = 0; i < bufs.size(); ++i) {
        if (bufs[i]->bytes()) {
          LOWBIT_CUDA_CHECK(cudaMemcpy(bufs[i]->data(), src[i], bufs[i]->bytes(), cudaMemcpyHostToDevice));
        }
      }
    }
  }
};

long long first_difference(const core::DeviceBuffer& d, const void* host, std::size_t host_bytes) {
  if (d.bytes() != host_bytes) return -2;
  const std::vector<std::uint8_t> got = download<std::uint8_t>(d.data(), d.bytes());
  const auto* want = static_cast<const std::uint8_t*>(host);
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) return static_cast<long long>(i);
  }
  return -1;
}

void expect_same_bytes(BlockedLayer& layer, const KvTwin& twin) {
  for (auto [p, h, name] : {std::tuple{&layer.k, &twin.k, "K"}, std::tuple{&layer.v, &twin.v, "V"}}) {
    EXPECT_EQ(first_difference(p->f16, h->f16.data(), h->f16.size() * 2), -1) << name << " FP16 slots";
    EXPECT_EQ(first_difference(p->codes, h->codes.data(), h->codes.size()), -1) << name << " codes";
    EXPECT_EQ(first_difference(p->scales, h->scales.data(), h->scales.size() * 2), -1) << name << " scales";
    EXPECT_EQ(first_difference(p->mins, h->mins.data(), h->mins.size() * 2), -1) << name << " mins";
    EXPECT_EQ(first_difference(p->staged, h->staged.data(), h->staged.size() * 2), -1) << name << " staging ring";
  }
}

core::DeviceBuffer to_device(const std::vector<std::uint16_t>& x) {
  core::DeviceBuffer d(x.size() * 2);
  LOWBIT_CUDA_CHECK(cudaMemcpy(d.data(), x.data(), d.bytes(), cudaMemcpyHostToDevice));
  return d;
}

// Lengths ending in the first block's body, at a block's last position and mid-block
// (selective counts its body after the sink and window).
std::vector<std::int64_t> lengths_of(const Policy& p, std::int64_t b) {
  const std::int64_t base = p.policy == KvPolicy::selective ? kSink + kWindow : 0;
  return {1, base + b - 1, base + b, base + 2 * b + b / 2 + 3};
}

// How a test appends: kv_append by host position; kv_append_at by a device position with
// history_complete, as the engine's decode graph does; kv_append_rows_in_order over
// chunks of 37 rows (the prefill's pieces); kv_append_rows over chunks of 37 rows (the
// prefill's whole chunks: the rows in parallel, the blocks they complete after them).
enum class AppendForm { host, device, rows_in_order, rows };
const char* form_name(AppendForm f) {
  return f == AppendForm::host            ? "kv_append"
         : f == AppendForm::device        ? "kv_append_at"
         : f == AppendForm::rows_in_order ? "kv_append_rows_in_order"
                                          : "kv_append_rows";
}

// Appends tokens 0 .. length - 1 of k, v (f16 [length][H][D]) in order.
void append_all(const ce::KvLayerShape& s, const ce::KvLayerBuffers& layer, std::int64_t length,
                const core::DeviceBuffer& k, const core::DeviceBuffer& v, AppendForm form) {
  const std::int64_t row = s.kv_heads * s.head_dim;
  if (form == AppendForm::rows_in_order || form == AppendForm::rows) {
    // The chunk rows [k | v] of every position, 37 at a time.
    const std::vector<std::uint16_t> kh = download<std::uint16_t>(k.data(), k.bytes() / 2);
    const std::vector<std::uint16_t> vh = download<std::uint16_t>(v.data(), v.bytes() / 2);
    std::vector<std::uint16_t> rows(static_cast<std::size_t>(2 * length * row));
    for (std::int64_t p = 0; p < length; ++p) {
      std::copy(kh.begin() + p * row, kh.begin() + (p + 1) * row, rows.begin() + 2 * p * row);
      std::copy(vh.begin() + p * row, vh.begin() + (p + 1) * row, rows.begin() + (2 * p + 1) * row);
    }
    core::DeviceBuffer rows_d(rows.size() * 2), snapshot(ce::ring_snapshot_bytes(s));
    LOWBIT_CUDA_CHECK(cudaMemcpy(rows_d.data(), rows.data(), rows_d.bytes(), cudaMemcpyHostToDevice));
    for (std::int64_t p0 = 0; p0 < length; p0 += 37) {
      const ce::ChunkRows c{rows_d.as<std::uint16_t>() + 2 * p0 * row, std::min<std::int64_t>(37, length - p0),
                            2 * row, 0, row, p0};
      if (form == AppendForm::rows) {
        ce::kv_append_rows(s, layer, c, snapshot.data(), nullptr);
      } else {
        ce::kv_append_rows_in_order(s, layer, c, nullptr);
      }
    }
    LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
    return;
  }
  const bool by_device = form == AppendForm::device;
  core::DeviceBuffer pos_d(4);
  for (std::int64_t pos = 0; pos < length; ++pos) {
    const std::uint16_t* kp = k.as<std::uint16_t>() + pos * row;
    const std::uint16_t* vp = v.as<std::uint16_t>() + pos * row;
    if (by_device) {
      const auto p32 = static_cast<std::int32_t>(pos);
      LOWBIT_CUDA_CHECK(cudaMemcpy(pos_d.data(), &p32, 4, cudaMemcpyHostToDevice));
      ce::kv_append_at(s, layer, pos_d.as<std::int32_t>(), kp, vp, nullptr, nullptr, /*history_complete=*/true);
    } else {
      ce::kv_append(s, layer, pos, kp, vp, nullptr);
    }
  }
  LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
}

class KvKeyBlockGpu : public GpuTest {};

TEST_F(KvKeyBlockGpu, AppendWritesTheTwinsBytes) {
  LOWBIT_TEST_RNG(rng);
  for (const Policy& p : kPolicies) {
    for (const std::int64_t d : {64, 128}) {
      for (const std::int64_t hkv : {1, 3}) {
        for (const std::int64_t b : {32, 64}) {
          for (const AppendForm form :
               {AppendForm::host, AppendForm::device, AppendForm::rows_in_order, AppendForm::rows}) {
            const std::int64_t length = lengths_of(p, b).back();
            SCOPED_TRACE(std::string(p.name) + " D " + std::to_string(d) + " kv_heads " + std::to_string(hkv) +
                         " B " + std::to_string(b) + " " + form_name(form));
            const ce::KvLayerShape s = blocked_shape(p, hkv, d, b, length);
            const auto k = random_f16(rng, length * hkv, d, 1.0f), v = random_f16(rng, length * hkv, d, 2.0f);
            const KvTwin twin = build_kv_twin(s, length, k, v);
            const core::DeviceBuffer kd = to_device(k), vd = to_device(v);
            BlockedLayer layer(s);
            layer.poison();
            append_all(s, layer.dev, length, kd, vd, form);
            expect_same_bytes(layer, twin);
            if (HasFailure()) return;
          }
        }
      }
    }
  }
}

// Whether out (n_heads x d, f32 or f16) is within the tolerance of the twin's attention.
// f16_p: mma_swap's weights rounded to f16 (the Vmax 2^-10 term). flash: the prefill's
// flash kernel, whose decoded K and V values and weights are f16 (kv_cache_gpu_test's
// FlashOverTheMixedCacheMatchesTheTwinAndTheRowsKernels bound: 2 (Vmax (2^-11 + 2^-11 +
// 2^-10 Smax + 2^-15) + 2^-11 |o|)).
::testing::AssertionResult close_to_twin(const std::vector<std::uint8_t>& raw, DType dtype, const TwinAttention& ref,
                                         std::int64_t n_heads, std::int64_t d, bool f16_p = false,
                                         bool flash = false) {
  int bad = 0;
  std::string first;
  for (std::int64_t i = 0; i < n_heads * d; ++i) {
    const auto e = static_cast<std::size_t>(i);
    const std::size_t h = e / static_cast<std::size_t>(d);
    float got;
    if (dtype == DType::f32) {
      std::memcpy(&got, raw.data() + 4 * e, 4);
    } else {
      std::uint16_t bits;
      std::memcpy(&bits, raw.data() + 2 * e, 2);
      got = formats::half_to_float({bits});
    }
    const double tol =
        flash ? 2.0 * (ref.vmax[h] * (0x1p-11 + 0x1p-11 + 0x1p-10 * ref.smax[h] + 0x1p-15) +
                       0x1p-11 * std::fabs(ref.out[e])) +
                    1e-6
              : ref.vmax[h] * (2.0 * static_cast<double>(d + 4) * 0x1p-24 * ref.smax[h] + 0x1p-15 +
                               (f16_p ? 0x1p-10 : 0.0)) +
                    (dtype == DType::f16 ? 0x1p-11 * std::fabs(ref.out[e]) : 0.0) + 1e-7;
    const double err = std::fabs(static_cast<double>(got) - ref.out[e]);
    if (!(err <= tol) && bad++ == 0) {
      first = "head " + std::to_string(h) + " channel " + std::to_string(i % d) + ": got " + std::to_string(got) +
              ", want " + std::to_string(ref.out[e]) + " (tolerance " + std::to_string(tol) + ")";
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " elements out of tolerance, first " << first;
}

struct Heads {
  std::int64_t h, hkv;
};

// A decode case: random keys, values (N(0, 1) with loud channels) and queries (gain 1.5)
// of a cache of `length` positions, the twin's cache and its attention in double, and
// the cache and q on the device.
struct BlockedCase {
  ce::KvLayerShape s;
  std::vector<std::uint16_t> q_host;
  KvTwin twin;
  TwinAttention ref;
  BlockedLayer layer;
  core::DeviceBuffer q;

  BlockedCase(Rng& rng, const Policy& p, Heads hh, std::int64_t d, std::int64_t b, std::int64_t length)
      : s(blocked_shape(p, hh.hkv, d, b, length)), layer(s) {
    const auto k = random_f16(rng, length * hh.hkv, d, 1.0f), v = random_f16(rng, length * hh.hkv, d, 1.0f);
    q_host = random_f16(rng, hh.h, d, 1.5f);
    twin = build_kv_twin(s, length, k, v);
    ref = twin_attention(twin, q_host, hh.h);
    layer.upload(twin);
    q = to_device(q_host);
  }
};

// One decode attention of a key-blocked cache into a poisoned, guarded out: kv_attention
// (two launches; split_len > 0 replaces the plan's split length) or, graph, kv_attention_at
// (by device position, fused combine). The output's bytes.
std::vector<std::uint8_t> attend(const BlockedCase& c, std::int64_t n_heads, DType out_dtype, bool graph,
                                 ce::AttentionKernel kernel, std::int64_t split_len = 0) {
  const ce::KvLayerShape& s = c.s;
  const KvTwin& twin = c.twin;
  const BlockedLayer& layer = c.layer;
  const core::DeviceBuffer& q = c.q;
  const std::int64_t d = s.head_dim;
  GuardedBuffer out(static_cast<std::size_t>(n_heads * d) * dtype_size(out_dtype));
  out.poison(kFloatPoison);
  if (graph) {
    const std::size_t ws_bytes = ce::kv_attention_workspace_bound(s, n_heads, twin.length);
    GuardedBuffer ws(ws_bytes);
    ws.poison(kFloatPoison);
    LOWBIT_CUDA_CHECK(cudaMemset(ws.data(), 0, ws_bytes));  // the fused combine's counters
    core::DeviceBuffer pos_d(4);
    const auto last = static_cast<std::int32_t>(twin.length - 1);
    LOWBIT_CUDA_CHECK(cudaMemcpy(pos_d.data(), &last, 4, cudaMemcpyHostToDevice));
    ce::kv_attention_at(s, layer.dev, pos_d.as<std::int32_t>(), twin.length, q.data(), n_heads, out.data(), out_dtype,
                        ws.data(), ws_bytes, nullptr, /*history_complete=*/false, kernel);
    LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_TRUE(ws.guards_intact("workspace"));
  } else {
    const std::int64_t visible = twin.span.visible(s);
    const std::int64_t splits = split_len > 0 ? (visible + split_len - 1) / split_len
                                              : ce::kv_attention_plan(s, twin.span, n_heads, kernel).splits;
    const std::size_t ws_bytes = core::decode_workspace_bytes(n_heads, d, splits);
    GuardedBuffer ws(ws_bytes);
    ws.poison(kFloatPoison);
    ce::kv_attention(s, layer.dev, twin.span, q.data(), n_heads, out.data(), out_dtype, ws.data(), ws_bytes, nullptr,
                     kernel, split_len);
    LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_TRUE(ws.guards_intact("workspace"));
  }
  EXPECT_TRUE(out.guards_intact("out"));
  return out.download_bytes();
}

// Whether two outputs (n_heads x d, f32 or f16) differ by at most the sum of their
// tolerances against the twin (simt's, and mma_swap's with f16 weights).
::testing::AssertionResult close_to_each_other(const std::vector<std::uint8_t>& a, const std::vector<std::uint8_t>& b,
                                               DType dtype, const TwinAttention& ref, std::int64_t n_heads,
                                               std::int64_t d) {
  auto value = [&](const std::vector<std::uint8_t>& raw, std::size_t e) {
    if (dtype == DType::f32) {
      float f;
      std::memcpy(&f, raw.data() + 4 * e, 4);
      return static_cast<double>(f);
    }
    std::uint16_t bits;
    std::memcpy(&bits, raw.data() + 2 * e, 2);
    return static_cast<double>(formats::half_to_float({bits}));
  };
  for (std::int64_t i = 0; i < n_heads * d; ++i) {
    const auto e = static_cast<std::size_t>(i);
    const std::size_t h = e / static_cast<std::size_t>(d);
    const double twin_tol = ref.vmax[h] * (2.0 * static_cast<double>(d + 4) * 0x1p-24 * ref.smax[h] + 0x1p-15) +
                            (dtype == DType::f16 ? 0x1p-11 * std::fabs(ref.out[e]) : 0.0) + 1e-7;
    const double tol = 2.0 * twin_tol + ref.vmax[h] * 0x1p-10;
    const double x = value(a, e), y = value(b, e);
    if (!(std::fabs(x - y) <= tol)) {
      return ::testing::AssertionFailure() << "head " << h << " channel " << i % d << ": mma_swap " << x << ", simt "
                                           << y << " (tolerance " << tol << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

// kv_attention (two launches) and kv_attention_at (by device position, fused combine)
// over a cache the twin wrote, against the twin in double.
TEST_F(KvKeyBlockGpu, AttentionMatchesTheTwinInDouble) {
  LOWBIT_TEST_RNG(rng);
  for (const Policy& p : kPolicies) {
    for (const std::int64_t d : {64, 128}) {
      for (const Heads hh : {Heads{9, 3}, Heads{8, 2}, Heads{2, 2}}) {
        for (const std::int64_t b : {32, 64}) {
          std::vector<std::int64_t> lengths = lengths_of(p, b);
          lengths.push_back(1500 + b / 2);  // several splits
          for (const std::int64_t length : sanitizer_subset(lengths, {1, 3})) {
            for (const DType out_dtype : {DType::f32, DType::f16}) {
              for (const bool graph : {false, true}) {
                SCOPED_TRACE(std::string(p.name) + " D " + std::to_string(d) + " H " + std::to_string(hh.h) + "/" +
                             std::to_string(hh.hkv) + " B " + std::to_string(b) + " length " +
                             std::to_string(length) + " out " + dtype_name(out_dtype) +
                             (graph ? " kv_attention_at" : " kv_attention"));
                const BlockedCase bc(rng, p, hh, d, b, length);
                const auto out = attend(bc, hh.h, out_dtype, graph, ce::AttentionKernel::automatic);
                // automatic: mma_swap (groups up to 8, key blocks of a multiple of 16).
                EXPECT_TRUE(close_to_twin(out, out_dtype, bc.ref, hh.h, d, /*f16_p=*/true));
                if (HasFailure()) return;
              }
            }
          }
        }
      }
    }
  }
}

// The tensor-core kernel (mma_swap, named and as automatic's choice) over key blocks
// against the twin in double and against the simt kernel: every policy, D 64 and 128,
// GQA groups 1, 4 and 8, B 32 and 64, lengths 1 (FP16 only), 31, 32, 33 (the open block
// empty and partly full around the first block; selective: the same offsets past its
// sink and window, and its blocks start at the sink of 5, so tiles of 16 cross them),
// 1000 and 4097 (several splits; 4097 one position in the last), the two-launch and the
// graph forms, f32 and f16 outputs, and a split length of 48 (three tiles a split: a
// warp without tiles). Outputs and workspaces are poisoned and guarded.
TEST_F(KvKeyBlockGpu, TensorCoreKernelMatchesTheTwinAndSimt) {
  LOWBIT_TEST_RNG(rng);
  for (const Policy& p : kPolicies) {
    for (const std::int64_t d : {64, 128}) {
      for (const Heads hh : {Heads{2, 2}, Heads{8, 2}, Heads{16, 2}}) {
        for (const std::int64_t b : {32, 64}) {
          const std::int64_t base = p.policy == KvPolicy::selective ? kSink + kWindow : 0;
          std::vector<std::int64_t> lengths = {1, 31, 32, 33, 1000, 4097};
          if (base > 0) {
            for (const std::int64_t extra : {b - 1, b, b + 1, 2 * b, 2 * b + 7}) lengths.push_back(base + extra);
          }
          for (const std::int64_t length : sanitizer_subset(lengths, {0, 3, 5})) {
            SCOPED_TRACE(std::string(p.name) + " D " + std::to_string(d) + " H " + std::to_string(hh.h) + "/" +
                         std::to_string(hh.hkv) + " B " + std::to_string(b) + " length " + std::to_string(length));
            const BlockedCase bc(rng, p, hh, d, b, length);
            const TwinAttention& ref = bc.ref;
            for (const DType out_dtype : {DType::f32, DType::f16}) {
              for (const bool graph : {false, true}) {
                SCOPED_TRACE(std::string("out ") + dtype_name(out_dtype) + (graph ? " kv_attention_at" : " kv_attention"));
                const auto simt = attend(bc, hh.h, out_dtype, graph, ce::AttentionKernel::simt);
                const auto swap = attend(bc, hh.h, out_dtype, graph, ce::AttentionKernel::mma_swap);
                const auto automatic =
                    attend(bc, hh.h, out_dtype, graph, ce::AttentionKernel::automatic);
                EXPECT_TRUE(close_to_twin(simt, out_dtype, ref, hh.h, d));
                EXPECT_TRUE(close_to_twin(swap, out_dtype, ref, hh.h, d, /*f16_p=*/true));
                EXPECT_TRUE(close_to_each_other(swap, simt, out_dtype, ref, hh.h, d));
                EXPECT_EQ(automatic, swap) << "automatic should run mma_swap, bit for bit";
                if (!graph && out_dtype == DType::f32) {
                  const auto short_splits =
                      attend(bc, hh.h, out_dtype, false, ce::AttentionKernel::mma_swap, 48);
                  EXPECT_TRUE(close_to_twin(short_splits, out_dtype, ref, hh.h, d, /*f16_p=*/true)) << "split_len 48";
                }
                if (HasFailure()) return;
              }
            }
          }
        }
      }
    }
  }
}

// One prefill of a key-blocked cache (kv_prefill_key_blocks, `kernel`): rows [pos0,
// pos0 + rows) after the history appended one token at a time; the cache bytes are the
// twin's after the chunk, and each checked row's output (every `row_step`-th and the last
// two) matches the twin's attention at its length (the tensor cores' tolerance but for
// simt). Returns whether the flash kernel took the chunk.
bool check_prefill(Rng& rng, const Policy& p, const Heads& hh, std::int64_t d, std::int64_t b, std::int64_t pos0,
                   std::int64_t rows, ce::AttentionKernel kernel, std::int64_t row_step) {
  const std::int64_t length = pos0 + rows;
  const ce::KvLayerShape s = blocked_shape(p, hh.hkv, d, b, length);
  const std::int64_t kv = hh.hkv * d, qdim = hh.h * d, ld = qdim + 2 * kv;
  const auto k = random_f16(rng, length * hh.hkv, d, 1.0f), v = random_f16(rng, length * hh.hkv, d, 1.0f);
  const auto q = random_f16(rng, rows * hh.h, d, 1.5f);
  // The chunk as the QKV GEMM writes it: [rows][q | k | v].
  std::vector<std::uint16_t> chunk(static_cast<std::size_t>(rows * ld));
  for (std::int64_t r = 0; r < rows; ++r) {
    std::uint16_t* dst = chunk.data() + r * ld;
    std::memcpy(dst, q.data() + r * qdim, static_cast<std::size_t>(qdim) * 2);
    std::memcpy(dst + qdim, k.data() + (pos0 + r) * kv, static_cast<std::size_t>(kv) * 2);
    std::memcpy(dst + qdim + kv, v.data() + (pos0 + r) * kv, static_cast<std::size_t>(kv) * 2);
  }
  BlockedLayer layer(s);
  layer.poison();
  const core::DeviceBuffer kd = to_device(k), vd = to_device(v), chunk_d = to_device(chunk);
  append_all(s, layer.dev, pos0, kd, vd, AppendForm::host);
  // Workspace for 3 rows a launch: pieces of more rows take several launches.
  const std::size_t ws_bytes = ce::kv_attention_rows_workspace(s, hh.h, 3, length);
  GuardedBuffer ws(ws_bytes), out(static_cast<std::size_t>(rows * qdim) * 2);
  GuardedBuffer snapshot(ce::ring_snapshot_bytes(s));
  ws.poison(kFloatPoison);
  out.poison(kFloatPoison);
  snapshot.poison(kFloatPoison);
  const ce::ChunkRows c{chunk_d.data(), rows, ld, qdim, qdim + kv, pos0};
  void* snap = snapshot.bytes() ? snapshot.data() : nullptr;
  const bool flash = kernel == ce::AttentionKernel::automatic &&
                     ce::kv_attention_rows_flash(s, layer.dev, c, snap, hh.h, out.data(), qdim);
  ce::kv_prefill_key_blocks(s, layer.dev, c, snap, hh.h, out.data(), qdim, ws.data(), ws_bytes, nullptr, kernel);
  LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_TRUE(ws.guards_intact("workspace"));
  EXPECT_TRUE(out.guards_intact("out"));
  EXPECT_TRUE(snapshot.guards_intact("snapshot"));
  expect_same_bytes(layer, build_kv_twin(s, length, k, v));
  const std::vector<std::uint8_t> raw = out.download_bytes();
  for (std::int64_t r = 0; r < rows; ++r) {
    if (r % row_step != 0 && r < rows - 2) continue;
    const KvTwin twin = build_kv_twin(s, pos0 + r + 1, k, v);
    const std::vector<std::uint16_t> qr(q.begin() + r * qdim, q.begin() + (r + 1) * qdim);
    const std::vector<std::uint8_t> row(raw.begin() + r * qdim * 2, raw.begin() + (r + 1) * qdim * 2);
    EXPECT_TRUE(close_to_twin(row, DType::f16, twin_attention(twin, qr, hh.h), hh.h, d, false,
                              kernel != ce::AttentionKernel::simt))
        << "row " << r;
  }
  return flash;
}

// The prefill of a key-blocked cache (the engine's attend_chunk, kv_prefill_key_blocks):
// a chunk of rows at pos0 that crosses two block completions, in pieces (simt), and the
// same chunk whole where the flash kernel takes it (automatic).
TEST_F(KvKeyBlockGpu, PrefillMatchesTheTwin) {
  LOWBIT_TEST_RNG(rng);
  const Heads hh{9, 3};
  for (const Policy& p : kPolicies) {
    for (const std::int64_t d : {64, 128}) {
      for (const std::int64_t b : {32, 64}) {
        for (const ce::AttentionKernel kernel : {ce::AttentionKernel::simt, ce::AttentionKernel::automatic}) {
          const std::int64_t pos0 = kSink + kWindow + b - 7, rows = b + 9 + (b == 32 ? 64 : 0);
          SCOPED_TRACE(std::string(p.name) + " D " + std::to_string(d) + " B " + std::to_string(b) +
                       (kernel == ce::AttentionKernel::simt ? " simt" : " automatic"));
          check_prefill(rng, p, hh, d, b, pos0, rows, kernel, 1);
          if (HasFailure()) return;
        }
      }
    }
  }
}

// The flash kernel's key blocks (4-bit bodies; blocks of 16 .. 128 keys and multiples of
// its 128-key tile) over whole chunks of several query blocks of 128 / 192 rows: from the
// first position (no snapshot read), from inside the sink + window, and far in (body
// tiles before the chunk, the open block's keys in the staging ring's snapshot); GQA
// groups 3 and 1. The simt pieces are the same test's reference form above.
TEST_F(KvKeyBlockGpu, FlashPrefillOfWholeChunksMatchesTheTwin) {
  if (!cuda::flash::flash_wgmma_available()) GTEST_SKIP() << "the flash wgmma kernel needs Hopper and an sm_90a build";
  LOWBIT_TEST_RNG(rng);
  for (const Policy& p : kPolicies) {
    if (p.bits != 4) continue;
    for (const std::int64_t d : {64, 128}) {
      for (const std::int64_t b : {16, 32, 128, 256}) {
        for (const Heads hh : {Heads{9, 3}, Heads{4, 4}}) {
          for (auto [pos0, rows] : {std::pair<std::int64_t, std::int64_t>{0, 300}, {9, 200}, {700 + b / 2 + 3, 331}}) {
            SCOPED_TRACE(std::string(p.name) + " D " + std::to_string(d) + " B " + std::to_string(b) + " H " +
                         std::to_string(hh.h) + "/" + std::to_string(hh.hkv) + " chunk at " + std::to_string(pos0) +
                         " of " + std::to_string(rows));
            EXPECT_TRUE(check_prefill(rng, p, hh, d, b, pos0, rows, ce::AttentionKernel::automatic, 13))
                << "the flash kernel did not take the chunk";
            if (HasFailure()) return;
          }
        }
      }
    }
  }
}

// The tensor-core rows kernel's key blocks (kv_prefill_key_blocks, mma; INT8 and INT4,
// blocks of 16 .. 64 including 48, which tiles of 64 meet unaligned) over whole chunks:
// the body view's K dequantized by channel with each block's parameters, the open view's
// K from the chunk, the ring's snapshot or the staging ring's snapshot; from the first
// position, from inside the sink + window, and far in; GQA groups 3, 1 and 8.
TEST_F(KvKeyBlockGpu, TensorCorePrefillOfWholeChunksMatchesTheTwin) {
  LOWBIT_TEST_RNG(rng);
  for (const Policy& p : kPolicies) {
    for (const std::int64_t d : {64, 128}) {
      for (const std::int64_t b : sanitizer_subset<std::int64_t>({16, 48, 64}, {1})) {
        for (const Heads hh : sanitizer_subset<Heads>({Heads{9, 3}, Heads{4, 4}, Heads{16, 2}}, {0})) {
          for (auto [pos0, rows] : {std::pair<std::int64_t, std::int64_t>{0, 150}, {9, 100}, {700 + b / 2 + 3, 131}}) {
            SCOPED_TRACE(std::string(p.name) + " D " + std::to_string(d) + " B " + std::to_string(b) + " H " +
                         std::to_string(hh.h) + "/" + std::to_string(hh.hkv) + " chunk at " + std::to_string(pos0) +
                         " of " + std::to_string(rows));
            check_prefill(rng, p, hh, d, b, pos0, rows, ce::AttentionKernel::mma, 7);
            if (HasFailure()) return;
          }
        }
      }
    }
  }
}

// What the GPU does not take with key blocks is refused by name.
TEST_F(KvKeyBlockGpu, UnsupportedFormsAreRefusedByName) {
  const Policy p = kPolicies[3];  // int4
  const ce::KvLayerShape s = blocked_shape(p, 2, 64, 32, 100);
  BlockedLayer layer(s);
  layer.poison();
  core::DeviceBuffer q(2 * 64 * 2), out(2 * 64 * 4), ws(1 << 20), chunk(4 * 6 * 64 * 2);
  const ce::DecodeSpan span = ce::decode_span(s, 40);
  EXPECT_LOWBIT_ERROR(ce::kv_attention(s, layer.dev, span, q.data(), 2, out.data(), DType::f32, ws.data(), ws.bytes(),
                                       nullptr, ce::AttentionKernel::mma),
                      "read by the simt and mma_swap kernels, not mma");
  // mma_swap: key blocks of a multiple of 16 positions, GQA groups up to 8.
  const ce::KvLayerShape odd_block = blocked_shape(p, 2, 64, 40, 100);
  BlockedLayer odd_layer(odd_block);
  odd_layer.poison();
  EXPECT_LOWBIT_ERROR(ce::kv_attention(odd_block, odd_layer.dev, ce::decode_span(odd_block, 40), q.data(), 2,
                                       out.data(), DType::f32, ws.data(), ws.bytes(), nullptr,
                                       ce::AttentionKernel::mma_swap),
                      "got --kv-key-block 40 and a group of 1");
  core::DeviceBuffer q18(18 * 64 * 2), out18(18 * 64 * 4);
  EXPECT_LOWBIT_ERROR(ce::kv_attention(s, layer.dev, span, q18.data(), 18, out18.data(), DType::f32, ws.data(),
                                       ws.bytes(), nullptr, ce::AttentionKernel::mma_swap),
                      "got --kv-key-block 32 and a group of 9");
  // Rows 30..33: the append of 31 completes the first block, before the last row.
  const ce::ChunkRows c{chunk.data(), 4, 6 * 64, 2 * 64, 4 * 64, 30};
  EXPECT_LOWBIT_ERROR(ce::kv_append_rows(s, layer.dev, c, nullptr, nullptr), "the staging ring need a snapshot buffer");
  EXPECT_LOWBIT_ERROR(ce::kv_attention_rows(s, layer.dev, c, nullptr, 2, out.data(), 2 * 64, ws.data(), ws.bytes(),
                                            nullptr, ce::AttentionKernel::simt),
                      "the row at 31 completes a block before the chunk's last row (33)");
  EXPECT_EQ(s.next_block_completion(0), 31);
  EXPECT_EQ(s.next_block_completion(31), 31);
  EXPECT_EQ(s.next_block_completion(32), 63);
  // The tensor-core rows kernel: blocks of 16 or more (a tile of 64 positions meets at
  // most five), refused before anything is appended.
  const ce::KvLayerShape small_block = blocked_shape(p, 2, 64, 8, 100);
  BlockedLayer small_layer(small_block);
  small_layer.poison();
  core::DeviceBuffer snap(ce::ring_snapshot_bytes(small_block));
  EXPECT_LOWBIT_ERROR(ce::kv_prefill_key_blocks(small_block, small_layer.dev, c, snap.data(), 2, out.data(), 2 * 64,
                                                ws.data(), ws.bytes(), nullptr, ce::AttentionKernel::mma),
                      "the mma kernel takes key blocks of 16 or more and GQA groups of up to 64, got 8 and 1");
  ce::KvLayerBuffers no_ring = layer.dev;
  no_ring.k.staged = nullptr;
  EXPECT_LOWBIT_ERROR(ce::kv_append(s, no_ring, 0, q.data(), q.data(), nullptr), "staging ring");
  engine::ModelConfig config;
  config.n_kv_heads = 2;
  config.head_dim = 64;
  engine::KvCacheOptions options;
  options.policy = KvPolicy::int4;
  options.kv_key_block = 32;
  // The paged cache: blocks of a multiple of 16 (its pages) and mma_swap's GQA groups.
  config.n_heads = 18;
  EXPECT_LOWBIT_ERROR(engine::check_gpu_kv_options(config, options, "gpu batch engine", /*paged=*/true),
                      "GQA groups of up to 8 query heads (the model has 9)");
  config.n_heads = 8;
  EXPECT_FALSE(engine::check_gpu_kv_options(config, options, "gpu batch engine", /*paged=*/true));
  options.kv_key_block = 24;
  EXPECT_LOWBIT_ERROR(engine::check_gpu_kv_options(config, options, "gpu batch engine", /*paged=*/true),
                      "--kv-key-block 24 on the paged GPU cache");
  options.kv_key_block = 32;
  EXPECT_FALSE(engine::check_gpu_kv_options(config, options, "gpu session", /*paged=*/false));
  LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace lowbit::test

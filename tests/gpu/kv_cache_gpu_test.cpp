// The GPU decode cache (src/cuda/kv): kv_append writes the CPU twin's buffers bit
// for bit (FP16 slots, and the codes / f16 scales / mins of cpu::kv_quantize()), and decode
// attention over the mixed cache matches the twin's attention in double, for every
// policy, lengths 1 .. 5000 (one to many splits), head_dim 64 / 128, GQA 9/3 and 32/8.
// Buffers nothing wrote hold poison (NaN, 0x5a codes), outputs are poisoned first.
//
// Tolerance, per output element (both sides read the same decoded values; u = 2^-24):
//   - each score is an f32 dot product of D terms with q pre-scaled by log2(e)/sqrt(D)
//     (one more rounding): |ds| <= E = (D + 4) u Smax, Smax = max_j sum_d |q_d k_jd| / sqrt(D);
//     a perturbation E of the scores moves the output by <= 2 E Vmax (first order);
//   - exp2f (2 ulp), the f32 sums of p v over a lane's positions (<= 64 terms a split),
//     the shuffle and block reductions and the combine over <= 100 splits: below
//     200 u relative to Vmax; we allow 2^-15 Vmax;
//   - an f16 output adds its rounding, 2^-11 |o|.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/kv_twin.h"
#include "common/gpu.h"
#include "common/poison.h"
#include "common/random.h"
#include "core/device_buffer.h"
#include "cuda/flash/flash_cuda.h"
#include "cuda/kv/kv_cuda.h"
#include "formats/float16.h"
#include "formats/hadamard.h"
#include "lowbit/kv_cache.h"

namespace lowbit::test {
namespace {

namespace ce = cuda::kv;
using lowbit::KvPolicy;

struct Case {
  KvPolicy policy;
  int bits;
  const char* name;
};
const Case kCases[] = {{KvPolicy::full, 0, "full"},
                       {KvPolicy::window, 0, "window"},
                       {KvPolicy::selective, 8, "selective INT8"},
                       {KvPolicy::selective, 4, "selective INT4"},
                       {KvPolicy::int8, 8, "int8"},
                       {KvPolicy::int4, 4, "int4"}};

constexpr std::int64_t kSink = 16, kWindow = 32;

// One layer's device buffers, poisoned as the twin's unwritten slots are.
struct DeviceLayer {
  struct Part {
    core::DeviceBuffer f16, codes, scales, mins;
  };
  Part k, v;
  ce::KvLayerBuffers dev;

  explicit DeviceLayer(const ce::KvLayerShape& s) {
    for (auto [part, view] : {std::pair{&k, &dev.k}, std::pair{&v, &dev.v}}) {
      part->f16 = core::DeviceBuffer(s.f16_bytes());
      part->codes = core::DeviceBuffer(s.code_bytes_total());
      part->scales = core::DeviceBuffer(s.param_count() * ce::KvLayerShape::kParamBytes);
      part->mins = core::DeviceBuffer(s.has_mins() ? s.param_count() * ce::KvLayerShape::kParamBytes : 0);
      view->f16 = part->f16.as<std::uint16_t>();
      view->codes = part->codes.as<std::uint8_t>();
      view->scales = part->scales.as<std::uint16_t>();
      view->mins = part->mins.as<std::uint16_t>();
    }
  }
  void poison() {
    for (Part* p : {&k, &v}) {
      for (auto [buf, byte] : {std::pair{&p->f16, kFloatPoison}, std::pair{&p->codes, kCodePoison},
                               std::pair{&p->scales, kFloatPoison}, std::pair{&p->mins, kFloatPoison}}) {
        if (buf->bytes()) LOWBIT_CUDA_CHECK(cudaMemset(buf->data(), byte, buf->bytes()));
      }
    }
  }
  void upload(const KvTwin& t) {
    for (auto [p, h] : {std::pair{&k, &t.k}, std::pair{&v, &t.v}}) {
      auto up = [](core::DeviceBuffer& d, const void* src) {
        if (d.bytes()) LOWBIT_CUDA_CHECK(cudaMemcpy(d.data(), src, d.bytes(), cudaMemcpyHostToDevice));
      };
      up(p->f16, h->f16.data());
      up(p->codes, h->codes.data());
      up(p->scales, h->scales.data());
      up(p->mins, h->mins.data());
    }
  }
};

// Index of the first differing byte, or -1.
long long first_difference(const core::DeviceBuffer& d, const void* host) {
  const std::vector<std::uint8_t> got = download<std::uint8_t>(d.data(), d.bytes());
  const auto* want = static_cast<const std::uint8_t*>(host);
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) return static_cast<long long>(i);
  }
  return -1;
}

// The device layer holds the twin's bytes: FP16 slots, codes, scales, mins of K and V.
void expect_same_buffers(const DeviceLayer& layer, const KvTwin& twin) {
  for (auto [p, h, name] : {std::tuple{&layer.k, &twin.k, "K"}, std::tuple{&layer.v, &twin.v, "V"}}) {
    EXPECT_EQ(first_difference(p->f16, h->f16.data()), -1) << name << " FP16 slots";
    EXPECT_EQ(first_difference(p->codes, h->codes.data()), -1) << name << " codes";
    EXPECT_EQ(first_difference(p->scales, h->scales.data()), -1) << name << " scales";
    EXPECT_EQ(first_difference(p->mins, h->mins.data()), -1) << name << " mins";
  }
}

class KvCacheGpu : public GpuTest {};

TEST_F(KvCacheGpu, AppendWritesTheCpuQuantizeBuffers) {
  LOWBIT_TEST_RNG(rng);
  const std::int64_t length = 300;
  for (const Case& c : kCases) {
    for (std::int64_t d : {64, 128}) {
      for (std::int64_t hkv : {3, 8}) {
        SCOPED_TRACE(std::string(c.name) + " D " + std::to_string(d) + " kv_heads " + std::to_string(hkv));
        const ce::KvLayerShape s = kv_shape(c.policy, hkv, d, kSink, kWindow, c.bits, length);
        const auto k = random_f16(rng, length * hkv, d, 1.0f), v = random_f16(rng, length * hkv, d, 2.0f);
        const KvTwin twin = build_kv_twin(s, length, k, v);
        core::DeviceBuffer kd(k.size() * 2), vd(v.size() * 2);
        LOWBIT_CUDA_CHECK(cudaMemcpy(kd.data(), k.data(), kd.bytes(), cudaMemcpyHostToDevice));
        LOWBIT_CUDA_CHECK(cudaMemcpy(vd.data(), v.data(), vd.bytes(), cudaMemcpyHostToDevice));
        DeviceLayer layer(s);
        layer.poison();
        for (std::int64_t pos = 0; pos < length; ++pos) {
          ce::kv_append(s, layer.dev, pos, kd.as<std::uint16_t>() + pos * hkv * d, vd.as<std::uint16_t>() + pos * hkv * d,
                        nullptr);
        }
        LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
        expect_same_buffers(layer, twin);
      }
    }
  }
}

// Each kernel (simt, mma, mma_swap) against the twin: every policy, head_dim 64 and 128,
// lengths from one token to several splits (4097: a last split of one position), GQA
// groups 3 and 4 everywhere and every group from 1 to 8 at two lengths (mma_swap also 9
// and 16, which run mma's math), a full cache of sink 5 and window 37, f32 and f16 outputs.
struct Heads {
  std::int64_t h, hkv;
};

struct AttentionCase {
  ce::AttentionKernel kernel;
  std::int64_t d;
  Heads heads;
  std::int64_t length;
  std::int64_t sink = kSink, window = kWindow;
};

std::vector<AttentionCase> attention_cases() {
  std::vector<AttentionCase> out;
  for (const auto kernel : {ce::AttentionKernel::simt, ce::AttentionKernel::mma, ce::AttentionKernel::mma_swap}) {
    // Under the sanitizer: a partial tile, a ragged length over several splits, one long
    // length (the fused combine), and the group sizes 1, 4 and 8.
    const std::vector<std::int64_t> lengths =
        sanitizer_subset<std::int64_t>({1, 7, 31, 33, 48, 49, 300, 4097, 5000}, {3, 6, 7});
    for (const std::int64_t d : {64, 128}) {
      for (const Heads hh : {Heads{9, 3}, Heads{32, 8}}) {
        for (const std::int64_t length : lengths) out.push_back({kernel, d, hh, length});
      }
    }
    for (const std::int64_t ratio : sanitizer_subset<std::int64_t>({1, 2, 3, 4, 5, 6, 7, 8}, {0, 3, 7})) {
      for (const std::int64_t length : {65, 2049}) out.push_back({kernel, 128, Heads{2 * ratio, 2}, length});
    }
    if (kernel == ce::AttentionKernel::mma_swap) {
      for (const std::int64_t ratio : {9, 16}) out.push_back({kernel, 64, Heads{2 * ratio, 2}, 300});
    }
    // A full cache whose last body tile ends at the body's last slot, 123 x 3 (odd) scales
    // and mins: the tensor-core kernels copy them as 4-byte pairs, and the buffer's last
    // value alone.
    for (const std::int64_t d : {64, 128}) out.push_back({kernel, d, Heads{9, 3}, 165, 5, 37});
  }
  return out;
}

const char* kernel_label(ce::AttentionKernel k) {
  return k == ce::AttentionKernel::mma ? "mma" : k == ce::AttentionKernel::mma_swap ? "mma_swap" : "simt";
}

TEST_F(KvCacheGpu, MatchesTheTwinInDouble) {
  LOWBIT_TEST_RNG(rng);
  for (const Case& c : kCases) {
    for (const AttentionCase& ac : attention_cases()) {
      const std::int64_t d = ac.d, length = ac.length;
      const Heads hh = ac.heads;
      for (DType out_dtype : {DType::f32, DType::f16}) {
        SCOPED_TRACE(std::string(c.name) + " " + kernel_label(ac.kernel) + " D " + std::to_string(d) + " H " +
                     std::to_string(hh.h) + "/" + std::to_string(hh.hkv) + " length " + std::to_string(length) +
                     " sink " + std::to_string(ac.sink) + " window " + std::to_string(ac.window) + " out " +
                     dtype_name(out_dtype));
        const ce::KvLayerShape s = kv_shape(c.policy, hh.hkv, d, ac.sink, ac.window, c.bits, length);
        const auto k = random_f16(rng, length * hh.hkv, d, 1.0f), v = random_f16(rng, length * hh.hkv, d, 1.0f);
        const auto q = random_f16(rng, hh.h, d, 1.5f);
        const KvTwin twin = build_kv_twin(s, length, k, v);
        const TwinAttention ref = twin_attention(twin, q, hh.h);

        DeviceLayer layer(s);
        layer.upload(twin);
        core::DeviceBuffer qd(q.size() * 2);
        LOWBIT_CUDA_CHECK(cudaMemcpy(qd.data(), q.data(), qd.bytes(), cudaMemcpyHostToDevice));
        const ce::DecodeSplitPlan plan = ce::kv_attention_plan(s, twin.span, hh.h, ac.kernel);
        const std::size_t ws_bytes = core::decode_workspace_bytes(hh.h, d, plan.splits);
        GuardedBuffer ws(ws_bytes), out(static_cast<std::size_t>(hh.h * d) * dtype_size(out_dtype));
        ws.poison(kFloatPoison);
        out.poison(kFloatPoison);
        ce::kv_attention(s, layer.dev, twin.span, qd.data(), hh.h, out.data(), out_dtype, ws.data(), ws_bytes,
                         nullptr, ac.kernel);
        LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
        EXPECT_TRUE(out.guards_intact("out"));
        EXPECT_TRUE(ws.guards_intact("workspace"));

        const std::vector<std::uint8_t> raw = out.download_bytes();
        int bad = 0;
        double worst = 0.0;
        for (std::int64_t i = 0; i < hh.h * d; ++i) {
          const auto e = static_cast<std::size_t>(i);
          const std::size_t h = e / static_cast<std::size_t>(d);
          float got;
          if (out_dtype == DType::f32) {
            std::memcpy(&got, raw.data() + 4 * e, 4);
          } else {
            std::uint16_t bits;
            std::memcpy(&bits, raw.data() + 2 * e, 2);
            got = formats::half_to_float({bits});
          }
          // mma_swap (a group of up to 8) rounds each weight p (times V's scale) to f16 once,
          // without the lo part: relative 2^-11 a weight, so at most 2^-11 of sum p |v - min|
          // / sum p <= 2^-11 (2 vmax) (INT4: |code * scale| = |v - min| <= 2 vmax).
          const bool f16_p = ac.kernel == ce::AttentionKernel::mma_swap && hh.h / hh.hkv <= 8;
          const double tol = ref.vmax[h] * (2.0 * static_cast<double>(d + 4) * 0x1p-24 * ref.smax[h] + 0x1p-15 +
                                            (f16_p ? 0x1p-10 : 0.0)) +
                             (out_dtype == DType::f16 ? 0x1p-11 * std::fabs(ref.out[e]) : 0.0) + 1e-7;
          const double err = std::fabs(static_cast<double>(got) - ref.out[e]);
          if (!(err <= tol)) {
            if (bad++ < 5) ADD_FAILURE() << "head " << h << " channel " << i % d << ": got " << got << ", want "
                                         << ref.out[e] << " (tolerance " << tol << ")";
          }
          if (err == err) worst = std::max(worst, err / tol);
        }
        EXPECT_EQ(bad, 0) << "elements out of tolerance; splits " << plan.splits << " of " << plan.split_len;
        if (length == 5000 && out_dtype == DType::f32) {
          std::printf("%s %s D %lld H %lld/%lld length 5000: %lld splits of %lld, worst error %.3f of tolerance\n",
                      c.name, kernel_label(ac.kernel), static_cast<long long>(d),
                      static_cast<long long>(hh.h), static_cast<long long>(hh.hkv),
                      static_cast<long long>(plan.splits), static_cast<long long>(plan.split_len), worst);
        }
        if (HasFailure()) return;
      }
    }
  }
}

// The RoPE styles and rotated widths of the fused-RoPE test for head_dim d: normal pairs
// (2i, 2i + 1) over d (64) or d / 2 (128); NEOX pairs (i, i + rope_dims / 2) over the
// whole head (qwen2) and over a width whose half is no multiple of a lane's d / 32
// channels (22 at 64, 44 at 128), so that the partners of a lane's channels sit at
// other positions in other lanes.
struct RopeStyleCase {
  bool neox;
  std::int64_t rope_dims;
};
std::vector<RopeStyleCase> rope_style_cases(std::int64_t d) {
  return {{false, d == 64 ? d : d / 2}, {true, d}, {true, d == 64 ? 22 : 44}};
}

// The engine's fused RoPE: K rotated before it is stored or quantized, Q in place, equal
// bit for bit to the CPU's f32 rotation rounded to f16; by host and by device position;
// in both styles (rope_style_cases). With hadamard (--kv-rotate k), K and Q are then
// rotated by formats::hadamard_rotate (the warp's shuffles against the CPU's loop) and
// rounded to f16 again: the same bits.
TEST_F(KvCacheGpu, AppendWithRopeRotatesLikeTheCpu) {
  LOWBIT_TEST_RNG(rng);
  const std::int64_t length = 100, hkv = 3, heads = 9;
  for (bool hadamard : {false, true}) {
    for (const Case& c : kCases) {
      for (std::int64_t d : {64, 128}) {
        for (const RopeStyleCase& style : rope_style_cases(d)) {
          const std::int64_t rope_dims = style.rope_dims, half = rope_dims / 2;
          const bool neox = style.neox;
          SCOPED_TRACE(std::string(c.name) + " D " + std::to_string(d) + (hadamard ? " hadamard" : "") +
                       (neox ? " neox" : " normal") + " rope_dims " + std::to_string(rope_dims));
          std::vector<float> cos_t(static_cast<std::size_t>(length * half)), sin_t(cos_t.size());
          for (std::int64_t p = 0; p < length; ++p) {
            for (std::int64_t i = 0; i < half; ++i) {
              const double angle =
                  static_cast<double>(p) * std::pow(10000.0, -2.0 * static_cast<double>(i) / rope_dims);
              cos_t[static_cast<std::size_t>(p * half + i)] = static_cast<float>(std::cos(angle));
              sin_t[static_cast<std::size_t>(p * half + i)] = static_cast<float>(std::sin(angle));
            }
          }
          // The CPU rotation of one head row at position p, rounded to f16 (CpuSession::rope's
          // pairs: (2i, 2i + 1), or (i, i + half) for NEOX).
          auto rotate = [&](std::vector<std::uint16_t>& x, std::size_t at, std::int64_t p) {
            for (std::int64_t i = 0; i < half; ++i) {
              const auto lo = at + static_cast<std::size_t>(neox ? i : 2 * i);
              const auto hi = at + static_cast<std::size_t>(neox ? i + half : 2 * i + 1);
              const float a = formats::half_to_float({x[lo]}), b = formats::half_to_float({x[hi]});
              const float cs = cos_t[static_cast<std::size_t>(p * half + i)];
              const float sn = sin_t[static_cast<std::size_t>(p * half + i)];
              x[lo] = formats::float_to_half(a * cs - b * sn).bits;
              x[hi] = formats::float_to_half(a * sn + b * cs).bits;
            }
            if (!hadamard) return;
            std::vector<float> head(static_cast<std::size_t>(d));
            for (std::int64_t i = 0; i < d; ++i) {
              head[static_cast<std::size_t>(i)] = formats::half_to_float({x[at + i]});
            }
            formats::hadamard_rotate(head.data(), d);
            for (std::int64_t i = 0; i < d; ++i) {
              x[at + i] = formats::float_to_half(head[static_cast<std::size_t>(i)]).bits;
            }
          };
          const ce::KvLayerShape s = kv_shape(c.policy, hkv, d, kSink, kWindow, c.bits, length);
          const auto k = random_f16(rng, length * hkv, d, 1.0f), v = random_f16(rng, length * hkv, d, 2.0f);
          const auto q = random_f16(rng, length * heads, d, 1.0f);
          auto k_rot = k, q_rot = q;
          for (std::int64_t p = 0; p < length; ++p) {
            for (std::int64_t h = 0; h < hkv; ++h) rotate(k_rot, static_cast<std::size_t>((p * hkv + h) * d), p);
            for (std::int64_t h = 0; h < heads; ++h) rotate(q_rot, static_cast<std::size_t>((p * heads + h) * d), p);
          }
          const KvTwin twin = build_kv_twin(s, length, k_rot, v);
          core::DeviceBuffer kd(k.size() * 2), vd(v.size() * 2), qd(q.size() * 2), cd(cos_t.size() * 4),
              sd(sin_t.size() * 4), pos_d(4);
          LOWBIT_CUDA_CHECK(cudaMemcpy(kd.data(), k.data(), kd.bytes(), cudaMemcpyHostToDevice));
          LOWBIT_CUDA_CHECK(cudaMemcpy(vd.data(), v.data(), vd.bytes(), cudaMemcpyHostToDevice));
          LOWBIT_CUDA_CHECK(cudaMemcpy(qd.data(), q.data(), qd.bytes(), cudaMemcpyHostToDevice));
          LOWBIT_CUDA_CHECK(cudaMemcpy(cd.data(), cos_t.data(), cd.bytes(), cudaMemcpyHostToDevice));
          LOWBIT_CUDA_CHECK(cudaMemcpy(sd.data(), sin_t.data(), sd.bytes(), cudaMemcpyHostToDevice));
          DeviceLayer layer(s);
          layer.poison();
          for (std::int64_t pos = 0; pos < length; ++pos) {
            const ce::AppendRope rope{cd.as<float>(), sd.as<float>(), rope_dims,
                                      qd.as<std::uint16_t>() + pos * heads * d, heads, hadamard, neox};
            const std::uint16_t* kp = kd.as<std::uint16_t>() + pos * hkv * d;
            const std::uint16_t* vp = vd.as<std::uint16_t>() + pos * hkv * d;
            if (pos % 3 == 0) {
              ce::kv_append(s, layer.dev, pos, kp, vp, nullptr, &rope);
            } else {  // the graph form, with and without the early work (after a sync: its contract)
              const auto p32 = static_cast<std::int32_t>(pos);
              LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
              LOWBIT_CUDA_CHECK(cudaMemcpy(pos_d.data(), &p32, 4, cudaMemcpyHostToDevice));
              ce::kv_append_at(s, layer.dev, pos_d.as<std::int32_t>(), kp, vp, nullptr, &rope, pos % 3 == 2);
            }
          }
          LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
          expect_same_buffers(layer, twin);
          EXPECT_EQ(first_difference(qd, q_rot.data()), -1) << "Q rotated in place";
          if (c.policy == KvPolicy::full) {  // the prefill form: q | k | v rows, all rotated in one launch
            const std::int64_t q_cols = heads * d, ld = q_cols + 2 * hkv * d;
            std::vector<std::uint16_t> rows(static_cast<std::size_t>(length * ld)), want = rows;
            for (std::int64_t p = 0; p < length; ++p) {
              for (std::int64_t i = 0; i < q_cols; ++i) {
                const auto at = static_cast<std::size_t>(p * ld + i), from = static_cast<std::size_t>(p * q_cols + i);
                rows[at] = q[from];
                want[at] = q_rot[from];
              }
              for (std::int64_t i = 0; i < hkv * d; ++i) {
                const auto at = static_cast<std::size_t>(p * ld + q_cols + i);
                const auto from = static_cast<std::size_t>(p * hkv * d + i);
                rows[at] = k[from];
                want[at] = k_rot[from];
                rows[at + static_cast<std::size_t>(hkv * d)] = want[at + static_cast<std::size_t>(hkv * d)] = v[from];
              }
            }
            core::DeviceBuffer rd(rows.size() * 2);
            LOWBIT_CUDA_CHECK(cudaMemcpy(rd.data(), rows.data(), rd.bytes(), cudaMemcpyHostToDevice));
            const ce::AppendRope table{cd.as<float>(), sd.as<float>(), rope_dims, nullptr, heads, hadamard, neox};
            ce::rope_rows(s, ce::ChunkRows{rd.data(), length, ld, q_cols, q_cols + hkv * d, 0}, table, nullptr);
            LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
            EXPECT_EQ(first_difference(rd, want.data()), -1) << "rope_rows: Q and K rotated in place, V untouched";
          }
        }
      }
    }
  }
}

// The graph form (position in device memory, the plan of max_length, the combine fused
// into the split kernel): with max_length = length it is the host form bit for bit; with
// a longer max_length (splits past the end exit at once) it agrees within the combine's
// rounding; calls of both plans alternating on one workspace, the counters each leaves
// behind serve the next (a batch engine's caches of different capacities share one). Both
// tensor-core variants (mma; mma_swap, automatic's choice here).
TEST_F(KvCacheGpu, GraphFormMatchesTheHostForm) {
  LOWBIT_TEST_RNG(rng);
  const std::int64_t d = 64, heads = 9, hkv = 3, capacity = 6000;
  for (const auto kernel : {ce::AttentionKernel::mma, ce::AttentionKernel::mma_swap})
  for (const Case& c : kCases) {
    for (std::int64_t length : {1, 7, 300, 2000}) {
      SCOPED_TRACE(std::string(c.name) + " " + kernel_label(kernel) + " length " + std::to_string(length));
      const ce::KvLayerShape s = kv_shape(c.policy, hkv, d, kSink, kWindow, c.bits, capacity);
      const auto k = random_f16(rng, length * hkv, d, 1.0f), v = random_f16(rng, length * hkv, d, 1.0f);
      const auto q = random_f16(rng, heads, d, 1.5f);
      const KvTwin twin = build_kv_twin(s, length, k, v);
      DeviceLayer layer(s);
      layer.upload(twin);
      core::DeviceBuffer qd(q.size() * 2), pos_d(4), host_out(heads * d * 4), ws(ce::kv_attention_workspace_bound(s, heads, capacity));
      LOWBIT_CUDA_CHECK(cudaMemcpy(qd.data(), q.data(), qd.bytes(), cudaMemcpyHostToDevice));
      const auto p32 = static_cast<std::int32_t>(length - 1);
      LOWBIT_CUDA_CHECK(cudaMemcpy(pos_d.data(), &p32, 4, cudaMemcpyHostToDevice));
      core::DeviceBuffer host_ws(ws.bytes());
      ce::kv_attention(s, layer.dev, core::decode_span(s, length), qd.data(), heads, host_out.data(), DType::f32,
                           host_ws.data(), host_ws.bytes(), nullptr, kernel);
      const std::vector<float> want = download<float>(host_out.data(), heads * d);
      LOWBIT_CUDA_CHECK(cudaMemset(ws.data(), 0, ws.bytes()));
      // One workspace for plans of both lengths, the larger first: its partials cover
      // where the smaller plan's would end, so the counters must not live there.
      for (std::int64_t max_length : {capacity, length, capacity, length}) {
        GuardedBuffer out(heads * d * 4);
        out.poison(kFloatPoison);
        ce::kv_attention_at(s, layer.dev, pos_d.as<std::int32_t>(), max_length, qd.data(), heads, out.data(),
                                DType::f32, ws.data(), ws.bytes(), nullptr, false, kernel);
        LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
        EXPECT_TRUE(out.guards_intact("out"));
        std::vector<float> got(static_cast<std::size_t>(heads * d));
        const std::vector<std::uint8_t> raw = out.download_bytes();
        std::memcpy(got.data(), raw.data(), raw.size());
        double worst = 0, scale = 0;
        for (std::size_t i = 0; i < got.size(); ++i) {
          worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - want[i]));
          scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
        }
        if (max_length == length) {
          EXPECT_EQ(worst, 0.0) << "same plan: bit for bit";
        } else {
          EXPECT_LE(worst, 1e-5 * scale) << "max_length " << max_length;  // another split, ~1e-7 relative
        }
      }
    }
  }
}

// The engine's decode step: kv_append_at and kv_attention_at with history_complete
// (the append quantizes the token leaving the window and the attention loads the older
// rows before they wait for their predecessors), in one stream, a sync between steps.
// Each step's output equals bit for bit that of the same call without early loads, made
// after the append finished: a row read before the append wrote it (the new token's;
// selective's token leaving the window) would show. At the end the cache holds the
// twin's bytes. Both tensor-core variants (mma; mma_swap, automatic's choice here).
TEST_F(KvCacheGpu, EarlyLoadsWaitForTheAppendedRows) {
  LOWBIT_TEST_RNG(rng);
  const std::int64_t d = 64, heads = 9, hkv = 3, length = 150, capacity = 400;
  cudaStream_t stream = nullptr;
  LOWBIT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (const auto kernel : {ce::AttentionKernel::mma, ce::AttentionKernel::mma_swap})
  for (const Case& c : kCases) {
    SCOPED_TRACE(std::string(c.name) + " " + kernel_label(kernel));
    const ce::KvLayerShape s = kv_shape(c.policy, hkv, d, kSink, kWindow, c.bits, capacity);
    const auto k = random_f16(rng, length * hkv, d, 1.0f), v = random_f16(rng, length * hkv, d, 1.0f);
    const auto q = random_f16(rng, length * heads, d, 1.5f);
    core::DeviceBuffer kd(k.size() * 2), vd(v.size() * 2), qd(q.size() * 2), pos_d(4);
    LOWBIT_CUDA_CHECK(cudaMemcpy(kd.data(), k.data(), kd.bytes(), cudaMemcpyHostToDevice));
    LOWBIT_CUDA_CHECK(cudaMemcpy(vd.data(), v.data(), vd.bytes(), cudaMemcpyHostToDevice));
    LOWBIT_CUDA_CHECK(cudaMemcpy(qd.data(), q.data(), qd.bytes(), cudaMemcpyHostToDevice));
    DeviceLayer layer(s);
    layer.poison();
    const std::size_t ws_bytes = ce::kv_attention_workspace_bound(s, heads, capacity);
    core::DeviceBuffer ws(ws_bytes), early(heads * d * 4), late(heads * d * 4);
    LOWBIT_CUDA_CHECK(cudaMemset(ws.data(), 0, ws_bytes));
    // The poison, the zeroed workspace and the uploads ran on the legacy stream, which a
    // non-blocking stream does not wait for: without this the poison could land on rows
    // the first appends wrote (seen on the H200 under 8 concurrent test processes).
    LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
    int mismatched = 0;
    for (std::int64_t pos = 0; pos < length; ++pos) {
      const auto p32 = static_cast<std::int32_t>(pos);
      LOWBIT_CUDA_CHECK(cudaMemcpyAsync(pos_d.data(), &p32, 4, cudaMemcpyHostToDevice, stream));
      const std::uint16_t* qp = qd.as<std::uint16_t>() + pos * heads * d;
      ce::kv_append_at(s, layer.dev, pos_d.as<std::int32_t>(), kd.as<std::uint16_t>() + pos * hkv * d,
                       vd.as<std::uint16_t>() + pos * hkv * d, stream, nullptr, true);
      for (auto [out, history_complete] : {std::pair{&early, true}, std::pair{&late, false}}) {
        LOWBIT_CUDA_CHECK(cudaMemsetAsync(out->data(), 0xff, out->bytes(), stream));
        ce::kv_attention_at(s, layer.dev, pos_d.as<std::int32_t>(), capacity, qp, heads, out->data(), DType::f32,
                                ws.data(), ws_bytes, stream, history_complete, kernel);
      }
      LOWBIT_CUDA_CHECK(cudaStreamSynchronize(stream));
      const std::vector<std::uint8_t> a = download<std::uint8_t>(early.data(), early.bytes());
      const std::vector<std::uint8_t> b = download<std::uint8_t>(late.data(), late.bytes());
      if (a != b && mismatched++ < 3) ADD_FAILURE() << "position " << pos << ": early loads differ from late ones";
    }
    EXPECT_EQ(mismatched, 0);
    expect_same_buffers(layer, build_kv_twin(s, length, k, v));
  }
  LOWBIT_CUDA_CHECK(cudaStreamDestroy(stream));
}

// The rows form (prefill): after a history appended one token at a time, a chunk of
// rows through kv_append_rows + kv_attention_rows (its SIMT kernel) leaves the cache
// bytes that the rows appended one at a time leave, and gives each row the attention of the host form
// at its position, within the combine's rounding (the split plans differ) and the f16
// output's. Chunks start in the sink, at the window's edge and past it, and cross the
// ring more than once; rows and outputs have padded strides.
TEST_F(KvCacheGpu, RowsFormMatchesOneAtATime) {
  LOWBIT_TEST_RNG(rng);
  struct Chunk {
    std::int64_t pos0, rows;
  };
  const std::int64_t capacity = 1400;
  for (const Case& c : kCases) {
    for (std::int64_t d : {64, 128}) {
      for (Chunk ch : {Chunk{0, 1}, Chunk{0, 70}, Chunk{5, 7}, Chunk{40, 100}, Chunk{300, 33}, Chunk{700, 600}}) {
        const std::int64_t heads = 9, hkv = 3, q_cols = heads * d, ld = q_cols + 2 * hkv * d + 8;
        const std::int64_t out_ld = q_cols + 8, end = ch.pos0 + ch.rows;
        SCOPED_TRACE(std::string(c.name) + " D " + std::to_string(d) + " chunk at " + std::to_string(ch.pos0) +
                     " of " + std::to_string(ch.rows));
        const ce::KvLayerShape s = kv_shape(c.policy, hkv, d, kSink, kWindow, c.bits, capacity);
        // Every position's q | k | v row; the history's rows are appended from here too.
        const auto rows = random_f16(rng, end, ld, 1.0f);
        core::DeviceBuffer all(rows.size() * 2), chunk_rows(static_cast<std::size_t>(ch.rows * ld * 2));
        LOWBIT_CUDA_CHECK(cudaMemcpy(all.data(), rows.data(), all.bytes(), cudaMemcpyHostToDevice));
        LOWBIT_CUDA_CHECK(cudaMemcpy(chunk_rows.data(), all.as<std::uint16_t>() + ch.pos0 * ld, chunk_rows.bytes(),
                                     cudaMemcpyDeviceToDevice));
        DeviceLayer one(s), batch(s);
        one.poison();
        batch.poison();
        auto row_at = [&](std::int64_t pos) { return all.as<std::uint16_t>() + pos * ld; };
        for (std::int64_t pos = 0; pos < ch.pos0; ++pos) {
          for (DeviceLayer* layer : {&one, &batch}) {
            ce::kv_append(s, layer->dev, pos, row_at(pos) + q_cols, row_at(pos) + q_cols + hkv * d, nullptr);
          }
        }
        // One at a time: append, then attend with the host form (f16 out, padded rows), on
        // the kernel the rows form runs (simt; automatic's mma_swap rounds P to f16).
        GuardedBuffer want(static_cast<std::size_t>(ch.rows * out_ld * 2)), got(want.bytes());
        want.poison(kFloatPoison);
        got.poison(kFloatPoison);
        core::DeviceBuffer ws(ce::kv_attention_workspace_bound(s, heads, capacity));
        for (std::int64_t r = 0; r < ch.rows; ++r) {
          const std::int64_t pos = ch.pos0 + r;
          ce::kv_append(s, one.dev, pos, row_at(pos) + q_cols, row_at(pos) + q_cols + hkv * d, nullptr);
          ce::kv_attention(s, one.dev, core::decode_span(s, pos + 1), row_at(pos), heads,
                               static_cast<std::uint16_t*>(want.data()) + r * out_ld, DType::f16, ws.data(),
                               ws.bytes(), nullptr, ce::AttentionKernel::simt);
        }
        // The rows form.
        const ce::ChunkRows chunk{chunk_rows.data(), ch.rows, ld, q_cols, q_cols + hkv * d, ch.pos0};
        core::DeviceBuffer snapshot(ce::ring_snapshot_bytes(s));
        // A workspace of 5 rows: the rows form then takes several launches.
        core::DeviceBuffer rows_ws(ce::kv_attention_rows_workspace(s, heads, 5, capacity));
        ce::kv_append_rows(s, batch.dev, chunk, snapshot.data(), nullptr);
        ce::kv_attention_rows(s, batch.dev, chunk, snapshot.data(), heads, got.data(), out_ld, rows_ws.data(),
                              rows_ws.bytes(), nullptr, ce::AttentionKernel::simt);
        LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
        EXPECT_TRUE(got.guards_intact("out"));
        for (auto [p, q, name] : {std::tuple{&one.k, &batch.k, "K"}, std::tuple{&one.v, &batch.v, "V"}}) {
          EXPECT_EQ(first_difference(q->f16, download<std::uint8_t>(p->f16.data(), p->f16.bytes()).data()), -1)
              << name << " FP16 slots";
          EXPECT_EQ(first_difference(q->codes, download<std::uint8_t>(p->codes.data(), p->codes.bytes()).data()), -1)
              << name << " codes";
          EXPECT_EQ(first_difference(q->scales, download<std::uint8_t>(p->scales.data(), p->scales.bytes()).data()),
                    -1)
              << name << " scales";
          EXPECT_EQ(first_difference(q->mins, download<std::uint8_t>(p->mins.data(), p->mins.bytes()).data()), -1)
              << name << " mins";
        }
        // The plans' different combines differ by ~1e-7 relative in f32; after the f16
        // rounding that is at most one f16 step (2^-10 relative); a wrong row is off by O(1).
        const auto w = download<std::uint16_t>(want.data(), ch.rows * out_ld);
        const auto g = download<std::uint16_t>(got.data(), ch.rows * out_ld);
        int bad = 0;
        for (std::int64_t r = 0; r < ch.rows; ++r) {
          for (std::int64_t i = 0; i < q_cols; ++i) {
            const auto e = static_cast<std::size_t>(r * out_ld + i);
            const float a = formats::half_to_float({w[e]}), b = formats::half_to_float({g[e]});
            if (!(std::fabs(a - b) <= 0x1p-10f * std::max(1.0f, std::fabs(a))) && bad++ < 5) {
              ADD_FAILURE() << "row " << r << " column " << i << ": rows form " << b << ", one at a time " << a;
            }
          }
        }
        EXPECT_EQ(bad, 0);
      }
    }
  }
}

// The rows form on tensor cores (kv_attention_rows' automatic kernel) against the twin
// in double: each row at its position t sees the cache as the twin holds it after t + 1
// appends. Every policy, head_dim 64 / 128, GQA groups 1, 3, 7, 8; chunks of one row, of
// 63 and 65 rows (around a block's rows at group 1), in the sink, across the window's
// edge and its ring; after 2000 positions with split-K (a workspace) and without (none).
// Tolerance, per element of head h (Vmax, Smax of what the row reads, as in
// MatchesTheTwinInDouble): P rounded to f16 for the P V mma, 2^-11 a weight, so 2^-11
// Vmax; under a quantizing policy the decoded values rounded to f16 (V: 2^-11 Vmax; each
// score 2^-11 Smax, which moves the output by <= 2^-10 Smax Vmax); f32 arithmetic 2^-15
// Vmax; the f16 output 2^-11 |o|. Twice that is allowed: a position seen in the wrong form
// or not at all moves a row by about Vmax / (visible positions), far more at these lengths.
struct RowsChunk {
  std::int64_t pos0, rows, capacity;
};
struct RowsHeads {
  std::int64_t h, hkv;
};

// One chunk after a history appended by the rows form, on a fresh poisoned cache: the
// chunk's rows (q | k | v, row stride ld) and the layer, ready for kv_attention_rows.
struct RowsSetup {
  ce::KvLayerShape s;
  std::int64_t heads, q_cols, ld, out_ld;
  std::vector<std::uint16_t> data;  // every position's row
  core::DeviceBuffer all, snapshot;
  DeviceLayer layer;
  ce::ChunkRows chunk;

  RowsSetup(std::mt19937& rng, const Case& c, std::int64_t d, RowsHeads hh, RowsChunk ch)
      : s(kv_shape(c.policy, hh.hkv, d, kSink, kWindow, c.bits, ch.capacity)),
        heads(hh.h),
        q_cols(hh.h * d),
        ld(q_cols + 2 * hh.hkv * d + 8),
        out_ld(q_cols + 8),
        data(random_f16(rng, ch.pos0 + ch.rows, ld, 1.0f)),
        all(data.size() * 2),
        snapshot(std::max<std::size_t>(ce::ring_snapshot_bytes(s), 16)),
        layer(s) {
    LOWBIT_CUDA_CHECK(cudaMemcpy(all.data(), data.data(), all.bytes(), cudaMemcpyHostToDevice));
    layer.poison();
    if (ch.pos0 > 0) {
      ce::kv_append_rows(s, layer.dev, ce::ChunkRows{all.data(), ch.pos0, ld, q_cols, q_cols + hh.hkv * d, 0},
                         snapshot.data(), nullptr);
    }
    chunk = ce::ChunkRows{all.as<std::uint16_t>() + ch.pos0 * ld, ch.rows, ld, q_cols, q_cols + hh.hkv * d, ch.pos0};
    ce::kv_append_rows(s, layer.dev, chunk, snapshot.data(), nullptr);
  }
  // kv_attention_rows into a poisoned buffer; its f16 outputs as floats [rows][q_cols].
  std::vector<float> attend(ce::AttentionKernel kernel, std::size_t workspace_bytes) {
    core::DeviceBuffer ws(workspace_bytes);
    return attend_with([&](void* out) {
      ce::kv_attention_rows(s, layer.dev, chunk, snapshot.data(), heads, out, out_ld, ws.data(), workspace_bytes,
                            nullptr, kernel);
    });
  }
  // `run(out)` writes the chunk's attention into a poisoned [rows][out_ld] f16 buffer;
  // its outputs as floats [rows][q_cols], the rows' gaps checked untouched.
  template <class Run>
  std::vector<float> attend_with(Run run) {
    GuardedBuffer out(static_cast<std::size_t>(chunk.rows * out_ld * 2));
    out.poison(kFloatPoison);
    run(out.data());
    LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_TRUE(out.guards_intact("out"));
    const auto bits = download<std::uint16_t>(out.data(), static_cast<std::size_t>(chunk.rows * out_ld));
    std::vector<float> got(static_cast<std::size_t>(chunk.rows * q_cols));
    for (std::int64_t r = 0; r < chunk.rows; ++r) {
      for (std::int64_t i = 0; i < q_cols; ++i) {
        const std::uint16_t b = bits[static_cast<std::size_t>(r * out_ld + i)];
        got[static_cast<std::size_t>(r * q_cols + i)] = formats::half_to_float({b});
      }
      for (std::int64_t i = q_cols; i < out_ld; ++i) {  // the row's gap is never written
        EXPECT_EQ(bits[static_cast<std::size_t>(r * out_ld + i)], poison_f16()) << "row " << r << " gap " << i;
      }
    }
    return got;
  }
};

// The twin's attention of every row of the chunk at its position (in double), with each
// row's Vmax and Smax per head.
std::vector<TwinAttention> twin_rows(const RowsSetup& t, std::int64_t pos0, std::int64_t rows) {
  KvTwin twin;
  twin.shape = t.s;
  poison_part(t.s, twin.k);
  poison_part(t.s, twin.v);
  const core::KvLayerBuffers b = twin_buffers(twin);
  const std::int64_t hkv_d = t.s.kv_heads * t.s.head_dim;
  std::vector<TwinAttention> out;
  for (std::int64_t pos = 0; pos < pos0 + rows; ++pos) {
    const std::uint16_t* row = t.data.data() + pos * t.ld;
    cpu::kv_append(t.s, b, pos, row + t.q_cols, t.s.head_dim, row + t.q_cols + hkv_d, t.s.head_dim);
    if (pos < pos0) continue;
    twin.length = pos + 1;
    twin.span = core::decode_span(t.s, pos + 1);
    twin.k.visible = cpu::kv_visible_values(t.s, b.k, pos + 1);
    twin.v.visible = cpu::kv_visible_values(t.s, b.v, pos + 1);
    out.push_back(twin_attention(twin, std::vector<std::uint16_t>(row, row + t.q_cols), t.heads));
  }
  return out;
}

TEST_F(KvCacheGpu, RowsFormOnTensorCoresMatchesTheTwinInDouble) {
  LOWBIT_TEST_RNG(rng);
  struct Shape {
    RowsHeads heads;
    RowsChunk chunk;
  };
  std::vector<Shape> shapes;
  for (RowsHeads hh : {RowsHeads{8, 8}, RowsHeads{9, 3}, RowsHeads{14, 2}, RowsHeads{16, 2}}) {
    for (RowsChunk ch : {RowsChunk{0, 1, 256}, RowsChunk{0, 63, 256}, RowsChunk{5, 7, 256}, RowsChunk{10, 65, 256},
                         RowsChunk{40, 100, 256}, RowsChunk{101, 70, 256}}) {
      shapes.push_back({hh, ch});
    }
  }
  shapes.push_back({RowsHeads{16, 2}, RowsChunk{2000, 40, 2100}});  // split-K with a workspace
  for (const Case& c : kCases) {
    double worst = 0.0;
    for (std::int64_t d : {64, 128}) {
      for (const Shape& sh : shapes) {
        const RowsChunk ch = sh.chunk;
        SCOPED_TRACE(std::string(c.name) + " D " + std::to_string(d) + " H " + std::to_string(sh.heads.h) + "/" +
                     std::to_string(sh.heads.hkv) + " chunk at " + std::to_string(ch.pos0) + " of " +
                     std::to_string(ch.rows));
        RowsSetup t(rng, c, d, sh.heads, ch);
        const std::vector<TwinAttention> ref = twin_rows(t, ch.pos0, ch.rows);
        const bool quantized = t.s.body != KvBody::none;
        for (std::size_t ws : {std::size_t{0}, ce::kv_attention_rows_workspace(t.s, t.heads, ch.rows, ch.capacity)}) {
          SCOPED_TRACE("workspace " + std::to_string(ws));
          const std::vector<float> got = t.attend(ce::AttentionKernel::automatic, ws);
          int bad = 0;
          for (std::int64_t r = 0; r < ch.rows; ++r) {
            const TwinAttention& want = ref[static_cast<std::size_t>(r)];
            for (std::int64_t i = 0; i < t.q_cols; ++i) {
              const auto h = static_cast<std::size_t>(i / d);
              const double o = want.out[static_cast<std::size_t>(i)];
              const double tol =
                  2.0 * (want.vmax[h] * (0x1p-11 + (quantized ? 0x1p-11 + 0x1p-10 * want.smax[h] : 0.0) + 0x1p-15) +
                         0x1p-11 * std::fabs(o)) +
                  1e-6;
              const double err = std::fabs(static_cast<double>(got[static_cast<std::size_t>(r * t.q_cols + i)]) - o);
              if (!(err <= tol) && bad++ < 5) {
                ADD_FAILURE() << "row " << r << " head " << h << " channel " << i % d << ": got "
                              << got[static_cast<std::size_t>(r * t.q_cols + i)] << ", want " << o << " (tolerance "
                              << tol << ")";
              }
              if (err == err) worst = std::max(worst, err / tol);
            }
          }
          EXPECT_EQ(bad, 0) << "elements out of tolerance";
          if (HasFailure()) return;
        }
      }
    }
    std::printf("rows form, tensor cores, %s: worst error %.3f of tolerance\n", c.name, worst);
  }
}

// A whole case's bounds: Vmax, the largest |v| stored, 1.1x for a decoded value; Smax,
// the largest sum |q_d| max |k_d| / sqrt(D) of the chunk's queries.
struct CaseBounds {
  double vmax = 0.0, smax = 0.0;
};
CaseBounds case_bounds(const RowsSetup& t) {
  const std::int64_t d = t.s.head_dim, end = t.chunk.pos0 + t.chunk.rows, hkv_d = t.s.kv_heads * d;
  CaseBounds b;
  std::vector<double> kmax(static_cast<std::size_t>(d), 0.0);
  for (std::int64_t p = 0; p < end; ++p) {
    for (std::int64_t i = 0; i < hkv_d; ++i) {
      const std::uint16_t* row = t.data.data() + p * t.ld + t.q_cols;
      const double k = std::fabs(formats::half_to_float({row[i]}));
      kmax[static_cast<std::size_t>(i % d)] = std::max(kmax[static_cast<std::size_t>(i % d)], 1.1 * k);
      b.vmax = std::max(b.vmax, 1.1 * std::fabs(formats::half_to_float({row[hkv_d + i]})));
    }
  }
  for (std::int64_t p = t.chunk.pos0; p < end; ++p) {
    for (std::int64_t h = 0; h < t.heads; ++h) {
      double mag = 0.0;
      for (std::int64_t i = 0; i < d; ++i) {
        mag += std::fabs(formats::half_to_float({t.data[static_cast<std::size_t>(p * t.ld + h * d + i)]})) *
               kmax[static_cast<std::size_t>(i)];
      }
      b.smax = std::max(b.smax, mag / std::sqrt(static_cast<double>(d)));
    }
  }
  return b;
}

// The tensor-core rows form against the SIMT one at prefill sizes (a chunk of 600 rows
// after 700, 100 rows after 3000 with split-K, a first chunk of 512), GQA 32/8, 64/1 and
// 8/8, every policy: within the rounding above, bounded over the whole case
// (case_bounds), plus both outputs' f16 rounding.
TEST_F(KvCacheGpu, RowsFormOnTensorCoresMatchesTheSimtKernel) {
  LOWBIT_TEST_RNG(rng);
  for (const Case& c : kCases) {
    for (std::int64_t d : {64, 128}) {
      for (RowsHeads hh : {RowsHeads{32, 8}, RowsHeads{64, 1}, RowsHeads{8, 8}}) {
        for (RowsChunk ch : {RowsChunk{700, 600, 1400}, RowsChunk{3000, 100, 3200}, RowsChunk{0, 512, 512}}) {
          SCOPED_TRACE(std::string(c.name) + " D " + std::to_string(d) + " H " + std::to_string(hh.h) + "/" +
                       std::to_string(hh.hkv) + " chunk at " + std::to_string(ch.pos0) + " of " +
                       std::to_string(ch.rows));
          RowsSetup t(rng, c, d, hh, ch);
          const std::size_t ws = ce::kv_attention_rows_workspace(t.s, t.heads, ch.rows, ch.capacity);
          const std::vector<float> want = t.attend(ce::AttentionKernel::simt, ws);
          const std::vector<float> got = t.attend(ce::AttentionKernel::automatic, ws);
          const auto [vmax, smax] = case_bounds(t);
          const bool quantized = t.s.body != KvBody::none;
          int bad = 0;
          for (std::size_t e = 0; e < got.size(); ++e) {
            const double tol = 2.0 * vmax * (0x1p-11 + (quantized ? 0x1p-11 + 0x1p-10 * smax : 0.0) + 0x1p-15) +
                               0x1p-10 * std::fabs(want[e]) + 1e-6;
            if (!(std::fabs(got[e] - want[e]) <= tol) && bad++ < 5) {
              ADD_FAILURE() << "row " << e / static_cast<std::size_t>(t.q_cols) << " element "
                            << e % static_cast<std::size_t>(t.q_cols) << ": tensor cores " << got[e] << ", simt "
                            << want[e] << " (tolerance " << tol << ")";
            }
          }
          EXPECT_EQ(bad, 0);
          if (HasFailure()) return;
        }
      }
    }
  }
  // mma_swap is a decode kernel: the rows form refuses it by name.
  const Case& c = kCases[0];
  RowsSetup t(rng, c, 64, RowsHeads{8, 8}, RowsChunk{0, 4, 16});
  EXPECT_THROW(t.attend(ce::AttentionKernel::mma_swap, 0), lowbit::Error);
}

// Flash's outputs `got` against the simt and mma rows kernels' (workspace ws): each
// element within 2 (bound + 2^-10 |want|) + 1e-6 (bound: the case's absolute rounding, as
// the callers derive it; 2^-10 |want|: both sides' f16 outputs). The worst error as a
// fraction of its tolerance.
double expect_near_the_rows_kernels(RowsSetup& t, const std::vector<float>& got, std::size_t ws, double bound) {
  double worst = 0.0;
  for (ce::AttentionKernel kernel : {ce::AttentionKernel::simt, ce::AttentionKernel::mma}) {
    const std::vector<float> want = t.attend(kernel, ws);
    int bad = 0;
    for (std::size_t e = 0; e < got.size(); ++e) {
      const double tol = 2.0 * (bound + 0x1p-10 * std::fabs(want[e])) + 1e-6;
      const double err = std::fabs(static_cast<double>(got[e]) - want[e]);
      if (!(err <= tol) && bad++ < 5) {
        ADD_FAILURE() << "row " << e / static_cast<std::size_t>(t.q_cols) << " element "
                      << e % static_cast<std::size_t>(t.q_cols) << ": flash " << got[e] << ", "
                      << kernel_label(kernel) << " " << want[e] << " (tolerance " << tol << ")";
      }
      if (err == err) worst = std::max(worst, err / tol);
    }
    EXPECT_EQ(bad, 0) << "elements out of tolerance against " << kernel_label(kernel);
  }
  return worst;
}

// flash_attention_over_cache (cuda/flash: the Hopper wgmma kernel over the full policy's
// FP16 slots, kv_attention_rows' automatic kernel there) against the rows kernels, on a
// full cache after a history appended by the rows form: chunks of 1, 17, 128 and 300 rows
// at positions 0, 1, 127, 130 and 1000 (partial query blocks of 128 / 192 rows, keys
// ending mid-tile), head_dim 64 / 128, GQA groups 1, 4 and 8. The slots past the chunk
// hold poison (NaN): the key range ends at pos0 + rows for TMA too. Against simt (f32,
// the reference) and mma: the bound above (case_bounds) with both sides' P rounded to
// f16 (2^-11 Vmax each) and both sides' f32 scores ((D + 4) 2^-24 Smax each, moving the
// output by twice that times Vmax), twice the sum. Automatic returns flash's bits.
TEST_F(KvCacheGpu, FlashOverTheCacheMatchesTheRowsKernels) {
  if (!cuda::flash::flash_wgmma_available()) GTEST_SKIP() << "the flash wgmma kernel needs Hopper and an sm_90a build";
  LOWBIT_TEST_RNG(rng);
  const Case& full = kCases[0];
  for (std::int64_t d : {64, 128}) {
    for (RowsHeads hh : {RowsHeads{8, 8}, RowsHeads{16, 4}, RowsHeads{32, 4}}) {
      double worst = 0.0;
      for (std::int64_t pos0 : {0, 1, 127, 130, 1000}) {
        for (std::int64_t n : {1, 17, 128, 300}) {
          const RowsChunk ch{pos0, n, pos0 + n + 45};
          SCOPED_TRACE("D " + std::to_string(d) + " H " + std::to_string(hh.h) + "/" + std::to_string(hh.hkv) +
                       " chunk at " + std::to_string(pos0) + " of " + std::to_string(n));
          RowsSetup t(rng, full, d, hh, ch);
          const std::vector<float> got = t.attend_with([&](void* out) {
            const cuda::flash::CacheAttention a{t.chunk.base, t.chunk.ld, t.layer.dev.k.f16, t.layer.dev.v.f16,
                                                d, t.s.f16_slots() * d, out, t.out_ld, n, pos0, hh.h, hh.hkv, d};
            EXPECT_TRUE(cuda::flash::flash_attention_over_cache(a, nullptr)) << "the wgmma kernel did not run";
          });
          const std::size_t ws = ce::kv_attention_rows_workspace(t.s, t.heads, n, ch.capacity);
          EXPECT_TRUE(t.attend(ce::AttentionKernel::automatic, ws) == got) << "automatic is not flash's";
          const auto [vmax, smax] = case_bounds(t);
          const double rounding = 2 * 0x1p-11 + 0x1p-15 + 4.0 * static_cast<double>(d + 4) * 0x1p-24 * smax;
          worst = std::max(worst, expect_near_the_rows_kernels(t, got, ws, vmax * rounding));
          if (HasFailure()) return;
        }
      }
      std::printf("flash over the cache, D %lld H %lld/%lld: worst error %.3f of tolerance\n",
                  static_cast<long long>(d), static_cast<long long>(hh.h), static_cast<long long>(hh.hkv), worst);
    }
  }
}

// `call` on a copy of `ok` altered by `change` throws a lowbit::Error whose message holds
// `what`.
template <class Args, class Call, class Change>
void expect_error_naming(const Args& ok, Call call, Change change, const char* what) {
  Args a = ok;
  change(a);
  try {
    call(a);
    ADD_FAILURE() << "no error for " << what;
  } catch (const lowbit::Error& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

// flash_attention_over_cache's checks: a malformed call throws, naming what is wrong,
// before anything runs; a head_dim the kernel lacks returns false (the caller's fallback).
TEST_F(KvCacheGpu, FlashOverTheCacheChecksItsArguments) {
  core::DeviceBuffer buf(1 << 16);
  const cuda::flash::CacheAttention ok{buf.data(), 512, buf.data(), buf.data(), 64, 64 * 16, buf.data(), 512,
                                       4, 0, 8, 2, 64};
  auto throws = [&](auto change, const char* what) {
    expect_error_naming(ok, [](const auto& a) { cuda::flash::flash_attention_over_cache(a, nullptr); }, change, what);
  };
  throws([](auto& a) { a.q = nullptr; }, "null q");
  throws([](auto& a) { a.kv_heads = 3; }, "multiple of kv_heads");
  throws([](auto& a) { a.rows = 0; }, "rows at position");
  throws([](auto& a) { a.ldo = 511; }, "ldo");
  throws([](auto& a) { a.key_stride = 32; }, "key_stride");
  cuda::flash::CacheAttention wide = ok;
  wide.head_dim = 96;
  wide.ldq = wide.ldo = 8 * 96;
  wide.key_stride = 96;
  EXPECT_FALSE(cuda::flash::flash_attention_over_cache(wide, nullptr));
}

// The MixedCacheAttention of a RowsSetup's chunk: what kv_attention_rows' automatic
// kernel passes flash_attention_over_mixed_cache on a contiguous cache.
cuda::flash::MixedCacheAttention mixed_cache_call(RowsSetup& t, void* out) {
  const auto* base = static_cast<const std::uint16_t*>(t.chunk.base);
  const auto* snap = t.snapshot.as<std::uint16_t>();
  const ce::KvLayerShape& s = t.s;
  cuda::flash::MixedCacheAttention c;
  c.q = base;
  c.ldq = t.chunk.ld;
  c.chunk_k = base + t.chunk.k_col;
  c.chunk_v = base + t.chunk.v_col;
  c.chunk_ld = t.chunk.ld;
  c.snap_k = snap;
  c.snap_v = snap + s.kv_heads * s.window * s.head_dim;
  c.f16_k = t.layer.dev.k.f16;
  c.f16_v = t.layer.dev.v.f16;
  c.f16_slots = s.f16_slots();
  c.body_bits = static_cast<int>(s.body);
  c.codes_k = t.layer.dev.k.codes;
  c.codes_v = t.layer.dev.v.codes;
  c.scales_k = t.layer.dev.k.scales;
  c.scales_v = t.layer.dev.v.scales;
  c.mins_k = t.layer.dev.k.mins;
  c.mins_v = t.layer.dev.v.mins;
  c.sink = s.sink;
  c.window = s.window;
  c.body_base = s.body_base;
  c.out = out;
  c.ldo = t.out_ld;
  c.rows = t.chunk.rows;
  c.pos0 = t.chunk.pos0;
  c.heads = t.heads;
  c.kv_heads = s.kv_heads;
  c.head_dim = s.head_dim;
  return c;
}

// flash_attention_over_mixed_cache (cuda/flash/flash_wgmma_cache.cu: the wgmma kernel
// over the sink, the quantized body and the recent FP16 keys as three masked segments;
// kv_attention_rows' automatic kernel for every policy but full on a contiguous cache)
// for window, selective INT8 / INT4, int8 and int4 (sink 16, window 32), after a history
// appended by the rows form (unwritten cache slots hold NaN, codes 0x5a): chunks of 1, 17,
// 128 and 300 rows at positions 0, 1, 20 and 40 (inside the sink + window's 48, chunks
// crossing the window's edge and the body's start), 130 and 1000 (partial query blocks
// of 128 / 192 rows, segments ending mid-tile), head_dim 64 / 128, GQA groups 1, 4, 8.
// Against
//   - the twin in double (chunks at up to 130): RowsFormOnTensorCoresMatchesTheTwinInDouble's
//     tolerance (P and the decoded values rounded to f16, as the mma rows kernel);
//   - the simt rows kernel (f32, the reference) and the mma rows kernel, every chunk: the
//     bound of FlashOverTheCacheMatchesTheRowsKernels plus the decoded values' f16
//     rounding (2^-11 Vmax + 2^-10 Smax Vmax) under a quantizing policy.
// A row that saw a position twice, in the wrong form or not at all is off by about
// Vmax / (visible positions): far beyond these bounds at these lengths. Automatic must
// return flash's bits.
TEST_F(KvCacheGpu, FlashOverTheMixedCacheMatchesTheTwinAndTheRowsKernels) {
  if (!cuda::flash::flash_wgmma_available()) GTEST_SKIP() << "the flash wgmma kernel needs Hopper and an sm_90a build";
  LOWBIT_TEST_RNG(rng);
  for (const Case& c : kCases) {
    if (c.policy == KvPolicy::full) continue;  // FlashOverTheCacheMatchesTheRowsKernels
    double worst_twin = 0.0, worst_rows = 0.0;
    for (std::int64_t d : {64, 128}) {
      for (RowsHeads hh : {RowsHeads{8, 8}, RowsHeads{16, 4}, RowsHeads{16, 2}}) {
        for (std::int64_t pos0 : {0, 1, 20, 40, 130, 1000}) {
          for (std::int64_t n : {1, 17, 128, 300}) {
            const RowsChunk ch{pos0, n, pos0 + n + 45};
            SCOPED_TRACE(std::string(c.name) + " D " + std::to_string(d) + " H " + std::to_string(hh.h) + "/" +
                         std::to_string(hh.hkv) + " chunk at " + std::to_string(pos0) + " of " + std::to_string(n));
            RowsSetup t(rng, c, d, hh, ch);
            const std::vector<float> got = t.attend_with([&](void* out) {
              EXPECT_TRUE(cuda::flash::flash_attention_over_mixed_cache(mixed_cache_call(t, out), nullptr))
                  << "the wgmma kernel did not run";
            });
            const std::size_t ws = ce::kv_attention_rows_workspace(t.s, t.heads, n, ch.capacity);
            EXPECT_TRUE(t.attend(ce::AttentionKernel::automatic, ws) == got) << "automatic is not flash's";
            const bool quantized = t.s.body != KvBody::none;
            if (pos0 <= 130) {
              const std::vector<TwinAttention> ref = twin_rows(t, pos0, n);
              int bad = 0;
              for (std::int64_t r = 0; r < n; ++r) {
                const TwinAttention& want = ref[static_cast<std::size_t>(r)];
                for (std::int64_t i = 0; i < t.q_cols; ++i) {
                  const auto h = static_cast<std::size_t>(i / d);
                  const double o = want.out[static_cast<std::size_t>(i)];
                  const double tol =
                      2.0 * (want.vmax[h] * (0x1p-11 + (quantized ? 0x1p-11 + 0x1p-10 * want.smax[h] : 0.0) +
                                             0x1p-15) +
                             0x1p-11 * std::fabs(o)) +
                      1e-6;
                  const float g = got[static_cast<std::size_t>(r * t.q_cols + i)];
                  const double err = std::fabs(static_cast<double>(g) - o);
                  if (!(err <= tol) && bad++ < 5) {
                    ADD_FAILURE() << "row " << r << " head " << h << " channel " << i % d << ": flash " << g
                                  << ", twin " << o << " (tolerance " << tol << ")";
                  }
                  if (err == err) worst_twin = std::max(worst_twin, err / tol);
                }
              }
              EXPECT_EQ(bad, 0) << "elements out of tolerance against the twin";
            }
            const auto [vmax, smax] = case_bounds(t);
            const double rounding = 2 * 0x1p-11 + 0x1p-15 + 4.0 * static_cast<double>(d + 4) * 0x1p-24 * smax +
                                    (quantized ? 0x1p-11 + 0x1p-10 * smax : 0.0);
            worst_rows = std::max(worst_rows, expect_near_the_rows_kernels(t, got, ws, vmax * rounding));
            if (HasFailure()) return;
          }
        }
      }
    }
    std::printf("flash over the mixed cache, %s: worst error %.3f (twin), %.3f (rows kernels) of tolerance\n", c.name,
                worst_twin, worst_rows);
  }
}

// flash_attention_over_mixed_cache's checks: a malformed call throws, naming what is
// wrong, before anything runs; a head_dim the kernel lacks returns false.
TEST_F(KvCacheGpu, FlashOverTheMixedCacheChecksItsArguments) {
  core::DeviceBuffer buf(1 << 20);
  auto* b = buf.as<std::uint8_t>();
  cuda::flash::MixedCacheAttention ok;  // selective INT4, sink 16, window 32, D 64, 8 / 2 heads
  ok.q = b;
  ok.ldq = 1024;
  ok.chunk_k = b + 1024;
  ok.chunk_v = b + 1536;
  ok.chunk_ld = 1024;
  ok.snap_k = ok.snap_v = ok.f16_k = ok.f16_v = b;
  ok.f16_slots = 48;
  ok.body_bits = 4;
  ok.codes_k = ok.codes_v = ok.scales_k = ok.scales_v = ok.mins_k = ok.mins_v = b;
  ok.sink = 16;
  ok.window = 32;
  ok.body_base = 16;
  ok.out = b;
  ok.ldo = 1024;
  ok.rows = 4;
  ok.pos0 = 100;
  ok.heads = 8;
  ok.kv_heads = 2;
  ok.head_dim = 64;
  auto throws = [&](auto change, const char* what) {
    expect_error_naming(ok, [](const auto& a) { cuda::flash::flash_attention_over_mixed_cache(a, nullptr); }, change,
                        what);
  };
  throws([](auto& a) { a.chunk_k = nullptr; }, "null q, chunk_k");
  throws([](auto& a) { a.kv_heads = 3; }, "multiple of kv_heads");
  throws([](auto& a) { a.rows = 0; }, "rows at position");
  throws([](auto& a) { a.ldo = 511; }, "ldo");
  throws([](auto& a) { a.body_bits = 3; }, "body_bits");
  throws([](auto& a) { a.body_bits = 0, a.window = 0; }, "needs a window");
  throws([](auto& a) { a.body_base = 0; }, "body_base");
  throws([](auto& a) { a.window = 0; }, "int8 / int4");
  throws([](auto& a) { a.f16_slots = 40; }, "FP16 slots");
  throws([](auto& a) { a.snap_k = nullptr; }, "snapshot");
  throws([](auto& a) { a.mins_v = nullptr; }, "4-bit mins");
  throws([](auto& a) { a.chunk_ld = 100; }, "chunk_ld");
  throws([b](auto& a) { a.codes_k = b + 8; }, "16-byte aligned");
  throws([b](auto& a) { a.chunk_v = b + 1544 + 2; }, "16-byte aligned");
  // Key blocks: a size >= 0 with a body; the staging ring's snapshot where a body
  // position precedes the chunk; K's parameters 16-byte aligned. Blocks the kernel does
  // not take (8 bits, sizes that neither divide nor are divided by its 128-key tile) are
  // not run: false.
  throws([](auto& a) { a.key_block = -32; }, "key_block -32");
  throws([](auto& a) { a.key_block = 32; }, "staging ring's snapshot");
  throws([b](auto& a) { a.key_block = 32, a.snap_staged = b, a.mins_k = b + 2; }, "K's scales and mins");
  cuda::flash::MixedCacheAttention blocked = ok;
  blocked.key_block = 48;
  blocked.snap_staged = b;
  EXPECT_FALSE(cuda::flash::flash_mixed_cache_takes(blocked));
  EXPECT_FALSE(cuda::flash::flash_attention_over_mixed_cache(blocked, nullptr));
  blocked.key_block = 32;
  blocked.body_bits = 8;
  EXPECT_FALSE(cuda::flash::flash_mixed_cache_takes(blocked));
  // A chunk inside the sink + window reads no body and no snapshot: neither is needed.
  cuda::flash::MixedCacheAttention early = ok;
  early.pos0 = 0;
  early.snap_k = early.snap_v = nullptr;
  early.codes_k = early.codes_v = nullptr;
  early.scales_k = early.scales_v = early.mins_k = early.mins_v = nullptr;
  cuda::flash::MixedCacheAttention wide = early;
  wide.head_dim = 96;
  wide.ldq = wide.ldo = 8 * 96;
  wide.chunk_ld = 1024;
  EXPECT_FALSE(cuda::flash::flash_attention_over_mixed_cache(wide, nullptr));
}

// The public entry points (include/lowbit/kv_cache.h) on CUDA views: appends leave the
// twin's bytes, kv_read returns exactly the twin's visible values as f16 (every policy,
// a window that has dropped tokens, INT4 bodies of odd positions), outputs poisoned.
TEST_F(KvCacheGpu, PublicEntriesAndReadMatchTheTwin) {
  LOWBIT_TEST_RNG(rng);
  const std::int64_t hkv = 3, heads = 9, max_tokens = 300;
  for (const Case& c : kCases) {
    for (const std::int64_t d : {64, 128}) {
      for (const std::int64_t length : {1, 33, 131}) {
        SCOPED_TRACE(std::string(c.name) + " D " + std::to_string(d) + " length " + std::to_string(length));
        const KvCacheSpec spec{c.policy, hkv, d, kSink, kWindow, c.bits, max_tokens};
        const ce::KvLayerShape s = kv_shape(c.policy, hkv, d, kSink, kWindow, c.bits, max_tokens);
        DeviceLayer dev(s);
        dev.poison();
        const KvCacheSizes z = kv_cache_sizes(spec);
        KvLayerViews views;
        for (auto [p, v] : {std::pair{&dev.dev.k, &views.k}, std::pair{&dev.dev.v, &views.v}}) {
          if (z.f16) v->f16 = TensorView::vector(p->f16, DType::f16, Device::cuda, z.f16);
          if (z.codes) v->codes = TensorView::vector(p->codes, z.code_dtype, Device::cuda, z.codes);
          if (z.scales) v->scales = TensorView::vector(p->scales, DType::f16, Device::cuda, z.scales);
          if (z.mins) v->mins = TensorView::vector(p->mins, DType::f16, Device::cuda, z.mins);
        }
        const KvLayer layer(spec, views);
        const auto k = random_f16(rng, length * hkv, d, 1.0f), v = random_f16(rng, length * hkv, d, 1.0f);
        core::DeviceBuffer kd(k.size() * 2), vd(v.size() * 2);
        LOWBIT_CUDA_CHECK(cudaMemcpy(kd.data(), k.data(), kd.bytes(), cudaMemcpyHostToDevice));
        LOWBIT_CUDA_CHECK(cudaMemcpy(vd.data(), v.data(), vd.bytes(), cudaMemcpyHostToDevice));
        for (std::int64_t pos = 0; pos < length; ++pos) {
          kv_append(layer, pos,
                    TensorView::matrix(kd.as<std::uint16_t>() + pos * hkv * d, DType::f16, Device::cuda, hkv, d),
                    TensorView::matrix(vd.as<std::uint16_t>() + pos * hkv * d, DType::f16, Device::cuda, hkv, d),
                    nullptr);
        }
        const KvTwin twin = build_kv_twin(s, length, k, v);
        LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
        expect_same_buffers(dev, twin);

        const std::int64_t visible = kv_visible_count(spec, length), n = visible * hkv * d;
        GuardedBuffer k_out(static_cast<std::size_t>(n) * 2), v_out(static_cast<std::size_t>(n) * 2);
        k_out.poison(kFloatPoison);
        v_out.poison(kFloatPoison);
        kv_read(layer, length, TensorView::vector(k_out.data(), DType::f16, Device::cuda, n),
                TensorView::vector(v_out.data(), DType::f16, Device::cuda, n), nullptr);
        LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
        EXPECT_TRUE(k_out.guards_intact("k_out"));
        EXPECT_TRUE(v_out.guards_intact("v_out"));
        const auto got_k = download<std::uint16_t>(k_out.data(), static_cast<std::size_t>(n));
        const auto got_v = download<std::uint16_t>(v_out.data(), static_cast<std::size_t>(n));
        int bad = 0;
        for (std::size_t i = 0; i < got_k.size(); ++i) {
          if (got_k[i] != formats::float_to_half(twin.k.visible[i]).bits && bad++ < 3) ADD_FAILURE() << "k at " << i;
          if (got_v[i] != formats::float_to_half(twin.v.visible[i]).bits && bad++ < 3) ADD_FAILURE() << "v at " << i;
        }
        EXPECT_EQ(bad, 0);

        // Attention through the public entry, against the twin (the tolerance of
        // MatchesTheTwinInDouble).
        const auto q = random_f16(rng, heads, d, 1.5f);
        core::DeviceBuffer qd(q.size() * 2), ws(kv_attention_workspace_bytes(spec, heads, length));
        LOWBIT_CUDA_CHECK(cudaMemcpy(qd.data(), q.data(), qd.bytes(), cudaMemcpyHostToDevice));
        GuardedBuffer out(static_cast<std::size_t>(heads * d) * 4);
        out.poison(kFloatPoison);
        kv_attention(layer, length, TensorView::matrix(qd.data(), DType::f16, Device::cuda, heads, d),
                     TensorView::matrix(out.data(), DType::f32, Device::cuda, heads, d), Workspace{ws.data(), ws.bytes()},
                     nullptr);
        LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
        const TwinAttention ref = twin_attention(twin, q, heads);
        const auto got = download<float>(out.data(), static_cast<std::size_t>(heads * d));
        for (std::size_t i = 0; i < got.size(); ++i) {
          const std::size_t h = i / static_cast<std::size_t>(d);
          const double tol = ref.vmax[h] * (2.0 * static_cast<double>(d + 4) * 0x1p-24 * ref.smax[h] + 0x1p-15) + 1e-7;
          if (!(std::fabs(got[i] - ref.out[i]) <= tol) && bad++ < 3) {
            ADD_FAILURE() << "attention at " << i << ": " << got[i] << " vs " << ref.out[i];
          }
        }
        EXPECT_EQ(bad, 0);
        if (HasFailure()) return;
      }
    }
  }
}

TEST_F(KvCacheGpu, RejectsASmallWorkspace) {
  const ce::KvLayerShape s = kv_shape(KvPolicy::full, 3, 64, 0, 0, 0, 1000);
  const ce::DecodeSpan span = core::decode_span(s, 1000);
  core::DeviceBuffer q(9 * 64 * 2), out(9 * 64 * 4), ws(16);
  DeviceLayer layer(s);
  EXPECT_THROW(ce::kv_attention(s, layer.dev, span, q.data(), 9, out.data(), DType::f32, ws.data(), ws.bytes(),
                                    nullptr),
               Error);
}

// The combines read the partials 16 bytes at a time: a workspace 8 bytes past an aligned
// one (large enough) is refused with its reason, not read out of alignment.
TEST_F(KvCacheGpu, RejectsAMisalignedWorkspace) {
  const ce::KvLayerShape s = kv_shape(KvPolicy::full, 3, 64, 0, 0, 0, 1000);
  const ce::DecodeSpan span = core::decode_span(s, 1000);
  const std::size_t need = ce::kv_attention_workspace_bound(s, 9, 1000);
  core::DeviceBuffer q(9 * 64 * 2), out(9 * 64 * 4), ws(need + 16);
  DeviceLayer layer(s);
  void* shifted = static_cast<char*>(ws.data()) + 8;
  try {
    ce::kv_attention(s, layer.dev, span, q.data(), 9, out.data(), DType::f32, shifted, need, nullptr);
    ADD_FAILURE() << "a workspace 8 bytes off alignment was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("16-byte aligned"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lowbit::test

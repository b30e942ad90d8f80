#include "bench/decode/kv_attention_bench.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bench/common/device_fill.h"
#include "bench/common/json.h"
#include "bench/common/run_info.h"
#include "bench/common/timing.h"
#include "core/device_buffer.h"
#include "core/kv_layout.h"
#include "core/kv_pages.h"
#include "cuda/kv/kv_cuda.h"
#include "cuda/kv/paged_kv_cuda.h"
#include "formats/float16.h"
#include "lowbit/cuda_check.h"
#include "lowbit/error.h"

namespace lowbit::bench {
namespace {

using core::DeviceBuffer;

KvCacheSpec spec_of(const std::string& policy, const KvAttentionBenchOptions& o, std::int64_t max_tokens) {
  KvCacheSpec s{KvPolicy::full, o.kv_heads, o.head_dim, o.sink, o.window, 8, max_tokens};
  const KvPolicyBits choice = parse_kv_policy_bits(policy.c_str());
  s.policy = choice.policy;
  s.kv_bits = choice.bits;
  return s;
}

// One layer's buffers filled with random values a cache could hold (FP16 values in
// [-1, 1], codes, f16 scales of ~0.01 and minimums of ~0.5). With key blocks
// (s.key_block > 0), K's scales and mins are per block and channel (key_param_count) and
// its staging ring holds FP16 values like the slots'.
struct Layer {
  DeviceBuffer k_f16, v_f16, k_codes, v_codes, k_scales, v_scales, k_mins, v_mins, k_staged;
  core::KvLayerBuffers buffers;

  Layer(const core::KvLayerShape& s, std::uint64_t seed, cudaStream_t stream)
      : k_f16(s.f16_bytes()), v_f16(s.f16_bytes()), k_codes(s.code_bytes_total()), v_codes(s.code_bytes_total()),
        k_scales(s.key_param_count() * 2), v_scales(s.param_count() * 2),
        k_mins(s.has_mins() ? s.key_param_count() * 2 : 0), v_mins(s.has_mins() ? s.param_count() * 2 : 0),
        k_staged(s.staged_bytes()) {
    auto halves = [&](DeviceBuffer& b, float amplitude) {
      if (b.bytes()) fill_random_float16(b.data(), b.bytes() / 2, DType::f16, amplitude, seed++, stream);
    };
    halves(k_f16, 1.0f), halves(v_f16, 1.0f), halves(k_scales, 0.01f), halves(v_scales, 0.01f);
    halves(k_mins, 0.5f), halves(v_mins, 0.5f), halves(k_staged, 1.0f);
    for (DeviceBuffer* b : {&k_codes, &v_codes}) {
      if (b->bytes()) fill_random_bytes(b->data(), b->bytes(), seed++, stream);
    }
    buffers.k = core::KvPart{k_f16.as<std::uint16_t>(), k_codes.as<std::uint8_t>(), k_scales.as<std::uint16_t>(),
                             k_mins.bytes() ? k_mins.as<std::uint16_t>() : nullptr,
                             k_staged.bytes() ? k_staged.as<std::uint16_t>() : nullptr};
    buffers.v = core::KvPart{v_f16.as<std::uint16_t>(), v_codes.as<std::uint8_t>(), v_scales.as<std::uint16_t>(),
                             v_mins.bytes() ? v_mins.as<std::uint16_t>() : nullptr};
  }
};

// Bytes the attention must read of the cache at `length` (the visible positions as held),
// plus q and the f32 output. With key blocks, K's body is its complete blocks' codes with
// one scale (and min) per block and channel, and the open block's FP16 keys from the
// staging ring.
double bytes_read(const core::KvLayerShape& s, std::int64_t length, std::int64_t n_heads) {
  const core::DecodeSpan span = core::decode_span(s, length);
  const double row = static_cast<double>(s.kv_heads), d = static_cast<double>(s.head_dim);
  const double fp16 = static_cast<double>(span.visible(s) - (s.drops() ? 0 : span.recent_begin - span.sink_end));
  const double body = s.body == core::KvBody::none || s.drops() ? 0.0 : static_cast<double>(span.recent_begin - span.sink_end);
  const double params = s.has_mins() ? 4.0 : 2.0;  // f16 scale (+ min)
  const double per_token = row * (fp16 * d * 2.0 + body * (static_cast<double>(s.code_bytes()) + params));
  double k = per_token;
  if (s.key_blocks() && body > 0) {
    const std::int64_t open = s.open_block_begin(span.recent_begin);
    const double blocks = static_cast<double>((open - s.body_base) / s.key_block -
                                              (span.sink_end - s.body_base) / s.key_block);
    const double staged = static_cast<double>(span.recent_begin - open);
    k = row * (fp16 * d * 2.0 + (body - staged) * static_cast<double>(s.code_bytes()) + staged * d * 2.0 +
               blocks * d * params);
  }
  return k + per_token + static_cast<double>(n_heads * s.head_dim) * 6.0;
}

// "rel E": the relative L2 distance of got from want.
std::string relative_check(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    num += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
    den += static_cast<double>(want[i]) * want[i];
  }
  char text[48];
  std::snprintf(text, sizeof text, "rel %.1e", std::sqrt(num / std::max(den, 1e-30)));
  return text;
}

// The kernels a decode section times: the SIMT reference first, then the tensor-core
// kernels at the plan's split (length 0) and at each forced length.
std::vector<std::pair<cuda::kv::AttentionKernel, std::int64_t>> kernel_cases(const std::vector<std::int64_t>& lens,
                                                                             bool mma, bool mma_swap) {
  std::vector<std::pair<cuda::kv::AttentionKernel, std::int64_t>> cases{{cuda::kv::AttentionKernel::simt, 0}};
  std::vector<std::int64_t> all{0};
  all.insert(all.end(), lens.begin(), lens.end());
  for (const std::int64_t len : all) {
    if (mma) cases.emplace_back(cuda::kv::AttentionKernel::mma, len);
    if (mma_swap) cases.emplace_back(cuda::kv::AttentionKernel::mma_swap, len);
  }
  return cases;
}

// One kernel of the decode sections: its first output (into ref when it is the SIMT
// reference, else into out and compared with ref), then the timed samples.
struct KernelRun {
  std::string check;
  double ms = 0, ms_min = 0, ms_max = 0;
};
KernelRun run_kernel(const std::function<void(int, void*)>& launch, bool reference, DeviceBuffer& ref,
                     DeviceBuffer& out, cudaStream_t stream) {
  launch(0, reference ? ref.data() : out.data());
  LOWBIT_CUDA_CHECK(cudaStreamSynchronize(stream));
  KernelRun r;
  r.check = "reference";
  if (!reference) {
    std::vector<float> want(ref.bytes() / 4), got(out.bytes() / 4);
    LOWBIT_CUDA_CHECK(cudaMemcpy(want.data(), ref.data(), ref.bytes(), cudaMemcpyDeviceToHost));
    LOWBIT_CUDA_CHECK(cudaMemcpy(got.data(), out.data(), out.bytes(), cudaMemcpyDeviceToHost));
    r.check = relative_check(got, want);
  }
  const std::vector<double> samples = gpu_sample_ms([&](int i) { launch(i, out.data()); }, stream);
  r.ms = median(samples);
  r.ms_min = *std::min_element(samples.begin(), samples.end());
  r.ms_max = *std::max_element(samples.begin(), samples.end());
  return r;
}

// mma: the tensor-core kernel; mma_swap: its variant with positions as the mma's M and P in
// f16 only (attention_mma.cu), automatic's choice for GQA groups of up to 8.
const char* kernel_name(cuda::kv::AttentionKernel k) {
  return k == cuda::kv::AttentionKernel::mma ? "mma" : k == cuda::kv::AttentionKernel::mma_swap ? "mma_swap" : "simt";
}

// The rows form's kernels: automatic is flash's wgmma kernel where kv_attention_rows
// takes it (the full policy on Hopper), else mma.
const char* rows_kernel_name(cuda::kv::AttentionKernel k) {
  return k == cuda::kv::AttentionKernel::automatic ? "auto" : kernel_name(k);
}

// Prefill (--rows N): a chunk of N rows ending at the context, each row over what it sees
// at its position (kv_attention_rows), on the SIMT kernel, on tensor cores (mma) and, for
// the full policy, on automatic's kernel (flash wgmma on Hopper). FLOPs: 4 D
// per query head and position a row reads (Q K^T and P V); a quantized position is read
// once per view that holds it.
int run_rows_bench(const KvAttentionBenchOptions& o, const RunInfo& info, cudaStream_t stream) {
  std::printf("prefill: a chunk of %lld rows ending at the context, each row attending to what it sees at its\n"
              "position; %lld query heads over %lld KV heads of %lld; sink %lld, window %lld\n\n",
              static_cast<long long>(o.rows), static_cast<long long>(o.n_heads), static_cast<long long>(o.kv_heads),
              static_cast<long long>(o.head_dim), static_cast<long long>(o.sink), static_cast<long long>(o.window));
  std::printf("| context | policy | kernel | ms min | ms median | ms max | TFLOPS (median) | vs simt | check |\n"
              "|---:|---|---|---:|---:|---:|---:|---:|---|\n");
  Json rows = Json::array();
  const std::int64_t d = o.head_dim, q_cols = o.n_heads * d, ld = q_cols + 2 * o.kv_heads * d;
  for (const std::int64_t context : o.contexts) {
    LOWBIT_CHECK(context >= o.rows, "--context ", context, " is shorter than --rows ", o.rows);
    const std::int64_t pos0 = context - o.rows;
    for (const std::string& policy : o.policies) {
      const core::KvLayerShape s = core::kv_layer_shape(spec_of(policy, o, context));
      const Layer layer(s, 17, stream);
      DeviceBuffer chunk_rows(static_cast<std::size_t>(o.rows * ld) * 2), snapshot(std::max<std::size_t>(
                                                                               cuda::kv::ring_snapshot_bytes(s), 16));
      fill_random_float16(chunk_rows.data(), chunk_rows.bytes() / 2, DType::f16, 1.0f, 5, stream);
      fill_random_float16(snapshot.data(), snapshot.bytes() / 2, DType::f16, 1.0f, 6, stream);
      const cuda::kv::ChunkRows chunk{chunk_rows.data(), o.rows, ld, q_cols, q_cols + o.kv_heads * d, pos0};
      double flops = 0;
      for (std::int64_t t = pos0; t < context; ++t) {
        flops += 4.0 * static_cast<double>(d * o.n_heads * core::decode_span(s, t + 1).visible(s));
      }
      const std::size_t ws_bytes = cuda::kv::kv_attention_rows_workspace(s, o.n_heads, o.rows, context);
      DeviceBuffer ws(ws_bytes), ref(static_cast<std::size_t>(o.rows * q_cols) * 2), out(ref.bytes());
      std::vector<std::uint16_t> ref_host(static_cast<std::size_t>(o.rows * q_cols)), out_host(ref_host.size());
      double simt_ms = 0;
      // automatic: flash's wgmma kernels on Hopper (full: over the FP16 slots; the other
      // policies: the sink, body and recent segments), else the mma rows kernel again.
      const std::vector<cuda::kv::AttentionKernel> kernels{
          cuda::kv::AttentionKernel::simt, cuda::kv::AttentionKernel::mma, cuda::kv::AttentionKernel::automatic};
      for (const auto kernel : kernels) {
        auto launch = [&](void* dst) {
          cuda::kv::kv_attention_rows(s, layer.buffers, chunk, snapshot.data(), o.n_heads, dst, q_cols, ws.data(),
                                      ws_bytes, stream, kernel);
        };
        const bool simt = kernel == cuda::kv::AttentionKernel::simt;
        launch(simt ? ref.data() : out.data());
        LOWBIT_CUDA_CHECK(cudaStreamSynchronize(stream));
        std::string check = "reference";
        if (!simt) {
          LOWBIT_CUDA_CHECK(cudaMemcpy(ref_host.data(), ref.data(), ref.bytes(), cudaMemcpyDeviceToHost));
          LOWBIT_CUDA_CHECK(cudaMemcpy(out_host.data(), out.data(), out.bytes(), cudaMemcpyDeviceToHost));
          double num = 0, den = 0;
          for (std::size_t i = 0; i < ref_host.size(); ++i) {
            const double a = formats::half_to_float({out_host[i]}), b = formats::half_to_float({ref_host[i]});
            num += (a - b) * (a - b);
            den += b * b;
          }
          char text[48];
          std::snprintf(text, sizeof text, "rel %.1e", std::sqrt(num / std::max(den, 1e-30)));
          check = text;
        }
        const std::vector<double> samples = gpu_sample_ms([&](int) { launch(out.data()); }, stream, simt ? 5 : 15);
        const double ms = median(samples);
        const double ms_min = *std::min_element(samples.begin(), samples.end());
        const double ms_max = *std::max_element(samples.begin(), samples.end());
        if (simt) simt_ms = ms;
        const double tflops = flops / (ms * 1e9);
        std::printf("| %lld | %s | %s | %.3f | %.3f | %.3f | %.1f | %.1fx | %s |\n", static_cast<long long>(context),
                    policy.c_str(), rows_kernel_name(kernel), ms_min, ms, ms_max, tflops, simt_ms / ms, check.c_str());
        Json row = Json::object();
        row.set("context", context).set("rows", o.rows).set("policy", policy).set("kernel", rows_kernel_name(kernel));
        row.set("ms", ms).set("ms_min", ms_min).set("ms_max", ms_max).set("tflops", tflops).set("check", check);
        rows.push(row);
      }
    }
  }
  std::printf("\nTFLOPS: 4 x head_dim x query heads x the positions each row reads, over the median time.\n");
  if (!o.json_path.empty()) {
    Json doc = run_info_json("kv_attention_rows", info);
    doc.set("n_heads", o.n_heads).set("kv_heads", o.kv_heads).set("head_dim", o.head_dim).set("chunk_rows", o.rows);
    doc.set("rows", rows);
    doc.write_file(o.json_path);
  }
  return 0;
}

// The decode sections' first lines: what one call attends over (`what`, the layer's
// heads, sink and window, `more`) and the copy ceiling of the run.
void print_setup(const char* what, const char* more, const KvAttentionBenchOptions& o, double copy_gbps) {
  std::printf("%s %lld query heads over %lld KV heads of %lld; sink %lld, window %lld%s\n", what,
              static_cast<long long>(o.n_heads), static_cast<long long>(o.kv_heads), static_cast<long long>(o.head_dim),
              static_cast<long long>(o.sink), static_cast<long long>(o.window), more);
  std::printf("ceiling: device-to-device copy %.0f GB/s (bytes read + written), measured in this run\n\n", copy_gbps);
}

// The decode sections' JSON (with --json): the run, the layer's shape, the ceiling, rows.
void write_json(const char* benchmark, const KvAttentionBenchOptions& o, const RunInfo& info, double copy_gbps,
                const Json& rows) {
  if (o.json_path.empty()) return;
  Json doc = run_info_json(benchmark, info);
  doc.set("n_heads", o.n_heads).set("kv_heads", o.kv_heads).set("head_dim", o.head_dim);
  doc.set("key_block", o.key_block).set("gpu_copy_gbps", copy_gbps).set("rows", rows);
  doc.write_file(o.json_path);
}

// The serving form (--batch): B sequences of `context` positions each in a paged pool
// (pages handed out shuffled, as after a server's churn), every row's newest query in
// one paged_kv_attention launch, on each kernel; the bytes are B times the one
// sequence's (bytes_read), against the copy ceiling. Enough layers of the pool to rotate
// through that the rotation defeats the L2. Outputs compared with the SIMT kernel's.
int run_batch_bench(const KvAttentionBenchOptions& o, const RunInfo& info, double copy_gbps, cudaStream_t stream) {
  print_setup("batched decode over the paged cache: B sequences of `context` positions in one launch, each",
              "; pages of 16 positions, shuffled", o, copy_gbps);
  std::printf("| context | B | policy | kernel | splits x length | ms min | ms median | ms max | MB read | GB/s | "
              "%% of copy ceiling (median; at min) | check |\n"
              "|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---|\n");
  Json rows = Json::array();
  const std::int64_t d = o.head_dim, q_cols = o.n_heads * d, ld = q_cols + 2 * o.kv_heads * d;
  for (const std::int64_t context : o.contexts) {
    for (const std::int64_t batch : o.batches) {
      for (const std::string& policy : o.policies) {
        const KvCacheSpec spec = spec_of(policy, o, context);
        const core::KvLayerShape s = core::kv_layer_shape(spec);
        const double bytes = static_cast<double>(batch) * bytes_read(s, context, o.n_heads);
        const auto layers = static_cast<std::int64_t>(std::clamp<double>(256e6 / bytes + 1, 1, 8));
        // The layout's page and fixed-area sizes first, then a pool of exactly the pages
        // the batch holds.
        const core::KvPageLayout probe = core::kv_page_layout(spec, layers, std::size_t{1} << 40, batch);
        const std::int64_t pages_needed = batch * std::max<std::int64_t>(probe.pages_for(context), 1);
        const std::size_t budget =
            probe.fixed_bytes_total() + static_cast<std::size_t>(pages_needed * layers * probe.page_bytes());
        const core::KvPageLayout layout = core::kv_page_layout(spec, layers, budget, batch);
        core::KvPageAllocator pages(layout, 0x5eed);
        std::vector<core::KvSeqDesc> descs;
        for (std::int64_t b = 0; b < batch; ++b) {
          const std::int32_t slot = pages.open();
          pages.grow(slot, context);
          descs.push_back({static_cast<std::int32_t>(context - 1), slot});
        }
        core::check_paged_batch(layout, descs.data(), batch, pages.tables().data(), context);
        DeviceBuffer pool(layout.pool_bytes()), tables(pages.tables().size() * 4),
            descs_dev(descs.size() * sizeof(core::KvSeqDesc)), status(4), q(static_cast<std::size_t>(batch * ld) * 2);
        // Small values everywhere (FP16 rows, codes' scales and minimums alike; codes are
        // any bytes): finite scores whatever each byte holds.
        fill_random_float16(pool.data(), pool.bytes() / 2, DType::f16, 0.05f, 21, stream);
        fill_random_float16(q.data(), q.bytes() / 2, DType::f16, 1.0f, 22, stream);
        LOWBIT_CUDA_CHECK(cudaMemcpyAsync(tables.data(), pages.tables().data(), tables.bytes(), cudaMemcpyHostToDevice,
                                          stream));
        LOWBIT_CUDA_CHECK(
            cudaMemcpyAsync(descs_dev.data(), descs.data(), descs_dev.bytes(), cudaMemcpyHostToDevice, stream));
        LOWBIT_CUDA_CHECK(cudaMemsetAsync(status.data(), 0, 4, stream));
        const cuda::kv::PagedBatch paged{descs_dev.as<core::KvSeqDesc>(), tables.as<std::int32_t>(), batch, context,
                                         status.as<std::int32_t>()};
        const cuda::kv::BatchRows qrows{q.data(), ld, q_cols, q_cols + o.kv_heads * d};
        // The plan's workspace, and room for the partials of the shortest forced length.
        const std::size_t plan_ws = cuda::kv::paged_kv_attention_workspace(layout, o.n_heads, batch, context);
        std::size_t ws_bytes = plan_ws;
        for (const std::int64_t len : o.split_lens) {
          ws_bytes = std::max(ws_bytes, plan_ws + core::decode_workspace_bytes(o.n_heads, d, (context + len - 1) / len) *
                                                      static_cast<std::size_t>(batch));
        }
        DeviceBuffer ws(ws_bytes), ref(static_cast<std::size_t>(batch * q_cols) * 4), out(ref.bytes());
        LOWBIT_CUDA_CHECK(cudaMemsetAsync(ws.data(), 0, ws_bytes, stream));  // the combine's counters
        for (const auto& [kernel, split_len] : kernel_cases(o.split_lens, true, true)) {
          auto launch = [&](int i, void* dst) {
            const core::KvPagedLayer layer = core::kv_paged_layer(layout, pool.data(), i % layers);
            cuda::kv::paged_kv_attention(layout, layer, paged, qrows, o.n_heads, dst, q_cols, DType::f32, ws.data(),
                                         ws_bytes, stream, false, kernel, split_len);
          };
          const KernelRun run = run_kernel(launch, kernel == cuda::kv::AttentionKernel::simt, ref, out, stream);
          const double ms = run.ms, ms_min = run.ms_min, ms_max = run.ms_max;
          const std::string& check = run.check;
          const double gbps = bytes / (ms * 1e6);
          const core::DecodeSplitPlan plan =
              split_len > 0 ? core::decode_plan_of_length(context, split_len)
                            : cuda::kv::paged_kv_attention_plan(layout, o.n_heads, batch, context, kernel);
          std::printf("| %lld | %lld | %s | %s | %lld x %lld%s | %.4f | %.4f | %.4f | %.1f | %.0f | %.0f%%; %.0f%% "
                      "| %s |\n",
                      static_cast<long long>(context), static_cast<long long>(batch), policy.c_str(),
                      kernel_name(kernel), static_cast<long long>(plan.splits), static_cast<long long>(plan.split_len),
                      split_len > 0 ? " (forced)" : "", ms_min, ms, ms_max, bytes / 1e6, gbps,
                      100.0 * gbps / copy_gbps, 100.0 * bytes / (ms_min * 1e6) / copy_gbps, check.c_str());
          Json row = Json::object();
          row.set("context", context).set("batch", batch).set("policy", policy).set("kernel", kernel_name(kernel));
          row.set("splits", plan.splits).set("split_len", plan.split_len).set("forced_split", split_len > 0);
          row.set("ms", ms).set("ms_min", ms_min).set("ms_max", ms_max);
          row.set("bytes", bytes).set("gbps", gbps).set("pct_copy", 100.0 * gbps / copy_gbps).set("check", check);
          rows.push(row);
        }
        cuda::kv::paged_kv_check_status(status.as<std::int32_t>(), stream);
      }
    }
  }
  std::printf("\nMB read: B x the visible cache as held (FP16 rows, codes with their f16 scales and minimums) + q +"
              " out.\n");
  write_json("kv_attention_batch", o, info, copy_gbps, rows);
  return 0;
}

}  // namespace

int run_kv_attention_bench(const KvAttentionBenchOptions& o) {
  LOWBIT_CHECK(gpu_available(), "bench kv-attention: needs a CUDA GPU (none found)");
  LOWBIT_CHECK(o.kv_heads >= 1 && o.n_heads % o.kv_heads == 0, "--heads: ", o.n_heads, " query heads are not a multiple of ",
               o.kv_heads, " KV heads");
  for (const std::string& p : o.policies) (void)spec_of(p, o, 1);
  LOWBIT_CHECK(o.key_block == 0 || (o.key_block % 16 == 0 && o.key_block <= 1024 && o.rows == 1 && o.batches.empty()),
               "bench kv-attention: key_block ", o.key_block, ", expected a multiple of 16 up to 1024, in the "
               "one-sequence decode form only");
  const RunInfo info = collect_run_info();
  cudaStream_t stream{};
  LOWBIT_CUDA_CHECK(cudaStreamCreate(&stream));
  std::printf("# lowbit bench kv-attention\n\ncommit %s, %s\ngpu: %s, driver %s\n\n", info.commit.c_str(),
              info.date.c_str(), info.gpu.c_str(), info.driver.c_str());
  if (o.rows > 1) {
    const int status = run_rows_bench(o, info, stream);
    LOWBIT_CUDA_CHECK(cudaStreamDestroy(stream));
    return status;
  }
  const double copy_gbps = measure_copy_gbps(std::size_t{1} << 30, stream);
  if (!o.batches.empty()) {
    const int status = run_batch_bench(o, info, copy_gbps, stream);
    LOWBIT_CUDA_CHECK(cudaStreamDestroy(stream));
    return status;
  }
  // Key blocks: K per channel over blocks of key_block tokens, on the policies with a body,
  // read by simt and mma_swap (automatic's choice; mma refuses them).
  const bool key_blocks = o.key_block > 0;
  const bool swap_takes_key_blocks = o.n_heads / o.kv_heads <= cuda::kv::kMmaSwapMaxGroup;
  const std::string key_block_text =
      key_blocks ? "; K per channel over blocks of " + std::to_string(o.key_block) + " tokens (KIVI)" : "";
  print_setup("one query token,", key_block_text.c_str(), o, copy_gbps);
  if (key_blocks) {
    for (const std::string& policy : o.policies) {
      if (!core::with_key_block(core::kv_layer_shape(spec_of(policy, o, 1)), o.key_block).key_blocks()) {
        std::printf("note: --kv-key-block: %s keeps every key FP16 (no quantized body); skipped\n", policy.c_str());
      }
    }
    if (!swap_takes_key_blocks) {
      std::printf("note: --kv-key-block: mma_swap takes GQA groups of up to %d, this one is %lld; simt only\n",
                  cuda::kv::kMmaSwapMaxGroup, static_cast<long long>(o.n_heads / o.kv_heads));
    }
    std::printf("\n");
  }
  std::printf("| context | policy | kernel | ms min | ms median | ms max | MB read | GB/s | %% of copy ceiling "
              "(median; at min) | vs simt |\n"
              "|---:|---|---|---:|---:|---:|---:|---:|---:|---|\n");
  Json rows = Json::array();
  for (const std::int64_t context : o.contexts) {
    for (const std::string& policy : o.policies) {
      const KvCacheSpec spec = spec_of(policy, o, context);
      const core::KvLayerShape s = core::with_key_block(core::kv_layer_shape(spec), o.key_block);
      if (key_blocks && !s.key_blocks()) continue;  // noted above
      const double bytes = bytes_read(s, context, o.n_heads);
      // Enough layers that rotating through them defeats the 50 MB L2.
      const int copies = static_cast<int>(std::clamp<double>(256e6 / bytes + 1, 1, 16));
      std::vector<std::unique_ptr<Layer>> layers;
      for (int i = 0; i < copies; ++i) layers.push_back(std::make_unique<Layer>(s, 1000u * i + 7, stream));
      DeviceBuffer q(static_cast<std::size_t>(o.n_heads * o.head_dim) * 2);
      fill_random_float16(q.data(), static_cast<std::size_t>(o.n_heads * o.head_dim), DType::f16, 1.0f, 99, stream);
      const core::DecodeSpan span = core::decode_span(s, context);
      DeviceBuffer ref(static_cast<std::size_t>(o.n_heads * o.head_dim) * 4), out(ref.bytes());
      // The plan's split for each kernel, then (--split-len) the tensor-core kernels at each
      // given split length: split_len 0 is the plan's. Key blocks: no mma.
      const bool mma = !key_blocks, mma_swap = !key_blocks || swap_takes_key_blocks;
      for (const auto& [kernel, split_len] : kernel_cases(o.split_lens, mma, mma_swap)) {
        const core::DecodeSplitPlan plan =
            split_len > 0 ? core::decode_plan_of_length(span.visible(s), split_len)
                          : cuda::kv::kv_attention_plan(s, span, o.n_heads, kernel);
        const std::size_t ws_bytes = core::decode_workspace_bytes(o.n_heads, o.head_dim, plan.splits);
        DeviceBuffer ws(ws_bytes);
        auto launch = [&](int i, void* dst) {
          cuda::kv::kv_attention(s, layers[static_cast<std::size_t>(i % copies)]->buffers, span, q.data(), o.n_heads,
                                 dst, DType::f32, ws.data(), ws_bytes, stream, kernel, split_len);
        };
        const KernelRun run = run_kernel(launch, kernel == cuda::kv::AttentionKernel::simt, ref, out, stream);
        const double ms = run.ms, ms_min = run.ms_min, ms_max = run.ms_max;
        const std::string& check = run.check;
        const double gbps = bytes / (ms * 1e6);
        const std::string name = std::string(kernel_name(kernel)) +
                                 (split_len > 0 ? " split " + std::to_string(plan.splits) + " x " +
                                                      std::to_string(plan.split_len)
                                                : "");
        std::printf("| %lld | %s | %s | %.4f | %.4f | %.4f | %.1f | %.0f | %.0f%%; %.0f%% | %s |\n",
                    static_cast<long long>(context), policy.c_str(), name.c_str(), ms_min, ms, ms_max, bytes / 1e6,
                    gbps, 100.0 * gbps / copy_gbps, 100.0 * bytes / (ms_min * 1e6) / copy_gbps, check.c_str());
        Json row = Json::object();
        row.set("context", context).set("policy", policy).set("kernel", kernel_name(kernel)).set("ms", ms);
        row.set("splits", plan.splits).set("split_len", plan.split_len).set("forced_split", split_len > 0);
        row.set("ms_min", ms_min).set("ms_max", ms_max);
        row.set("bytes", bytes).set("gbps", gbps).set("pct_copy", 100.0 * gbps / copy_gbps).set("check", check);
        rows.push(row);
      }
    }
  }
  LOWBIT_CUDA_CHECK(cudaStreamDestroy(stream));
  std::printf("\nMB read: the visible cache as held (FP16 rows, codes with their f16 scales and minimums%s) + q + "
              "out.\n",
              key_blocks ? "; K's per block and channel, and its open block's FP16 keys from the staging ring" : "");
  write_json("kv_attention", o, info, copy_gbps, rows);
  return 0;
}

}  // namespace lowbit::bench

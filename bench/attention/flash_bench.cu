#include "bench/attention/flash_bench.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>

#include "bench/common/device_fill.h"
#include "bench/common/json.h"
#include "bench/common/run_info.h"
#include "bench/common/timing.h"
#include "core/device_buffer.h"
#include "cuda/flash/flash_cuda.h"
#include "lowbit/cuda_check.h"
#include "lowbit/error.h"
#include "lowbit/flash_attention.h"

namespace lowbit::bench {

int run_flash_bench(const FlashBenchOptions& o) {
  LOWBIT_CHECK(gpu_available(), "bench attention: needs a CUDA GPU (none found)");
  LOWBIT_CHECK(o.seq_len >= 1 && o.seq_len < (1ll << 31), "--seq-len: expected 1..2^31-1, got ", o.seq_len);
  const RunInfo info = collect_run_info();
  cudaStream_t stream{};
  LOWBIT_CUDA_CHECK(cudaStreamCreate(&stream));
  std::printf("# lowbit bench attention\n\ncommit %s, %s\ngpu: %s, driver %s\n\n", info.commit.c_str(),
              info.date.c_str(), info.gpu.c_str(), info.driver.c_str());
  std::printf("flash_attention, one sequence of L %lld, %lld query heads over %lld KV heads (the peer, PyTorch's "
              "SDPA: python -m lowbit.bench_attention, or bench/attention/sdpa_peer.py alone)\n\n",
              static_cast<long long>(o.seq_len), static_cast<long long>(o.heads), static_cast<long long>(o.kv_heads));
  const bool repeats = o.repeat > 1;
  std::printf("| %skernel | dtype | head_dim | mask | ms min | ms median | ms max | TFLOPS (median) |\n"
              "|%s---|---|---:|---|---:|---:|---:|---:|\n",
              repeats ? "repeat | " : "", repeats ? "---:|" : "");
  // Each kernel by name (the public entry picks wgmma where it runs), the prefix sums
  // uploaded once.
  std::vector<cuda::flash::FlashKernel> kernels{cuda::flash::FlashKernel::mma};
  if (cuda::flash::flash_wgmma_available()) kernels.push_back(cuda::flash::FlashKernel::wgmma);
  Json rows = Json::array();
  const std::int32_t l = static_cast<std::int32_t>(o.seq_len);
  const std::vector<std::int32_t> cu{0, l};
  for (const std::string& name : o.dtypes) {
    const DType dtype = name == "bf16" ? DType::bf16 : DType::f16;
    for (const std::int64_t hd : o.head_dims)
    for (std::int64_t rep = 0; rep < o.repeat; ++rep) {
      // Repetition r's inputs after a spacer of r x (4 MiB + 64 KiB), held while they are:
      // each repetition's buffers at other addresses.
      const core::DeviceBuffer spacer(static_cast<std::size_t>(rep) * ((4u << 20) + (64u << 10)) + 256);
      const std::int64_t q_cols = o.heads * hd, kv_cols = o.kv_heads * hd;
      const auto q_bytes = static_cast<std::size_t>(o.seq_len * q_cols) * 2;
      const auto kv_bytes = static_cast<std::size_t>(o.seq_len * kv_cols) * 2;
      core::DeviceBuffer q(q_bytes), k(kv_bytes), v(kv_bytes), out(q_bytes), cu_device(2 * sizeof(std::int32_t));
      LOWBIT_CUDA_CHECK(cudaMemcpy(cu_device.data(), cu.data(), 2 * sizeof(std::int32_t), cudaMemcpyHostToDevice));
      const auto* cu_d = static_cast<const std::int32_t*>(cu_device.data());
      fill_random_float16(q.data(), q.bytes() / 2, dtype, 1.0f, 1, stream);
      fill_random_float16(k.data(), k.bytes() / 2, dtype, 1.0f, 2, stream);
      fill_random_float16(v.data(), v.bytes() / 2, dtype, 1.0f, 3, stream);
      auto matrix = [&](const core::DeviceBuffer& b, std::int64_t cols) {
        return TensorView::matrix(b.data(), dtype, Device::cuda, o.seq_len, cols);
      };
      for (const auto kernel : kernels)
      for (const bool causal : {true, false}) {
        const FlashAttentionParams p{o.heads, o.kv_heads, hd, causal, 0.0f};
        const std::vector<double> samples = gpu_sample_ms(
            [&](int) {
              cuda::flash::flash_attention(matrix(q, q_cols), matrix(k, kv_cols), matrix(v, kv_cols),
                                           matrix(out, q_cols), cu_d, cu_d, 1, o.seq_len, p, stream, kernel);
            },
            stream, 15, o.sample_ms, o.idle_ms);
        const char* kernel_name = kernel == cuda::flash::FlashKernel::wgmma ? "wgmma" : "mma.sync";
        const double ms = median(samples);
        const double ms_min = *std::min_element(samples.begin(), samples.end());
        const double ms_max = *std::max_element(samples.begin(), samples.end());
        const double flops = 4.0 * static_cast<double>(hd * o.heads) * static_cast<double>(o.seq_len) *
                             static_cast<double>(o.seq_len) / (causal ? 2.0 : 1.0);
        const double tflops = flops / (ms * 1e9);
        if (repeats) std::printf("| %lld ", static_cast<long long>(rep + 1));
        std::printf("| %s | %s | %lld | %s | %.3f | %.3f | %.3f | %.0f |\n", kernel_name, name.c_str(),
                    static_cast<long long>(hd), causal ? "causal" : "none", ms_min, ms, ms_max, tflops);
        Json row = Json::object();
        row.set("kernel", kernel_name).set("dtype", name).set("head_dim", hd).set("causal", causal).set("ms", ms).set("ms_min", ms_min);
        row.set("ms_max", ms_max).set("tflops", tflops);
        if (repeats) row.set("repeat", rep + 1);
        rows.push(row);
      }
    }
  }
  LOWBIT_CUDA_CHECK(cudaStreamDestroy(stream));
  std::printf("\nTFLOPS: 4 x head_dim x heads x L^2 (halved by the causal mask) over the median time.\n");
  std::printf("Each sample: back-to-back launches for >= %.1f ms", o.sample_ms);
  if (o.idle_ms > 0) std::printf(", after the host slept %.1f ms", o.idle_ms);
  std::printf(".\n");
  if (!o.json_path.empty()) {
    Json doc = run_info_json("attention", info);
    doc.set("seq_len", o.seq_len).set("heads", o.heads).set("kv_heads", o.kv_heads).set("idle_ms", o.idle_ms).set("sample_ms", o.sample_ms);
    doc.set("rows", rows);
    doc.write_file(o.json_path);
  }
  return 0;
}

}  // namespace lowbit::bench

// `lowbit bench kvquant|gemm`: option parsing in front of the benchmark drivers
// (`batch` and `serve` are in cmd_bench_batch.cpp and cmd_bench_serve.cpp).
#include <iostream>
#include <limits>
#include <string>

#include "bench/attention/flash_bench.h"
#include "bench/decode/decode_bench.h"
#include "bench/decode/kv_attention_bench.h"
#include "bench/gemm/gemm_bench.h"
#include "bench/kvquant/kvquant_bench.h"
#include "commands.h"
#include "core/kv_layout.h"
#include "dispatch.h"
#include "engine_setup.h"
#include "list_options.h"
#include "lowbit/error.h"
#include "options.h"
#include "threads.h"

namespace lowbit::cli {
namespace {

constexpr std::int64_t kMaxInt = std::numeric_limits<std::int64_t>::max();

int bench_kvquant(const Args& args) {
  bench::KvBenchOptions options;
  std::vector<std::string> case_names;
  for (const auto& kv_case : bench::kv_cases()) case_names.push_back(kv_case.name);
  bool no_matrix = false;
  std::int64_t seed = static_cast<std::int64_t>(options.seed);
  Options cli("lowbit bench kvquant",
              "Per-channel symmetric INT8 of a T x D fp32 key or value matrix over ten cases (1024x64 ..\n"
              "131072x8192, 262144x128): the original benchmark's CPU code, lowbit's CPU path, its four GPU kernels\n"
              "(naive, tiled, coarsened, vectorized) and lowbit's production kernels, each checked bit for bit\n"
              "against the CPU reference; then the production path over f32/f16/bf16 x int8/int4 x\n"
              "channel/token/group on the cases of at least 16M elements.");
  cli.text("--json", &options.json_path, "FILE", "also write the results as JSON");
  cli.integer("--max-elements", &options.max_elements, 1, kMaxInt,
              "skip cases larger than N elements (default: none with a GPU, 2^25 without)");
  cli.choices("--case", &options.only_cases, case_names, "run only this case");
  cli.flag("--cpu-only", &options.cpu_only, "do not use the GPU even if there is one");
  cli.flag("--no-matrix", &no_matrix, "skip the dtype x granularity x scheme matrix");
  cli.integer("-s, --seed", &seed, 1, kMaxInt, "input seed (default 20261122)");
  ThreadsFlag threads;
  threads.declare(cli);
  if (const auto status = cli.parse(args)) return *status;
  threads.apply();
  options.matrix = !no_matrix;
  options.seed = static_cast<std::uint64_t>(seed);
  return bench::run_kvquant_bench(options);
}

int bench_gemm(const Args& args) {
  bench::GemmBenchOptions options;
  Options cli("lowbit bench gemm",
              "Quantized GEMMs against cuBLASLt INT8 and cuBLAS FP16 in the same run: INT8 kernels from the\n"
              "textbook progression (naive, tiled, vectorized, WMMA) to lowbit's (mma.sync, wgmma) at 128^3 .. 8192^3\n"
              "and decode shapes M in {1, 16, 64, 128} x (N, K) in {(4096, 4096), (28672, 8192), (8192, 28672)}; the\n"
              "fused scale + bias + ReLU epilogue; packed INT4; weight-only W4A16 / W8A16. Every configuration is\n"
              "checked first (integers exactly against cuBLASLt). Without a GPU: the CPU reference on small shapes.");
  cli.text("--json", &options.json_path, "FILE", "also write the results as JSON");
  cli.flag("--quick", &options.quick, "small cases only");
  cli.choices("--section", &options.only_sections, {"int8", "epilogue", "int4", "weight_only", "weight_only_variants",
                                                     "weight_only_blocks", "weight_only_wgmma"},
              "run only this section (weight_only_variants, a tuning sweep, weight_only_blocks, the GEMV on GGML block "
              "types, and weight_only_wgmma, the Hopper kernel for M > 16 at M 16 .. 8192, only when named)");
  cli.flag("--cpu-only", &options.cpu_only, "do not use the GPU even if there is one");
  cli.integer("--max-m", &options.max_m, 0, 1 << 20,
              "weight-only section: only the cases with M <= this (0: all; 16 = the decode kernel)");
  cli.integer("--min-m", &options.min_m, 0, 1 << 20, "weight-only sections: only the cases with M >= this");
  cli.text("--shape", &options.shape, "NxK", "weight-only sections: only this weight shape, e.g. 28672x8192");
  ThreadsFlag threads;
  threads.declare(cli);
  if (const auto status = cli.parse(args)) return *status;
  threads.apply();
  return bench::run_gemm_bench(options);
}

int bench_decode(const Args& args) {
  bench::DecodeBenchOptions options;
  std::string model, contexts = "2048", policies = "full";
  std::int64_t runs = options.runs;
  Options cli("lowbit bench decode",
              "Batch-1 decode on the GPU after a prompt of each context length, per KV-cache policy: tokens/s\n"
              "(median [min, max] of the runs), device ms a token, bytes a token reads (weights + the cache as\n"
              "held) against the copy ceiling measured in the same run, prefill tokens/s of the prompt, device\n"
              "memory in use. Models of real shape without a download: lowbit model synth.");
  cli.text("--model", &model, "PATH", "a GGUF file (default: the cached SmolLM2-135M-Instruct)");
  cli.text("--context", &contexts, "N[,N...]", "prompt lengths (default 2048)");
  cli.text("--policy", &policies, "P[,P...]", "full, window, selective8, selective4, int8, int4 (default full)");
  cli.integer("--steps", &options.steps, 1, 1 << 20, "decode steps a run (default 128)");
  cli.integer("--runs", &runs, 1, 100, "runs a case (default 3)");
  cli.integer("--max-tokens", &options.max_tokens, 0, 1LL << 30,
              "the session's capacity, as `generate` sizes one for prompt + --max-new-tokens (default: what "
              "the runs need)");
  cli.integer("--sink", &options.sink, 0, 1 << 20, "sink tokens of window / selective (default 16)");
  cli.integer("--window", &options.window, 1, 1 << 20, "window tokens of window / selective (default 32)");
  cli.integer("--kv-key-block", &options.kv_key_block, 0, 1024,
              "keys per channel over blocks of N tokens (KIVI; even N; 0: per token, the default)");
  bool no_pdl = false;
  cli.flag("--no-pdl", &no_pdl, "kernels launch without programmatic dependent launch (for comparison)");
  cli.text("--json", &options.json_path, "FILE", "also write the results as JSON");
  if (const auto status = cli.parse(args)) return *status;
  options.programmatic_launch = !no_pdl;
  options.model_path = resolve_model_path(model);
  options.runs = static_cast<int>(runs);
  options.contexts = parse_positive_integers(contexts, "--context", 1LL << 30);
  options.policies = split_list(policies, "--policy");
  return bench::run_decode_bench(options);
}

int bench_kv_attention(const Args& args) {
  bench::KvAttentionBenchOptions options;
  std::string contexts = "2048,8192,32768,131072", policies = "full,selective8,selective4,int8,int4";
  Options cli("lowbit bench kv-attention",
              "The decode attention of one layer (one query token over the KV cache) on the GPU, per context\n"
              "length, policy and kernel (simt: f32 on the CUDA cores; mma: tensor cores): time, the bytes it\n"
              "must read (the visible cache as held) and that against the copy ceiling measured in the same run.\n"
              "The kernels' outputs are compared first. With --rows N: the prefill form instead, a chunk of N\n"
              "query rows ending at each context (simt, mma on tensor cores, and auto: flash's wgmma kernels on\n"
              "Hopper, else mma; in TFLOPS). With --batch B: B sequences of each context over a paged cache, one\n"
              "launch (the serving engine's decode step). With --kv-key-block B: the decode form with K per\n"
              "channel over blocks of B tokens (KIVI), on simt and mma_swap.");
  cli.integer("--heads", &options.n_heads, 1, 4096, "query heads (default 32)");
  cli.integer("--kv-heads", &options.kv_heads, 1, 1024, "KV heads (default 8)");
  cli.integer("--head-dim", &options.head_dim, 64, 128, "64 or 128 (default 128)");
  cli.text("--context", &contexts, "N[,N...]", "cached positions (default 2048,8192,32768,131072)");
  cli.text("--policy", &policies, "P[,P...]", "full, window, selective8, selective4, int8, int4 (default all but window)");
  cli.integer("--sink", &options.sink, 0, 1 << 20, "sink tokens (default 16)");
  cli.integer("--window", &options.window, 1, 1 << 20, "window tokens (default 32)");
  cli.integer("--kv-key-block", &options.key_block, 0, 1024,
              "decode form: keys per channel over blocks of N tokens (KIVI; a multiple of 16; 0: per token, the "
              "default); int8, int4, selective8, selective4 only (the others are skipped); simt and mma_swap");
  cli.integer("--rows", &options.rows, 1, 65535, "query rows: 1 decode (default), more: a prefill chunk");
  std::string batches;
  cli.text("--batch", &batches, "B[,B...]", "sequences decoded at once over a paged cache (one launch; default: one "
                                            "sequence, contiguous)");
  std::string split_lens;
  cli.text("--split-len", &split_lens, "L[,L...]",
           "decode and batch forms: the tensor-core kernels also at these split lengths (multiples of 16 up to "
           "4096) beside the plan's, to tune it");
  cli.text("--json", &options.json_path, "FILE", "also write the results as JSON");
  if (const auto status = cli.parse(args)) return *status;
  options.contexts = parse_positive_integers(contexts, "--context", 1LL << 30);
  options.policies = split_list(policies, "--policy");
  if (!batches.empty()) options.batches = parse_positive_integers(batches, "--batch", 65535);
  if (!split_lens.empty()) options.split_lens = parse_positive_integers(split_lens, "--split-len",
                                                                            core::DecodeSplitPlan::kMaxMmaSplit);
  for (const std::int64_t len : options.split_lens) {
    usage_check(len % 16 == 0, "--split-len: ", len, " is not a multiple of 16");
  }
  usage_check(options.split_lens.empty() || options.rows == 1,
              "--split-len: the decode and batch forms only (not with --rows)");
  usage_check(options.batches.empty() || options.rows == 1, "--batch and --rows: one form at a time (the paged "
              "batch decodes one row a sequence)");
  usage_check(options.key_block % 16 == 0, "--kv-key-block: ", options.key_block,
              " is not a multiple of 16 (mma_swap's tiles; 0: keys per token)");
  usage_check(options.key_block == 0 || (options.batches.empty() && options.rows == 1),
              "--kv-key-block: the one-sequence decode form only (--batch does not lay out pages of a key block "
              "yet; --rows does not time the key-block prefill)");
#if LOWBIT_WITH_CUDA
  return bench::run_kv_attention_bench(options);
#else
  LOWBIT_FAIL("bench kv-attention: this build of lowbit has no CUDA support (LOWBIT_CUDA=OFF)");
#endif
}

int bench_attention(const Args& args) {
  bench::FlashBenchOptions options;
  std::string head_dims = "128,64", dtypes = "f16,bf16";
  Options cli("lowbit bench attention",
              "flash_attention at prefill shapes on the GPU: one sequence of --seq-len tokens, per dtype, head_dim\n"
              "and mask (causal, none): min / median / max ms and TFLOPS. Its peer, PyTorch's\n"
              "scaled_dot_product_attention, runs beside it in `python -m lowbit.bench_attention`.");
  cli.integer("--seq-len", &options.seq_len, 1, (1LL << 31) - 1, "tokens (default 8192)");
  cli.integer("--heads", &options.heads, 1, 65535, "query heads (default 32)");
  cli.integer("--kv-heads", &options.kv_heads, 1, 65535, "KV heads (default 32)");
  cli.text("--head-dim", &head_dims, "D[,D]", "64, 128 or both (default 128,64)");
  cli.choice("--dtype", &dtypes, {"f16", "bf16", "f16,bf16"}, "f16, bf16 or both (default both)");
  cli.integer("--repeat", &options.repeat, 1, 100,
              "measure each case N times, the inputs allocated afresh at other addresses each time (default 1)");
  cli.number("--idle-ms", &options.idle_ms, 0.0, 10000.0,
             "the host sleeps this long before each timed sample, the GPU idle (default 0)");
  cli.number("--sample-ms", &options.sample_ms, 0.0, 10000.0,
             "launches back to back until a sample lasts this long; 20 keeps the GPU busy as a long prefill (default 1)");
  cli.text("--json", &options.json_path, "FILE", "also write the results as JSON");
  if (const auto status = cli.parse(args)) return *status;
  options.head_dims = parse_positive_integers(head_dims, "--head-dim", 128);
  for (const std::int64_t d : options.head_dims) {
    LOWBIT_CHECK(d == 64 || d == 128, "--head-dim: expected 64 or 128, got ", d);
  }
  options.dtypes = split_list(dtypes, "--dtype");
#if LOWBIT_WITH_CUDA
  return bench::run_flash_bench(options);
#else
  LOWBIT_FAIL("bench attention: this build of lowbit has no CUDA support (LOWBIT_CUDA=OFF)");
#endif
}

}  // namespace

int cmd_bench(const Args& args) {
  return run_subcommand(
      "lowbit bench",
      {{"kvquant", "KV-cache quantization (INT8 / INT4 of a T x D key or value matrix): GB/s against a copy\n"
                   "measured in the same run, and each kernel checked bit for bit against the CPU reference",
        bench_kvquant},
       {"gemm", "quantized GEMMs (INT8, INT4, fused epilogue, W4A16 / W8A16) against cuBLASLt and cuBLAS\n"
                "in the same run, each result checked first",
        bench_gemm},
       {"speed", "tokens/s of the engine as llama-bench measures them (pp512 prompt, tg128 generation),\n"
                 "repeated, with min / median / max",
        bench_speed},
       {"decode", "batch-1 decode tokens/s and device ms a token of a model at given contexts and KV policies,\n"
                  "against the bytes a token reads at the copy ceiling",
        bench_decode},
       {"kv-attention", "the decode attention over a cache of each policy at a layer's shape: % of a copy of\n"
                        "the bytes it reads, measured in the same run",
        bench_kv_attention},
       {"attention", "flash_attention at prefill shapes (f16 / bf16, head_dim 128 / 64, causal or not), in\n"
                     "TFLOPS; PyTorch's SDPA beside it: python -m lowbit.bench_attention",
        bench_attention},
       {"batch", "offline batched generation throughput at B = 1, 8, 16, ... (like llama-batched-bench)",
        cmd_bench_batch},
       {"serve", "a load generator against a running lowbit serve (requests/s, tokens/s, latencies)",
        cmd_bench_serve}},
      args);
}

}  // namespace lowbit::cli

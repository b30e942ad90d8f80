// `lowbit eval attention`: the seed-004 table. For each case (L, d_model, heads,
// kv_heads, format, causal): the four variants' time, the speed-up of ours over each,
// the global-memory bytes their kernels move (counted), peak memory (workspace +
// output) and the error against the CPU FP64 reference (on the first rows for long
// causal sequences), the attention kernel's and kernel 1's times alone (ours once per
// kernel 1: wgmma and mma.sync where the wgmma one runs; the cuBLAS peer's GEMM); and, per format, the weights' round-trip error and memory against
// FP32 and FP16. Without a GPU it prints the CPU-only parts and says so.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <optional>
#include <random>

#include "eval/attention_eval.h"
#include "bench/common/json.h"
#include "bench/common/run_info.h"
#include "commands.h"
#include "cpu/quantized_attention.h"
#include "cpu/block_formats.h"
#include "engine/gguf/dequant.h"
#include "engine/gguf/reader.h"
#include "engine/model.h"
#include "engine_setup.h"
#include "lowbit/error.h"

namespace lowbit::cli {
namespace {

constexpr BlockFormat kFormats[] = {BlockFormat::nf4, BlockFormat::mxfp4, BlockFormat::nvfp4};

struct RealLayer {  // layer 0 attention of a GGUF model, decoded to f32
  std::string model;
  std::int64_t d_model = 0, heads = 0, kv_heads = 0, head_dim = 0;
  std::vector<float> wq, wk, wv;
};

std::optional<RealLayer> load_real_layer(const std::string& option) {
  std::string path;
  try {
    path = resolve_model_path(option);
  } catch (const Error& e) {
    if (!option.empty()) throw;
    std::fprintf(stderr, "eval attention: no model file, random weights only (%s)\n", e.what());
    return std::nullopt;
  }
  const engine::GgufFile file = engine::GgufFile::open(path);
  const engine::ModelConfig config = engine::ModelConfig::from_gguf(file);
  RealLayer r;
  r.model = config.describe();
  r.d_model = config.d_model, r.heads = config.n_heads, r.kv_heads = config.n_kv_heads, r.head_dim = config.head_dim;
  r.wq = engine::dequantize_tensor(file.tensor("blk.0.attn_q.weight"));
  r.wk = engine::dequantize_tensor(file.tensor("blk.0.attn_k.weight"));
  r.wv = engine::dequantize_tensor(file.tensor("blk.0.attn_v.weight"));
  return r;
}

struct RoundTrip {
  BlockFormat format;
  double rel_rmse = 0, max_abs = 0;
  std::size_t bytes = 0, values = 0;
};

RoundTrip round_trip(BlockFormat f, const std::vector<float>& w, std::int64_t rows, std::int64_t cols) {
  EncodedWeight e = encode_weight(f, w, rows, cols);
  std::vector<float> back(w.size());
  cpu::block_decode(e.view(f), f, TensorView::matrix(back.data(), DType::f32, Device::cpu, rows, cols));
  RoundTrip r{f};
  double err2 = 0, ref2 = 0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    const double d = static_cast<double>(back[i]) - w[i];
    err2 += d * d, ref2 += static_cast<double>(w[i]) * w[i];
    r.max_abs = std::max(r.max_abs, std::abs(d));
  }
  r.rel_rmse = ref2 > 0 ? std::sqrt(err2 / ref2) : 0.0;
  r.bytes = block_memory_bytes(f, rows, cols);
  r.values = w.size();
  return r;
}

std::vector<float> random_weight(std::mt19937& rng, std::int64_t rows, std::int64_t cols) {
  std::normal_distribution<float> normal(0.0f, 1.0f / std::sqrt(static_cast<float>(cols)));
  std::vector<float> w(static_cast<std::size_t>(rows * cols));
  for (float& v : w) v = normal(rng);
  return w;
}

AttentionProblem make_problem(std::string name, const AttentionConfig& c, std::mt19937& rng, const RealLayer* real,
                              bool bias) {
  AttentionProblem p;
  p.name = std::move(name);
  p.config = c;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  p.x.resize(static_cast<std::size_t>(c.seq_len * c.d_model));
  for (auto& v : p.x) v = formats::from_float<formats::Half>(normal(rng));
  const std::int64_t nq = c.heads * c.head_dim, nkv = c.kv_heads * c.head_dim;
  p.wq = encode_weight(c.format, real ? real->wq : random_weight(rng, nq, c.d_model), nq, c.d_model);
  p.wk = encode_weight(c.format, real ? real->wk : random_weight(rng, nkv, c.d_model), nkv, c.d_model);
  p.wv = encode_weight(c.format, real ? real->wv : random_weight(rng, nkv, c.d_model), nkv, c.d_model);
  if (bias) {
    for (auto* b : {&p.bq, &p.bk, &p.bv}) {
      b->resize(static_cast<std::size_t>(b == &p.bq ? nq : nkv));
      for (auto& v : *b) v = formats::from_float<formats::Half>(0.5f * normal(rng));
    }
  }
  return p;
}

// Query rows checked against the reference: all of them for short sequences; the
// first 256 for long causal ones (they need only their own keys); none for long
// non-causal ones (every key of every row: too slow in FP64 on the CPU).
std::int64_t reference_rows(const AttentionConfig& c) {
  const double cost = static_cast<double>(c.seq_len) * static_cast<double>(attention_qkv_cols(c)) * c.d_model;
  if (cost <= 4e9) return c.seq_len;
  return c.causal ? std::min<std::int64_t>(c.seq_len, 256) : 0;
}

std::string describe(const AttentionConfig& c) {
  char text[160];
  std::snprintf(text, sizeof text, "L %lld, d_model %lld, H %lld / Hkv %lld x %lld, %s, %s",
                static_cast<long long>(c.seq_len), static_cast<long long>(c.d_model), static_cast<long long>(c.heads),
                static_cast<long long>(c.kv_heads), static_cast<long long>(c.head_dim), block_format_name(c.format),
                c.causal ? "causal" : "non-causal");
  return text;
}

[[maybe_unused]] double attention_flops(const AttentionConfig& c) {  // Q K^T and P V, halved by the causal mask (GPU rows only)
  const double full = 4.0 * static_cast<double>(c.seq_len) * c.seq_len * c.head_dim * c.heads;
  return c.causal ? full / 2 : full;
}

}  // namespace

int cmd_eval_attention(const Args& args) {
  std::string model_option, json_path, format_name = "nf4";
  std::int64_t max_l = 8192, max_naive_l = 2048, max_sequential_l = 4096;
  bool quick = false, cpu_only = false;
  Options cli("lowbit eval attention",
              "The seed-004 comparison: the four quantized-attention pipelines (naive sequential, tiled\n"
              "sequential, tiled fused flash-style, ours: fused dequant + tensor-core matmul and flash\n"
              "attention) over several cases, including layer 0 of the default model when it is cached, a\n"
              "large synthetic case (d_model 4096, 32 heads x 128, L up to --max-l) and a Llama-3-8B layer\n"
              "(L 4096, GQA 32/8); and the peer users have: the weights dequantized to f16 once, cuBLAS for\n"
              "Q|K|V, the same flash kernel (its time and its peak memory: the f16 weights it keeps).");
  cli.text("-m, --model", &model_option, "PATH", "GGUF file for the real-weights case (default: the cached model)");
  cli.choice("--format", &format_name, {"nf4", "mxfp4", "nvfp4"}, "format of the large synthetic cases (default nf4)");
  cli.integer("--max-l", &max_l, 128, 1 << 16, "longest L of the large synthetic case (default 8192)");
  cli.integer("--max-naive-l", &max_naive_l, 1, 1 << 20, "skip naive_sequential above this L (default 2048)");
  cli.integer("--max-sequential-l", &max_sequential_l, 1, 1 << 20,
              "skip both sequential baselines above this L (scores are H x L x L f32; default 4096)");
  cli.flag("--quick", &quick, "small cases only (L <= 1024)");
  cli.flag("--cpu-only", &cpu_only, "the CPU parts only, even with a GPU");
  cli.text("--json", &json_path, "FILE", "also write the results as JSON");
  if (const auto status = cli.parse(args)) return *status;
  const BlockFormat big_format = parse_block_format(format_name.c_str());
  const bench::RunInfo info = bench::collect_run_info();
  const bool gpu = !cpu_only && bench::gpu_available();
  std::mt19937 rng(std::random_device{}());

  const std::optional<RealLayer> real = load_real_layer(model_option);
  bench::Json root = bench::run_info_json("eval_attention", info);
  root.set("device", gpu ? info.gpu : std::string("cpu only"));

  // 1. Formats: round trip and memory, on the real q weight or a random 4096 x 4096 one.
  std::printf("# Quantized attention (seed 004)%s\n\n", gpu ? "" : " -- no GPU: CPU-only parts");
  std::vector<float> sample;
  std::int64_t rows = 4096, cols = 4096;
  std::string source = "random N(0, 1/4096) 4096 x 4096";
  if (real) {
    sample = real->wq, rows = real->heads * real->head_dim, cols = real->d_model;
    source = "layer 0 attn_q of " + real->model + " (" + std::to_string(rows) + " x " + std::to_string(cols) + ")";
  } else {
    sample = random_weight(rng, rows, cols);
  }
  std::printf("## Formats: round trip and memory (%s)\n\n| format | rel. RMSE | max abs err | bytes | bits/value | vs FP32 | "
              "vs FP16 |\n|---|---:|---:|---:|---:|---:|---:|\n", source.c_str());
  bench::Json formats_json = bench::Json::array();
  for (BlockFormat f : kFormats) {
    const RoundTrip r = round_trip(f, sample, rows, cols);
    const double bits = 8.0 * r.bytes / r.values;
    std::printf("| %s | %.4f | %.4g | %zu | %.3f | %.2fx | %.2fx |\n", block_format_name(f), r.rel_rmse, r.max_abs,
                r.bytes, bits, 32.0 / bits, 16.0 / bits);
    bench::Json j = bench::Json::object();
    j.set("format", block_format_name(f)).set("rel_rmse", r.rel_rmse).set("max_abs_error", r.max_abs);
    j.set("bytes", static_cast<std::int64_t>(r.bytes)).set("values", static_cast<std::int64_t>(r.values));
    j.set("vs_fp32", 32.0 / bits).set("vs_fp16", 16.0 / bits);
    formats_json.push(std::move(j));
  }
  root.set("weight_sample", source).set("formats", std::move(formats_json));

  // 2. Cases.
  std::vector<std::pair<std::string, AttentionConfig>> cases;
  if (!gpu) {
    cases.push_back({"cpu reference", {64, 256, 4, 2, 64, true, BlockFormat::nf4}});
  } else {
    cases.push_back({"random MHA", {256, 1024, 8, 8, 128, true, BlockFormat::nf4}});
    cases.push_back({"random GQA", {1024, 2048, 16, 4, 128, true, BlockFormat::mxfp4}});
    cases.push_back({"random non-causal", {512, 1024, 16, 16, 64, false, BlockFormat::nvfp4}});
    if (real) {
      for (BlockFormat f : kFormats) {
        cases.push_back({"layer 0 (real)", {512, real->d_model, real->heads, real->kv_heads, real->head_dim, true, f}});
      }
    }
    for (std::int64_t l = 512; l <= (quick ? 1024 : max_l); l *= 2) {
      cases.push_back({"large synthetic", {l, 4096, 32, 32, 128, true, big_format}});
    }
    if (!quick && max_l >= 4096) {  // a Llama-3-8B layer's attention shape (GQA 32/8)
      for (BlockFormat f : {BlockFormat::nf4, BlockFormat::nvfp4}) {
        cases.push_back({"llama3-8b layer", {4096, 4096, 32, 8, 128, true, f}});
      }
    }
  }
  bench::Json cases_json = bench::Json::array();
  std::string table;
  for (auto& [name, config] : cases) {
    std::fprintf(stderr, "case %s: %s\n", name.c_str(), describe(config).c_str());
    const bool is_real = name == "layer 0 (real)";
    AttentionProblem p = make_problem(name, config, rng, is_real ? &*real : nullptr, !is_real && config.seq_len <= 1024);
    const std::int64_t ref_rows = reference_rows(config);
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<double> ref =
        ref_rows > 0 ? cpu::attention_reference(p.x_view(), p.weights(), config, ref_rows) : std::vector<double>{};
    const double ref_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "  CPU FP64 reference: %lld rows in %.2f s\n", static_cast<long long>(ref_rows), ref_s);
    bench::Json cj = bench::Json::object();
    cj.set("case", name).set("seq_len", config.seq_len).set("d_model", config.d_model).set("heads", config.heads);
    cj.set("kv_heads", config.kv_heads).set("head_dim", config.head_dim).set("format", block_format_name(config.format));
    cj.set("causal", config.causal).set("reference_rows", ref_rows).set("reference_cpu_s", ref_s);
    if (!gpu) {
      char line[256];
      std::snprintf(line, sizeof line, "| %s | %s | CPU FP64 reference | %.1f ms (%lld rows) | | | | | |\n",
                    name.c_str(), describe(config).c_str(), ref_s * 1e3, static_cast<long long>(ref_rows));
      table += line;
      cases_json.push(std::move(cj));
      continue;
    }
#if LOWBIT_WITH_CUDA
    GpuEvalOptions options;
    options.max_naive_l = max_naive_l, options.max_sequential_l = max_sequential_l, options.ref_rows = ref_rows;
    const std::vector<VariantResult> results = run_gpu_variants(p, ref, options);
    const VariantResult& ours = *std::find_if(results.begin(), results.end(), [](const VariantResult& r) {
      return r.name == attention_variant_name(AttentionVariant::fused_two_kernel);
    });
    bench::Json vj = bench::Json::array();
    for (const VariantResult& r : results) {
      char line[512];
      const double tflops = r.attention_ms > 0 ? attention_flops(config) / (r.attention_ms * 1e9) : 0.0;
      if (r.ran) {
        std::snprintf(line, sizeof line, "| %s | %s | %s | %.3f | %.2fx | %.3f | %.1f | %s | %s | %s |\n", name.c_str(),
                      describe(config).c_str(), r.name.c_str(), r.ms, r.ms / ours.ms,
                      r.bytes_moved / 1e9, r.peak_bytes / 1048576.0,
                      r.max_abs_error >= 0 ? (std::to_string(r.max_abs_error) + " / " + std::to_string(r.max_rel_error)).c_str() : "-",
                      tflops > 0 ? (std::to_string(r.attention_ms) + " ms, " + std::to_string(tflops) + " TFLOPS").c_str() : "",
                      r.qkv_ms > 0 ? (std::to_string(r.qkv_ms) + " ms (" + r.qkv_kernel + ")").c_str() : "");
      } else {
        std::snprintf(line, sizeof line, "| %s | %s | %s | skipped: %s | | %.3f | %.1f | | | |\n", name.c_str(),
                      describe(config).c_str(), r.name.c_str(), r.skipped.c_str(),
                      r.bytes_moved / 1e9, r.peak_bytes / 1048576.0);
      }
      table += line;
      bench::Json j = bench::Json::object();
      j.set("variant", r.name).set("ran", r.ran).set("skipped", r.skipped);
      j.set("ms", r.ran ? bench::Json(r.ms) : bench::Json());
      j.set("ours_speedup", r.ran && ours.ran ? bench::Json(r.ms / ours.ms) : bench::Json());
      j.set("bytes_moved", static_cast<std::int64_t>(r.bytes_moved)).set("peak_bytes", static_cast<std::int64_t>(r.peak_bytes));
      j.set("max_abs_error", r.max_abs_error >= 0 ? bench::Json(r.max_abs_error) : bench::Json());
      j.set("max_rel_error", r.max_rel_error >= 0 ? bench::Json(r.max_rel_error) : bench::Json());
      j.set("attention_kernel_ms", r.attention_ms > 0 ? bench::Json(r.attention_ms) : bench::Json());
      j.set("attention_kernel_tflops", tflops > 0 ? bench::Json(tflops) : bench::Json());
      j.set("qkv_kernel_ms", r.qkv_ms > 0 ? bench::Json(r.qkv_ms) : bench::Json());
      j.set("qkv_kernel", r.qkv_kernel.empty() ? bench::Json() : bench::Json(r.qkv_kernel));
      vj.push(std::move(j));
    }
    cj.set("variants", std::move(vj));
#endif
    cases_json.push(std::move(cj));
  }
  std::printf("\n## Pipelines (%s)\n\n| case | shape | variant | ms (median) | vs ours | GB moved (counted) | peak MiB | "
              "max abs / rel err vs FP64 | attention kernel alone | kernel 1 (Q|K|V) alone |\n"
              "|---|---|---|---:|---:|---:|---:|---|---|---|\n%s",
              gpu ? info.gpu.c_str() : "no GPU: the four variants were not run; CPU FP64 reference only",
              table.c_str());
  if (!gpu) std::printf("\nNo GPU here: the GPU pipelines were not run (build with CUDA and run on a GPU machine).\n");
  root.set("cases", std::move(cases_json));
  if (!json_path.empty()) {
    root.write_file(json_path);
  }
  return 0;
}

}  // namespace lowbit::cli
